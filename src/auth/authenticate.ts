import { then, type Awaitable } from '../awaitable.js';
import type { CacheCounter } from '../cache/scoped-cache.js';
import { checkNewUserName } from '../catalogue/names.js';
import { DomainError } from '../catalogue/errors.js';
import type { Credentials, TokenCredential, TokenPageRequest, UserCredential, VisiblePage } from '../store/store.js';
import type { AnswerCaches } from '../cache/answer-caches.js';
import type { Viewer } from '../catalogue/access-rule.js';
import { scope } from '../catalogue/change-scopes.js';
import { isTokenShaped, TOKEN_PREFIX, tokenKey, tokenState, type TokenFailure } from '../catalogue/tokens.js';
import type { JwtConfig } from './jwt-config.js';
import type { JwtFailure, JwtVerifier } from './jwt.js';

export type AuthFailure = TokenFailure | JwtFailure | 'unknown_user';

/**
 * `tokenKey` names the presented token without revealing it (its SHA-256, base64), e.g. for rate limiting.
 * `pageAhead`: the page asked for, when it was read with the token.
 */
export type AuthResult =
  { ok: true; viewer: Viewer; tokenKey: string; pageAhead?: PageAhead } | { ok: false; reason: AuthFailure; detail?: string };

/** A page of the viewer's listing read with its token, and the caches' position before it was read. */
export interface PageAhead {
  request: TokenPageRequest;
  page: VisiblePage;
  readAt: number;
}

/** The page of the caller's listing a request will read, told from its query (undefined: none, or another). */
export type PageOf = (query: unknown) => TokenPageRequest | undefined;

export interface Authenticator {
  /**
   * Checks a presented bearer token. Never fails for a bad token; an unreachable database or JWKS does fail.
   * An opaque token is answered synchronously when cached (no promise on the hot path), and on SQLite when read
   * without a page. With `pageOf`, where the store reads a token and a page together, a token it must read comes
   * with the page `pageOf(query)` names, of its user's listing (an ordinary user's, whose token is active); a
   * cached token never asks for it.
   */
  authenticate(token: string, pageOf?: PageOf, query?: unknown): AuthResult | Promise<AuthResult>;
  close(): void;
}

/** A known opaque token: its stored credential and the one answer every request with it gets while it is usable. */
interface KnownToken {
  credential: TokenCredential;
  accepted: Readonly<AuthResult>;
}

const UNKNOWN_TOKEN: AuthResult = Object.freeze({ ok: false, reason: 'unknown' });

