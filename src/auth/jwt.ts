import { createSecretKey, type KeyObject } from 'node:crypto';
import { createRemoteJWKSet, customFetch, errors, jwtVerify, type JWTPayload, type JWTVerifyGetKey } from 'jose';
import { parsePublicKey, type JwtConfig } from './jwt-config.js';
import { CONTROL_CHARACTERS } from '../catalogue/names.js';

/** Why a JWT was refused; each maps to one Error code and one RFC 6750 error_description. */
export type JwtFailure =
  | 'malformed'
  | 'expired'
  | 'not_yet_valid'
  | 'wrong_issuer'
  | 'wrong_audience'
  | 'bad_signature'
  | 'algorithm_not_allowed'
  | 'unknown_key'
  | 'invalid_claims';

export type JwtCheck =
  /** `identity`: the issuer and subject, what the token stands for whatever its spelling (see rate limiting). */
  { ok: true; user: string; groups: string[]; identity: string } | { ok: false; reason: JwtFailure; detail?: string };

/**
 * The identity provider's keys cannot be fetched: not the token's fault, so a 503 rather than a 401, with the
 * seconds until a fetch is tried again as its Retry-After.
 */
export class KeysUnavailableError extends Error {
  constructor(
    message: string,
    readonly retryAfterSeconds: number,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'KeysUnavailableError';
  }
}

/** Groups taken from one token's claim; more are ignored rather than letting a token make the query huge. */
export const MAX_CLAIM_GROUPS = 256;

export interface JwtVerifier {
  verify(token: string): Promise<JwtCheck>;
  /** Fetches the JWKS now (JWKS only); resolves false if the endpoint did not answer. */
  warmUp(): Promise<boolean>;
  close(): void;
}

/** A claim by name; a dotted name that is not itself a claim is a path (`realm_access.roles`). */
function claim(payload: JWTPayload, name: string): unknown {
  if (name in payload) return payload[name];
  let value: unknown = payload;
  for (const part of name.split('.')) {
    if (value === null || typeof value !== 'object' || !(part in value)) return undefined;
    value = (value as Record<string, unknown>)[part];
  }
  return value;
}

/** The remote key set's part in a refusal: the seconds until it fetches the keys again. */
interface KeyFetches {
  retryAfterSeconds(): number;
}

function mapError(err: unknown, remote: KeyFetches | undefined): JwtCheck {
  if (err instanceof errors.JWTExpired) return { ok: false, reason: 'expired' };
  if (err instanceof errors.JWTClaimValidationFailed) {
    if (err.claim === 'nbf' && err.reason === 'check_failed') return { ok: false, reason: 'not_yet_valid' };
    if (err.claim === 'iss' && err.reason === 'check_failed') return { ok: false, reason: 'wrong_issuer' };
    if (err.claim === 'aud' && err.reason === 'check_failed') return { ok: false, reason: 'wrong_audience' };
    return {
      ok: false,
      reason: 'invalid_claims',
      detail: err.reason === 'missing' ? `the '${err.claim}' claim is missing` : `the '${err.claim}' claim is not valid`,
    };
  }
  if (err instanceof errors.JWSSignatureVerificationFailed) return { ok: false, reason: 'bad_signature' };
  if (err instanceof errors.JOSEAlgNotAllowed) return { ok: false, reason: 'algorithm_not_allowed' };
  if (err instanceof errors.JOSENotSupported) {
    return /"alg"/.test(err.message)
      ? { ok: false, reason: 'algorithm_not_allowed' }
      : { ok: false, reason: 'malformed', detail: err.message };
  }
  if (err instanceof errors.JWKSNoMatchingKey || err instanceof errors.JWKSMultipleMatchingKeys)
    return { ok: false, reason: 'unknown_key' };
  if (err instanceof errors.JWTInvalid || err instanceof errors.JWSInvalid || err instanceof errors.JWKInvalid)
    return { ok: false, reason: 'malformed' };
  // Not the token's fault: the JWKS endpoint is down or answered something that is not a key set.
  if (
    remote !== undefined &&
    (err instanceof errors.JWKSTimeout ||
      err instanceof errors.JWKSInvalid ||
      err instanceof TypeError ||
      (err as errors.JOSEError).code === 'ERR_JOSE_GENERIC')
  ) {
    throw new KeysUnavailableError(`identity provider keys unavailable: ${(err as Error).message}`, remote.retryAfterSeconds(), {
      cause: err,
    });
  }
  // Anything else jose refuses is still a bad token, never a 5xx.
  return { ok: false, reason: 'malformed' };
}

/**
 * A JWKS client on jose's remote key set, tuned so that keys survive an outage: the cached set never
 * expires on its own (a background refresh replaces it, and a failed refresh keeps it), an unknown `kid`
 * refetches at most once per cooldown, and after a failed fetch no new fetch starts before the cooldown.
 */
