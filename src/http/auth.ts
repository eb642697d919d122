import type { FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { checkToken, type TokenCheck } from '../access/tokens.js';
import type { Viewer } from '../access/viewer.js';
import type { Store } from '../store/store.js';
import { ApiError } from './error-catalogue.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** Set by the bearer authentication hook on protected routes. */
    viewer: Viewer | null;
  }
}

const REALM = 'realm="plantstore"';
const BEARER = /^Bearer +([^\s]+) *$/i;

const failures: Record<Exclude<TokenCheck, { ok: true }>['reason'], { name: 'invalid_token' | 'expired_token' | 'revoked_token'; message: string }> = {
  malformed: { name: 'invalid_token', message: 'The access token is malformed' },
  unknown: { name: 'invalid_token', message: 'The access token is not valid' },
  expired: { name: 'expired_token', message: 'The access token has expired' },
  revoked: { name: 'revoked_token', message: 'The access token has been revoked' },
};

function invalidToken(reason: keyof typeof failures): ApiError {
  const { name, message } = failures[reason];
  // RFC 6750 §3: a presented but unusable token gets error="invalid_token"; the token itself is never echoed.
  return new ApiError(name, message, {
    'www-authenticate': `Bearer ${REALM}, error="invalid_token", error_description="${message}"`,
  });
}

/**
 * The `bearerAuth` scheme of the contract, as an onRequest hook: it runs before the query is parsed and
 * validated, so a request without valid credentials gets 401 whatever its parameters.
 */
export function bearerAuthentication(store: Store): onRequestAsyncHookHandler {
  return async function authenticate(request: FastifyRequest) {
    const header = request.headers.authorization;
    const match = header === undefined ? null : BEARER.exec(header);
    if (!match) {
      if (header !== undefined && /^\s*bearer(\s|$)/i.test(header)) throw invalidToken('malformed');
      // RFC 6750 §3.1: no credentials (or another scheme) gets a bare challenge with no error code.
      throw new ApiError('missing_credentials', 'Authentication required: send "Authorization: Bearer <token>"', {
        'www-authenticate': `Bearer ${REALM}`,
      });
    }
    const result = await checkToken(store, match[1]!);
    if (!result.ok) throw invalidToken(result.reason);
    request.viewer = result.viewer;
  };
}