const JWS_COMPACT = /^[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*$/;

/**
 * Bearer tokens of two kinds side by side: Plant Store's own opaque `pst_` tokens (looked up by hash) and,
 * when configured, JWTs from an identity provider, whose user claim names a Plant Store user and whose
 * groups claim adds group memberships for this request only. Admin rights always come from the store.
 */
export function createAuthenticator(
  credentials: Credentials,
  caches: AnswerCaches,
  jwt?: JwtSupport,
  counters: { tokens?: CacheCounter; users?: CacheCounter } = {},
): Authenticator {
  // Known opaque tokens (by hash) and JWT users (by name); unknown ones are never cached, so junk cannot evict them.
  const tokens = caches.create<KnownToken>({ maxEntries: 100_000, ...(counters.tokens ? { counter: counters.tokens } : {}) });
  const users = caches.create<UserCredential>({ maxEntries: 100_000, ...(counters.users ? { counter: counters.users } : {}) });

  // Revocation and expiry are judged on every use; a usable token's answer (and so its viewer) is built once.
  const judge = ({ credential, accepted }: KnownToken): AuthResult => {
    const state = tokenState(credential, Date.now());
    return state === 'active' ? accepted : { ok: false, reason: state };
  };

  function opaque(token: string, pageOf: PageOf | undefined, query: unknown): Awaitable<AuthResult> {
    const usable = caches.usable();
    const key = tokenKey(token);
    const cached = usable ? tokens.get(key) : tokens.bypass();
    if (cached) return judge(cached);
    const readAt = caches.position;
    const read = (credential: TokenCredential | undefined): AuthResult => {
      if (!credential) return UNKNOWN_TOKEN;
      const viewer = Object.freeze({ userId: credential.userId, admin: credential.admin });
      const known: KnownToken = { credential, accepted: Object.freeze({ ok: true, viewer, tokenKey: key }) };
      if (usable) tokens.set(key, known, [scope.token(credential.tokenId), scope.account(credential.userId)], readAt);
      return judge(known);
    };
    const hash = Buffer.from(key, 'base64');
    const { findTokenWithPage } = credentials;
    const pageAhead = findTokenWithPage && pageOf?.(query);
    if (findTokenWithPage === undefined || pageAhead === undefined) return then(credentials.findToken(hash), read);
    return then(findTokenWithPage(hash, pageAhead, Date.now()), ({ credential, page }) => {
      const result = read(credential);
      return result.ok && page !== undefined ? { ...result, pageAhead: { request: pageAhead, page, readAt } } : result;
    });
  }

  function jwtUser(name: string): Awaitable<UserCredential | undefined> {
    const usable = caches.usable();
    const cached = usable ? users.get(name) : users.bypass();
    if (cached) return cached;
    const readAt = caches.position;
    return then(credentials.findUser(name), (user) => {
      if (user && usable) users.set(name, user, [scope.account(user.userId)], readAt);
      return user;
    });
  }

  return {
    authenticate(token, pageOf, query) {
      if (token.startsWith(TOKEN_PREFIX) || !jwt || !JWS_COMPACT.test(token)) {
        return isTokenShaped(token) ? opaque(token, pageOf, query) : { ok: false, reason: 'malformed' };
      }
      return bearerJwt(jwt, token, jwtUser, credentials);
    },
    close() {
      jwt?.verifier.close();
    },
  };
}

type JwtSupport = { config: JwtConfig; verifier: JwtVerifier };

/**
 * A JWT bearer: verified, then its user claim resolved (`knownUser`, cached) to a Plant Store user, who is
 * provisioned on first sight when the operator allows it. Groups come from the claim, admin rights only from
 * the store.
 */
async function bearerJwt(
  jwt: JwtSupport,
  token: string,
  knownUser: (name: string) => Awaitable<UserCredential | undefined>,
  credentials: Credentials,
): Promise<AuthResult> {
  const checked = await jwt.verifier.verify(token);
  if (!checked.ok) return checked;
  const user = (await knownUser(checked.user)) ?? (await provisionedUser(jwt, checked.user, credentials));
  if ('reason' in user) return user;
  // Admin rights come from Plant Store, and reach a JWT only where the operator allows it (--jwt-admins).
  const admin = user.admin && jwt.config.admins === 'allow';
  // Rate limited by what the token identifies (its issuer and subject), not by its spelling.
  return { ok: true, viewer: { userId: user.userId, admin, groups: checked.groups }, tokenKey: tokenKey(`jwt ${checked.identity}`) };
}

/** The user a JWT names that Plant Store does not know yet: created, or the refusal. */
async function provisionedUser(
  jwt: JwtSupport,
  name: string,
  credentials: Credentials,
): Promise<UserCredential | Extract<AuthResult, { ok: false }>> {
  if (jwt.config.unknownUsers === 'reject') return { ok: false, reason: 'unknown_user' };
  const claim = jwt.config.userClaim;
  try {
    checkNewUserName(name);
  } catch (err) {
    if (err instanceof DomainError)
      return { ok: false, reason: 'invalid_claims', detail: `the '${claim}' claim is not a usable user name` };
    throw err;
  }
  try {
    return await credentials.provisionUser(name);
  } catch (err) {
    // A name that looks like an existing user's is not taken: the claim is refused, the other user not named.
    if (err instanceof DomainError && err.kind === 'conflict') {
      return { ok: false, reason: 'invalid_claims', detail: `the '${claim}' claim names a user that looks like an existing one` };
    }
    throw err;
  }
}
