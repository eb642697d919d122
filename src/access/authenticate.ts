import { checkUserName } from '../catalogue/names.js';
import { DomainError } from '../errors.js';
import type { Store, TokenCredential, UserCredential } from '../store/store.js';
import type { JwtConfig } from './jwt-config.js';
import type { JwtFailure, JwtVerifier } from './jwt.js';
import { checkCredential, hashToken, isTokenShaped, TOKEN_PREFIX, type TokenFailure } from './tokens.js';
import { VersionedCache } from './versioned-cache.js';
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
export function createAuthenticator(store: Store, jwt?: { config: JwtConfig; verifier: JwtVerifier }, cache = true): Authenticator {
  // Known opaque tokens (by hash) and JWT users (by name); unknown ones are never cached, so junk cannot evict them.
  const tokens = new VersionedCache<TokenCredential>(store, 100_000, cache);
  const users = new VersionedCache<UserCredential>(store, 100_000, cache);

  async function opaque(token: string): Promise<AuthResult> {
    const version = tokens.begin();
    const hash = hashToken(token);
    const key = hash.toString('base64');
    let found = tokens.get(key);
    if (!found) {
      found = await store.findToken(hash);
      if (found) tokens.set(key, found, version);
    }
    return checkCredential(found, Date.now());
  }

  async function jwtUser(name: string): Promise<UserCredential | undefined> {
    const version = users.begin();
    let user = users.get(name);
    if (!user) {
      user = await store.findUser(name);
      if (user) users.set(name, user, version);
    }
    return user;
  }

  return {
    async authenticate(token) {
      if (token.startsWith(TOKEN_PREFIX) || !jwt || !JWS_COMPACT.test(token)) {
        return isTokenShaped(token) ? opaque(token) : { ok: false, reason: 'malformed' };
      }
      const checked = await jwt.verifier.verify(token);
      if (!checked.ok) return checked;
      let user = await jwtUser(checked.user);
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
