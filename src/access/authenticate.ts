import { checkUserName } from '../catalogue/names.js';
import { DomainError } from '../errors.js';
import type { Store } from '../store/store.js';
import type { JwtConfig } from './jwt-config.js';
import type { JwtFailure, JwtVerifier } from './jwt.js';
import { checkToken, TOKEN_PREFIX, type TokenFailure } from './tokens.js';
import type { Viewer } from './viewer.js';

export type AuthFailure = TokenFailure | JwtFailure | 'unknown_user';

export type AuthResult = { ok: true; viewer: Viewer } | { ok: false; reason: AuthFailure; detail?: string };

export interface Authenticator {
  /** Checks a presented bearer token. Never throws for a bad token; an unreachable database or JWKS does throw. */
  authenticate(token: string): Promise<AuthResult>;
  close(): void;
}

const JWS_COMPACT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/**
 * Bearer tokens of two kinds side by side: Plant Store's own opaque `pst_` tokens (looked up by hash) and,
 * when configured, JWTs from an identity provider, whose user claim names a Plant Store user and whose
 * groups claim adds group memberships for this request only. Admin rights always come from the store.
 */
export function createAuthenticator(store: Store, jwt?: { config: JwtConfig; verifier: JwtVerifier }): Authenticator {
  return {
    async authenticate(token) {
      if (token.startsWith(TOKEN_PREFIX) || !jwt || !JWS_COMPACT.test(token)) return checkToken(store, token);
      const checked = await jwt.verifier.verify(token);
      if (!checked.ok) return checked;
      let user = await store.findUser(checked.user);
      if (!user) {
        if (jwt.config.unknownUsers === 'reject') return { ok: false, reason: 'unknown_user' };
        try {
          checkUserName(checked.user);
        } catch (err) {
          if (err instanceof DomainError) return { ok: false, reason: 'invalid_claims', detail: `the '${jwt.config.userClaim}' claim is not a usable user name` };
          throw err;
        }
        user = await store.provisionUser(checked.user);
      }
      return { ok: true, viewer: { userId: user.userId, admin: user.admin, groups: checked.groups } };
    },
    close() {
      jwt?.verifier.close();
    },
  };
}
