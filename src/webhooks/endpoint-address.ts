import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from 'node:dns';
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';

/**
 * Cloud metadata services at addresses outside the link-local ranges (AWS's IPv6 one, Alibaba's, Azure's host
 * agent). 169.254.169.254 and the other link-local ones are refused as link-local.
 */
const METADATA_ADDRESSES = new Set(['fd00:ec2::254', '100.100.100.200', '168.63.129.16']);

/**
 * Why a webhook may not be sent to `address` (an IP address), or undefined if it may. Link-local and metadata
 * addresses are always refused: a pasted URL must never reach a cloud's metadata service. Loopback, private,
 * unspecified and every other address not meant for the public internet are refused unless `allowPrivate`
 * (an operator whose receivers run inside their own network).
 */
export function addressRefusal(address: string, allowPrivate: boolean): string | undefined {
  if (!ipaddr.isValid(address)) return `${address} is not an IP address`;
  // An IPv4 address written as IPv6 (::ffff:127.0.0.1) is judged as the IPv4 address it is.
  const ip = ipaddr.process(address);
  // An IPv6 address that carries an IPv4 one (NAT64, 6to4, …) reaches it through a translator or a tunnel: judged
  // by it too.
  if (ip.kind() === 'ipv6') {
    for (const carried of carriedIPv4(ip as ipaddr.IPv6)) {
      const refused = addressRefusal(carried.toString(), allowPrivate);
      if (refused !== undefined) return `${address} carries ${carried.toString()}: ${refused}`;
    }
  }
  const range = ip.range();
  if (range === 'linkLocal' || METADATA_ADDRESSES.has(ip.toString())) {
    return `${address} is a link-local or cloud metadata address, which a webhook is never sent to`;
  }
  if (range === 'unicast' || allowPrivate) return undefined;
  return `${address} is a ${range} address, not a public one (PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=true allows private receivers)`;
}

/**
 * The IPv4 addresses an IPv6 address carries, in every form that can route to them: IPv4-compatible
 * (`::a.b.c.d`), IPv4-translated (`::ffff:0:a.b.c.d`), NAT64 (`64:ff9b::/96`, and the local-use `64:ff9b:1::/48`,
 * whose address skips the bits 64–71), 6to4 (`2002:AABB:CCDD::/48`), Teredo (`2001::/32`: the server, and the
 * client's address inverted in the last 32 bits) and ISATAP (an interface identifier `0:5efe:a.b.c.d`, with or
 * without the universal bit). IPv4-mapped addresses (`::ffff:a.b.c.d`) are IPv4 already (`ipaddr.process`).
 */
function carriedIPv4(ip: ipaddr.IPv6): ipaddr.IPv4[] {
  const p = ip.parts;
  const v4 = (high: number, low: number) => new ipaddr.IPv4([high >> 8, high & 0xff, low >> 8, low & 0xff]);
  const zero = (from: number, to: number) => p.slice(from, to).every((part) => part === 0);
  const carried: ipaddr.IPv4[] = [];
  // `::` and `::1` are judged as themselves.
  if (zero(0, 6) && !(p[6] === 0 && p[7]! <= 1)) carried.push(v4(p[6]!, p[7]!));
  if (zero(0, 4) && p[4] === 0xffff && p[5] === 0) carried.push(v4(p[6]!, p[7]!));
  if (p[0] === 0x64 && p[1] === 0xff9b) {
    if (p[2] === 1) carried.push(v4(p[3]!, ((p[4]! & 0xff) << 8) | (p[5]! >> 8)));
    carried.push(v4(p[6]!, p[7]!));
  }
  if (p[0] === 0x2002) carried.push(v4(p[1]!, p[2]!));
  if (p[0] === 0x2001 && p[1] === 0) carried.push(v4(p[2]!, p[3]!), v4(p[6]! ^ 0xffff, p[7]! ^ 0xffff));
  if ((p[4]! & 0xfdff) === 0 && p[5] === 0x5efe) carried.push(v4(p[6]!, p[7]!));
  return carried;
}

/** An endpoint URL's host as an IP address, if it is written as one (`[::1]` → `::1`). */
export function literalAddress(url: URL): string | undefined {
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  return isIP(host) === 0 ? undefined : host;
}

/** Why a webhook may not be sent to `url` as written (a literal address, or a name that is always local). */
export function urlRefusal(url: URL, allowPrivate: boolean): string | undefined {
  const address = literalAddress(url);
  if (address !== undefined) return addressRefusal(address, allowPrivate);
  const host = url.hostname.toLowerCase().replace(/\.$/, '');
  if (!allowPrivate && (host === 'localhost' || host.endsWith('.localhost'))) {
    return `${url.hostname} is this machine (PLANTSTORE_WEBHOOK_ALLOW_PRIVATE=true allows private receivers)`;
  }
  return undefined;
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

/**
 * A DNS lookup for the sender's connections that refuses the addresses `addressRefusal` refuses, after resolution:
 * a name that resolves (or is rebound) to a private address is refused at the moment of connecting.
 */
export function checkedLookup(allowPrivate: boolean) {
  return (hostname: string, options: LookupOptions, callback: LookupCallback): void => {
    dnsLookup(hostname, { ...options, all: true }, (err, addresses) => {
      if (err) return callback(err, []);
      const refused = addresses.map((a) => addressRefusal(a.address, allowPrivate)).find((why) => why !== undefined);
      if (refused !== undefined) {
        return callback(Object.assign(new Error(`refused: ${hostname} resolves to ${refused}`), { code: 'EWEBHOOKADDRESS' }), []);
      }
      if (options.all) return callback(null, addresses);
      const first = addresses[0]!;
      callback(null, first.address, first.family);
    });
  };
}
