import * as crypto from 'node:crypto';

/**
 * Opaque bearer tokens: a recognisable prefix (so secret scanners can find leaked ones) and 256 random
 * bits. Only the SHA-256 of a token is stored; with that much entropy a slow password hash adds nothing.
 */
export const TOKEN_PREFIX = 'pst_';
const TOKEN_SHAPE = /^pst_[A-Za-z0-9_-]{43}$/;

export function generateToken(): { token: string; hash: Buffer } {
  const token = TOKEN_PREFIX + crypto.randomBytes(32).toString('base64url');
  return { token, hash: hashToken(token) };
}

/**
 * The SHA-256 of a token in base64: what a presented token is cached and rate limited by, so no raw token is
 * kept in memory. crypto.hash (Node 20.12+) hashes straight to base64, without a Buffer per request.
 */
export const tokenKey: (token: string) => string =
  typeof crypto.hash === 'function'
    ? (token) => crypto.hash('sha256', token, 'base64')
    : (token) => crypto.createHash('sha256').update(token).digest('base64');

/** The same SHA-256 as stored (and looked up): one definition of a token's hash, so the two cannot drift. */
export const hashToken = (token: string): Buffer => Buffer.from(tokenKey(token), 'base64');

export type TokenFailure = 'malformed' | 'unknown' | 'expired' | 'revoked';

export const isTokenShaped = (token: string): boolean => TOKEN_SHAPE.test(token);

/** A stored token's state at a moment: revocation and expiry are judged on every use, never cached. */
export type TokenState = 'active' | 'revoked' | 'expired';

/** When a token was revoked and when it expires (epoch ms; null for never). */
export interface TokenLifetime {
  revokedAt: number | null;
  expiresAt: number | null;
}

export function tokenState({ revokedAt, expiresAt }: TokenLifetime, now: number): TokenState {
  if (revokedAt !== null) return 'revoked';
  if (expiresAt !== null && expiresAt <= now) return 'expired';
  return 'active';
}

/**
 * The same rule as an SQL condition on the `tokens` table (named `table` when given), at `now`: an SQL expression,
 * such as a statement's parameter.
 */
export function activeTokenCondition(now: string, table?: string): string {
  const column = (name: string) => (table === undefined ? name : `${table}.${name}`);
  return `${column('revoked_at')} IS NULL AND (${column('expires_at')} IS NULL OR ${column('expires_at')} > ${now})`;
}

/** The rule as a condition with `now` written in, for counting active tokens. */
export function activeTokenSql(now: number): string {
  if (!Number.isSafeInteger(now)) throw new Error(`not a time: ${now}`);
  return activeTokenCondition(String(now));
}
