import { createPublicKey, type KeyObject } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { invalidInput } from '../catalogue/errors.js';
import type { SettingValues } from '../settings.js';

/**
 * How JWTs from an identity provider are verified. Plain data (it crosses to `serve --workers` processes as
 * JSON); the key material is parsed again, once, where the verifier is built.
 */
export interface JwtConfig {
  /** Exactly one key source. */
  key: { kind: 'secret'; secret: string } | { kind: 'public-key'; pem: string } | { kind: 'jwks'; url: string };
  /** Accepted `alg` values: a subset of what the key can verify; never `none`, never HMAC with a public key. */
  algorithms: string[];
  /** Accepted `iss` values (one is typical). */
  issuer: string[];
  /** Accepted `aud` values; the token must name at least one. */
  audience: string[];
  /** The claim whose value is the Plant Store user name (`sub` by default). */
  userClaim: string;
  /** An optional claim listing group names that count like stored memberships. */
  groupsClaim: string | undefined;
  clockToleranceSeconds: number;
  /** A subject with no Plant Store user yet: `reject` (401) or `provision` (create an ordinary user). */
  unknownUsers: 'reject' | 'provision';
  /**
   * Whether a JWT naming an admin acts as one (`allow`) or as an ordinary user (`deny`, the default): whoever
   * controls the identity provider's claim for that name would otherwise hold every plant.
   */
  admins: 'allow' | 'deny';
  /** Least time between two JWKS fetches triggered by an unknown `kid` (or by a failed fetch). */
  jwksCooldownSeconds: number;
  /** Background JWKS refresh period, so keys the provider withdraws stop being trusted. */
  jwksRefreshSeconds: number;
}

/** The JWT settings, as read from the settings table (settings.ts). */
export type JwtSettings = Pick<
  SettingValues,
  | 'jwtSecretFile'
  | 'jwtSecret'
  | 'jwtPublicKey'
  | 'jwksUrl'
  | 'jwtIssuer'
  | 'jwtAudience'
  | 'jwtUserClaim'
  | 'jwtGroupsClaim'
  | 'jwtClockTolerance'
  | 'jwtAlgorithms'
  | 'jwtUnknownUsers'
  | 'jwtAdmins'
  | 'jwksCooldown'
  | 'jwksRefresh'
>;

const HMAC = { HS256: 32, HS384: 48, HS512: 64 } as const;
const RSA = ['RS256', 'RS384', 'RS512', 'PS256', 'PS384', 'PS512'];
const EC_BY_CURVE: Record<string, string> = { prime256v1: 'ES256', secp384r1: 'ES384', secp521r1: 'ES512' };
const ED = ['EdDSA', 'Ed25519'];
/** What a JWKS may sign with: asymmetric only, so a published "oct" key can never verify anything. */
const JWKS_ALGORITHMS = [...RSA, 'ES256', 'ES384', 'ES512', ...ED];

/** The algorithms a PEM public key can verify, from its type and curve. */
export function algorithmsForPublicKey(key: KeyObject): string[] {
  switch (key.asymmetricKeyType) {
    case 'rsa':
      return RSA;
    case 'rsa-pss':
      return RSA.filter((a) => a.startsWith('PS'));
    case 'ec': {
      const alg = EC_BY_CURVE[key.asymmetricKeyDetails?.namedCurve ?? ''];
      if (!alg) throw invalidInput(`JWT public key: unsupported elliptic curve ${key.asymmetricKeyDetails?.namedCurve ?? '(unknown)'}`);
      return [alg];
    }
    case 'ed25519':
      return ED;
    default:
      throw invalidInput(
        `JWT public key: unsupported key type ${key.asymmetricKeyType ?? '(unknown)'}; use RSA, EC (P-256/384/521) or Ed25519`,
      );
  }
}

export function parsePublicKey(pem: string): KeyObject {
  try {
    const key = createPublicKey(pem);
    if (key.type !== 'public') throw new Error('not a public key');
    return key;
  } catch (err) {
    throw invalidInput(`JWT public key: not a PEM public key or certificate (${(err as Error).message})`);
  }
}

