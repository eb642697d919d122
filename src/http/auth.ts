import type { onRequestHookHandler } from 'fastify';
import type { AuthFailure, AuthResult, Authenticator, PageAhead, PageOf } from '../auth/authenticate.js';
import { KeysUnavailableError } from '../auth/jwt.js';
import type { Viewer } from '../catalogue/access-rule.js';
import { ApiError, type ErrorName } from './error-codes.js';
import type { RateLimiter } from './rate-limit.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the bearer authentication hook on protected routes. */
    viewer: Viewer | null;
    /** The bearer token that authenticated the request (see `rightsNow`). */
    bearerToken: string | null;
    /** The page the route asked for ahead (its config's `pageAhead`), when it was read with the token. */
    pageAhead: PageAhead | null;
  }
  interface FastifyContextConfig {
    /**
     * The page of the caller's listing a route will read, told from its query before the query is validated: the
     * authenticator reads it with a token it must read (see Authenticator.authenticate). Undefined for any other.
     */
    pageAhead?: PageOf;
  }
}

const REALM = 'realm="plantstore"';
const BEARER = /^Bearer +([^\s]+) *$/i;

/** One catalogue entry and one human sentence per reason; the sentence is also the RFC 6750 error_description. */
const failures: Record<AuthFailure, { name: ErrorName; message: string }> = {
  malformed: { name: 'invalid_token', message: 'The access token is malformed' },
  unknown: { name: 'invalid_token', message: 'The access token is not valid' },
  expired: { name: 'expired_token', message: 'The access token has expired' },
  revoked: { name: 'revoked_token', message: 'The access token has been revoked' },
  not_yet_valid: { name: 'token_not_yet_valid', message: 'The access token is not valid yet (nbf)' },
  wrong_issuer: { name: 'token_wrong_issuer', message: 'The access token was issued by an untrusted issuer (iss)' },
  wrong_audience: { name: 'token_wrong_audience', message: 'The access token is not meant for this service (aud)' },
  bad_signature: { name: 'token_bad_signature', message: 'The access token signature is not valid' },
  algorithm_not_allowed: {
    name: 'token_algorithm_not_allowed',
    message: 'The access token is signed with an algorithm this service does not accept',
  },
  unknown_key: { name: 'token_unknown_key', message: 'The access token is signed with an unknown key (kid)' },
  invalid_claims: { name: 'token_invalid_claims', message: 'The access token claims are not valid' },
  unknown_user: { name: 'token_unknown_user', message: 'The access token names a user this service does not know' },
};

/** Why a request was refused by the bearer hook, as counted by metrics: a token failure or one of these two. */
export type AuthRefusal = AuthFailure | 'missing_credentials' | 'identity_provider_unavailable';

export const AUTH_REFUSALS = [
  ...(Object.keys(failures) as AuthFailure[]),
  'missing_credentials',
  'identity_provider_unavailable',
] as const satisfies readonly AuthRefusal[];

/** Keeps an error_description within RFC 6750's character set (no quotes or backslashes, printable ASCII). */
const quotable = (text: string): string => text.replace(/[^\x20-\x7e]|["\\]/g, "'");

function invalidToken(reason: AuthFailure, detail?: string): ApiError {
  const { name, message } = failures[reason];
  // The detail names a claim or a jose message, never the token itself.
  const full = detail ? `${message}: ${detail}` : message;
  // RFC 6750 §3: a presented but unusable token gets error="invalid_token"; the token itself is never echoed.
  return new ApiError(name, full, {
    'www-authenticate': `Bearer ${REALM}, error="invalid_token", error_description="${quotable(full)}"`,
  });
}

/**
 * Node keeps only the first of repeated Authorization headers; a proxy in front may use another one. Two
 * credentials in one request are refused rather than guessed between.
 */
function authorizationHeaders(rawHeaders: readonly string[]): number {
  let count = 0;
  for (let i = 0; i < rawHeaders.length; i += 2)
    if (rawHeaders[i]!.length === 13 && rawHeaders[i]!.toLowerCase() === 'authorization') count++;
  return count;
}

/**
 * The `bearerAuth` scheme of the contract, as an onRequest hook: it runs before the query is parsed and
 * validated, so a request without valid credentials gets 401 whatever its parameters. With a rate limiter,
 * the outcome decides what is counted (the token, or the client IP when there is no valid token), and a
 * request over the limit gets 429 instead.
 */
export function bearerAuthentication(
  authenticator: Authenticator,
  limiter?: RateLimiter,
  onRefused?: (reason: AuthRefusal) => void,
): onRequestHookHandler {
  // Callback style: a cached token is checked synchronously, with no promise per request.
  return function authenticate(request, reply, done) {
    const conclude = (tokenKey: string | undefined, outcome?: Error) =>
      limiter ? limiter.check(request, reply, tokenKey, outcome, done) : done(outcome);
    const header = request.headers.authorization;
    if (header !== undefined && authorizationHeaders(request.raw.rawHeaders) > 1) {
      return done(new ApiError('bad_request', 'Send exactly one Authorization header'));
    }
    const match = header === undefined ? null : BEARER.exec(header);
    if (!match) {
      if (header !== undefined && /^\s*bearer(\s|$)/i.test(header)) {
        onRefused?.('malformed');
        return conclude(undefined, invalidToken('malformed'));
      }
      onRefused?.('missing_credentials');
      // RFC 6750 §3.1: no credentials (or another scheme) gets a bare challenge with no error code.
      return conclude(
        undefined,
        new ApiError('missing_credentials', 'Authentication required: send "Authorization: Bearer <token>"', {
          'www-authenticate': `Bearer ${REALM}`,
        }),
      );
    }
    const finish = (result: AuthResult) => {
      if (!result.ok) {
        onRefused?.(result.reason);
        return conclude(undefined, invalidToken(result.reason, result.detail));
      }
      request.viewer = result.viewer;
      request.bearerToken = match[1]!;
      if (result.pageAhead !== undefined) request.pageAhead = result.pageAhead;
      conclude(result.tokenKey);
    };
    const failed = (err: unknown) => {
      if (!(err instanceof KeysUnavailableError)) return done(err as Error);
      request.log.warn({ err: err.message }, 'JWKS unavailable');
      onRefused?.('identity_provider_unavailable');
      done(
        new ApiError('identity_provider_unavailable', "The identity provider's signing keys cannot be fetched; retry later", {
          'retry-after': String(err.retryAfterSeconds),
        }),
      );
    };
    let result: AuthResult | Promise<AuthResult>;
    try {
      result = authenticator.authenticate(match[1]!, request.routeOptions.config.pageAhead, request.query);
    } catch (err) {
      return failed(err);
    }
    if (result instanceof Promise) result.then(finish, failed);
    else finish(result);
  };
}

/**
 * The rights of an authenticated request's caller as they are now: the same token checked again (from the caches,
 * which every committed change reaches within the freshness bound), or undefined when it no longer authenticates
 * (revoked, expired, its user removed). A long response reads each part with them (see PlantListing.stream).
 */
export async function rightsNow(authenticator: Authenticator, token: string): Promise<Viewer | undefined> {
  const result = await authenticator.authenticate(token);
  return result.ok ? result.viewer : undefined;
}
