import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { addressRefusal, checkedLookup, urlRefusal } from '../../src/webhooks/endpoint-address.js';

// Where a webhook may go: public addresses always; loopback and private ones when the operator allows them;
// link-local and cloud metadata ones never. Judged as written (webhooks add) and after DNS (each connection).

describe('webhook receiver addresses', () => {
  it('refuses private addresses unless allowed, and link-local and metadata ones always', () => {
    const publicOnes = ['93.184.216.34', '2606:4700::1111'];
    const privateOnes = [
      '127.0.0.1',
      '127.1.2.3',
      '::1',
      '10.0.0.1',
      '172.16.5.4',
      '192.168.1.1',
      '0.0.0.0',
      '::',
      'fc00::1',
      '100.64.0.1',
      '::ffff:10.0.0.1',
      '::ffff:127.0.0.1',
    ];
    const neverOnes = [
      '169.254.169.254',
      '169.254.0.1',
      'fe80::1',
      'fd00:ec2::254',
      '100.100.100.200',
      '168.63.129.16',
      '::ffff:169.254.169.254',
      // Carried by IPv6: IPv4-compatible, IPv4-translated, NAT64, 6to4, Teredo server and client, ISATAP.
      '::a9fe:a9fe',
      '::ffff:0:a9fe:a9fe',
      '64:ff9b::a9fe:a9fe',
      '64:ff9b:1:a9fe:a9:fe00::',
      '2002:a9fe:a9fe::1',
      '2001:0:a9fe:a9fe::1',
      '2001:0:4136:e378:8000:63bf:5601:5601',
      '2001:db8::200:5efe:a9fe:a9fe',
      '2001:db8::5efe:a9fe:a9fe',
    ];
    for (const address of publicOnes) assert.equal(addressRefusal(address, false), undefined, address);
    for (const address of privateOnes) {
      assert.match(String(addressRefusal(address, false)), /not a public one/, address);
      assert.equal(addressRefusal(address, true), undefined, address);
    }
    for (const address of neverOnes) assert.match(String(addressRefusal(address, true)), /link-local or cloud metadata/, address);
  });

  it('reads addresses however the URL writes them, and names that are this machine', () => {
    for (const text of [
      'http://0x7f000001/',
      'http://2130706433/',
      'http://0177.0.0.1/',
      'http://[::1]:8080/',
      'http://localhost/',
      'http://api.localhost./',
    ]) {
      assert.notEqual(urlRefusal(new URL(text), false), undefined, text);
    }
    assert.equal(urlRefusal(new URL('https://hooks.example.com/plants'), false), undefined, 'a name is judged when it resolves');
    assert.equal(urlRefusal(new URL('http://localhost:3000/'), true), undefined);
  });

  it('refuses a name that resolves to a private address, after resolution', async () => {
    const lookup = (allow: boolean, all: boolean) =>
      new Promise<unknown>((resolve, reject) =>
        checkedLookup(allow)('localhost', { all }, (err, address) => (err ? reject(err) : resolve(address))),
      );
    await assert.rejects(lookup(false, false), { code: 'EWEBHOOKADDRESS', message: /refused: localhost resolves to .* loopback/ });
    await assert.rejects(lookup(false, true), { code: 'EWEBHOOKADDRESS' });
    assert.ok(Array.isArray(await lookup(true, true)));
    assert.match(String(await lookup(true, false)), /^(127\.0\.0\.1|::1)$/);
  });
});