function readText(what: string, path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    throw invalidInput(`cannot read ${what} file "${path}": ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
}

/**
 * Checks how the JWT settings go together: exactly one key source, an issuer and an audience, algorithms the
 * key can verify. Returns undefined when no key source is configured (then only Plant Store's own tokens are
 * accepted).
 */
export function loadJwtConfig(v: JwtSettings): JwtConfig | undefined {
  const secret = v.jwtSecretFile ? readText('JWT secret', v.jwtSecretFile).replace(/\r?\n$/, '') : v.jwtSecret;
  const publicKeyInput = v.jwtPublicKey;
  const jwksUrl = v.jwksUrl;
  const sources = [secret, publicKeyInput, jwksUrl].filter((s) => s !== undefined && s !== '');
  const { jwtIssuer: issuer, jwtAudience: audience } = v;
  if (sources.length === 0) {
    if (issuer.length > 0 || audience.length > 0) {
      throw invalidInput(
        'JWT issuer/audience are set but no key: set PLANTSTORE_JWT_SECRET, PLANTSTORE_JWT_PUBLIC_KEY or PLANTSTORE_JWKS_URL',
      );
    }
    return undefined;
  }
  if (sources.length > 1) {
    throw invalidInput('set only one JWT key source: PLANTSTORE_JWT_SECRET(_FILE), PLANTSTORE_JWT_PUBLIC_KEY or PLANTSTORE_JWKS_URL');
  }
  if (issuer.length === 0) throw invalidInput('JWT verification needs the expected issuer: set PLANTSTORE_JWT_ISSUER (--jwt-issuer)');
  if (audience.length === 0)
    throw invalidInput('JWT verification needs the expected audience: set PLANTSTORE_JWT_AUDIENCE (--jwt-audience)');

  let key: JwtConfig['key'];
  let possible: string[];
  if (secret) {
    const bytes = Buffer.byteLength(secret, 'utf8');
    // RFC 7518 §3.2: an HMAC key must be at least as long as the hash output.
    if (bytes < HMAC.HS256) throw invalidInput(`JWT secret is ${bytes} bytes; HS256 needs at least 32`);
    key = { kind: 'secret', secret };
    possible = Object.entries(HMAC)
      .filter(([, min]) => bytes >= min)
      .map(([alg]) => alg);
  } else if (publicKeyInput) {
    const pem = publicKeyInput.includes('-----BEGIN') ? publicKeyInput : readText('JWT public key', publicKeyInput);
    possible = algorithmsForPublicKey(parsePublicKey(pem));
    key = { kind: 'public-key', pem };
  } else {
    let url: URL;
    try {
      url = new URL(jwksUrl!);
    } catch {
      throw invalidInput(`invalid JWKS URL "${jwksUrl}"`);
    }
    if (url.protocol !== 'https:' && url.protocol !== 'http:') throw invalidInput(`invalid JWKS URL "${jwksUrl}": use https://`);
    key = { kind: 'jwks', url: url.href };
    possible = JWKS_ALGORITHMS;
  }

  const wanted = v.jwtAlgorithms;
  const refused = wanted.filter((alg) => !possible.includes(alg));
  if (refused.length > 0) {
    throw invalidInput(`JWT algorithm(s) ${refused.join(', ')} cannot be used with this ${key.kind} key; possible: ${possible.join(', ')}`);
  }
  return {
    key,
    algorithms: wanted.length > 0 ? wanted : possible,
    issuer,
    audience,
    userClaim: v.jwtUserClaim,
    groupsClaim: v.jwtGroupsClaim,
    clockToleranceSeconds: v.jwtClockTolerance,
    unknownUsers: v.jwtUnknownUsers,
    admins: v.jwtAdmins,
    jwksCooldownSeconds: v.jwksCooldown,
    jwksRefreshSeconds: v.jwksRefresh,
  };
}
