import type { JwtConfig } from '../../auth/jwt-config.js';
import { fail, ok, reason, skip, warn, type Check } from './check.js';

/** What JWT verification serve would set up, and whether a configured JWKS answers with keys it can use. */
export async function jwtChecks(jwt: JwtConfig | undefined): Promise<Check[]> {
  if (!jwt) return [skip('jwt', "not configured: only Plant Store's own tokens are accepted")];
  const source = jwt.key.kind === 'jwks' ? `JWKS ${jwt.key.url}` : jwt.key.kind === 'public-key' ? 'a PEM public key' : 'a shared secret';
  const checks = [
    ok(
      'jwt',
      `${source}; algorithms ${jwt.algorithms.join(', ')}; issuer ${jwt.issuer.join(', ') || '(any)'}; audience ${jwt.audience.join(', ') || '(any)'}; ` +
        `user claim ${jwt.userClaim}; unknown users ${jwt.unknownUsers}; admins ${jwt.admins}`,
    ),
  ];
  const claimCheck = userClaimCheck(jwt);
  if (claimCheck) checks.push(claimCheck);
  if (jwt.key.kind === 'jwks') checks.push(await jwksCheck(jwt.key.url, jwt.algorithms));
  return checks;
}

/**
 * A user claim other than `sub` is one users can often change themselves at the provider (`preferred_username`,
 * `email`): whoever sets it to an existing Plant Store user's name acts as that user, and as an admin with
 * --jwt-admins allow.
 */
function userClaimCheck(jwt: JwtConfig): Check | undefined {
  if (jwt.userClaim === 'sub') return undefined;
  const risk = jwt.admins === 'allow' ? ', including an admin (--jwt-admins allow)' : '';
  return warn(
    'jwt user claim',
    `'${jwt.userClaim}' names the user: at many providers users can change it themselves, and act as any Plant Store user of that name${risk}`,
    "use a claim the provider fixes ('sub', with those ids as Plant Store user names), or make sure the provider does not let users change this one",
  );
}

interface Jwk {
  kty?: unknown;
  use?: unknown;
  alg?: unknown;
}

async function jwksCheck(url: string, algorithms: string[]): Promise<Check> {
  const fix = 'check --jwks-url / PLANTSTORE_JWKS_URL and that this host can reach the identity provider';
  let body: unknown;
  try {
    const response = await fetch(url, { signal: AbortSignal.timeout(5_000), headers: { accept: 'application/json' } });
    if (!response.ok) return fail('jwks', `${url} answered HTTP ${response.status}`, fix);
    body = await response.json();
  } catch (err) {
    return fail('jwks', `cannot fetch ${url}: ${reason((err as { cause?: unknown }).cause ?? err)}`, fix);
  }
  const keys = (body as { keys?: unknown }).keys;
  if (!Array.isArray(keys)) return fail('jwks', `${url} is not a JSON Web Key Set (no "keys" array)`, fix);
  // Only signing keys of an asymmetric type whose algorithm (when stated) is accepted can ever verify a token.
  const usable = (keys as Jwk[]).filter(
    (k) =>
      typeof k.kty === 'string' &&
      ['RSA', 'EC', 'OKP'].includes(k.kty) &&
      k.use !== 'enc' &&
      (k.alg === undefined || (typeof k.alg === 'string' && algorithms.includes(k.alg))),
  );
  if (usable.length === 0) {
    return fail(
      'jwks',
      `${url} has ${keys.length} key(s), none usable to verify ${algorithms.join(', ')} signatures`,
      'check --jwt-algorithms against the keys the provider publishes',
    );
  }
  return ok('jwks', `${url} answers with ${usable.length} usable signing key(s)`);
}