function remoteKeySet(config: JwtConfig, url: string): KeyFetches & { getKey: JWTVerifyGetKey; reload(): Promise<void>; close(): void } {
  const cooldownMs = config.jwksCooldownSeconds * 1000;
  let failedAt = -Infinity;
  const guardedFetch = async (input: string, init: RequestInit): Promise<Response> => {
    if (Date.now() - failedAt < cooldownMs) throw new TypeError('JWKS endpoint failed recently; waiting for the cooldown');
    try {
      const response = await fetch(input, init);
      if (response.status !== 200) {
        failedAt = Date.now();
        return response;
      }
      // jose starts its cooldown only once a set is loaded, so a 200 that is no key set (a proxy's error page)
      // would be fetched again for every unknown kid: it counts as a failure here.
      const body = await response.text();
      if (!isKeySet(body)) failedAt = Date.now();
      return new Response(body, { status: 200, headers: response.headers });
    } catch (err) {
      failedAt = Date.now();
      throw err;
    }
  };
  const jwks = createRemoteJWKSet(new URL(url), {
    cacheMaxAge: Infinity,
    cooldownDuration: cooldownMs,
    timeoutDuration: 5_000,
    [customFetch]: guardedFetch,
  });
  const timer =
    config.jwksRefreshSeconds > 0
      ? setInterval(() => void jwks.reload().catch(() => {}), config.jwksRefreshSeconds * 1000).unref()
      : undefined;
  // A fetch that timed out or failed just now is not tried again before the cooldown; at least a second, as
  // Retry-After counts whole seconds and a failure inside the cooldown's last second would otherwise say 0.
  const retryAfterSeconds = () => Math.max(1, Math.ceil((failedAt + cooldownMs - Date.now()) / 1000));
  return { getKey: jwks, reload: () => jwks.reload(), close: () => clearInterval(timer), retryAfterSeconds };
}

/** Whether `body` is JSON of a key set's shape, as jose checks it: an object whose `keys` is an array of objects. */
function isKeySet(body: string): boolean {
  try {
    const parsed: unknown = JSON.parse(body);
    const keys = (parsed as { keys?: unknown } | null)?.keys;
    return Array.isArray(keys) && keys.every((key) => typeof key === 'object' && key !== null && !Array.isArray(key));
  } catch {
    return false;
  }
}

export function createJwtVerifier(config: JwtConfig): JwtVerifier {
  let key: KeyObject | JWTVerifyGetKey;
  let remote: ReturnType<typeof remoteKeySet> | undefined;
  if (config.key.kind === 'secret') key = createSecretKey(Buffer.from(config.key.secret, 'utf8'));
  else if (config.key.kind === 'public-key') key = parsePublicKey(config.key.pem);
  else {
    remote = remoteKeySet(config, config.key.url);
    key = remote.getKey;
  }
  const options = {
    algorithms: config.algorithms,
    issuer: config.issuer,
    audience: config.audience,
    clockTolerance: config.clockToleranceSeconds,
    // A bearer token with no expiry would be valid forever; refuse it like the strictest gateways do.
    requiredClaims: ['exp'],
  };

  return {
    async verify(token) {
      let payload: JWTPayload;
      try {
        ({ payload } = await jwtVerify(token, key as KeyObject, options));
      } catch (err) {
        return mapError(err, remote);
      }
      const user = claim(payload, config.userClaim);
      if (typeof user !== 'string' || user === '') {
        return {
          ok: false,
          reason: 'invalid_claims',
          detail: `the '${config.userClaim}' claim naming the user is missing or not a string`,
        };
      }
      // Control characters (NUL included) are never a real name, and would reach cache keys and queries (PostgreSQL
      // refuses NUL in text).
      if (CONTROL_CHARACTERS.test(user))
        return { ok: false, reason: 'invalid_claims', detail: `the '${config.userClaim}' claim holds control characters` };
      let groups: string[] = [];
      if (config.groupsClaim !== undefined) {
        const value = claim(payload, config.groupsClaim);
        if (typeof value === 'string') groups = [value];
        else if (Array.isArray(value) && value.every((g) => typeof g === 'string')) groups = value.slice(0, MAX_CLAIM_GROUPS);
        else if (value !== undefined) {
          return {
            ok: false,
            reason: 'invalid_claims',
            detail: `the '${config.groupsClaim}' claim must be a list of group names, or one name`,
          };
        }
        if (groups.some((g) => CONTROL_CHARACTERS.test(g))) {
          return { ok: false, reason: 'invalid_claims', detail: `the '${config.groupsClaim}' claim holds control characters` };
        }
      }
      // A JWT's signature has several base64url spellings (unused bits of its last character), all valid: the
      // token is known by what it identifies instead.
      const identity = JSON.stringify([payload.iss ?? '', typeof payload.sub === 'string' ? payload.sub : user]);
      return { ok: true, user, groups, identity };
    },
    async warmUp() {
      if (!remote) return true;
      try {
        await remote.reload();
        return true;
      } catch {
        return false;
      }
    },
    close() {
      remote?.close();
    },
  };
}
