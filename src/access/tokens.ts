import * as crypto from 'node:crypto';
import type { TokenCredential } from '../store/store.js';

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
 * kept in memory. Per request: crypto.hash (Node 20.12+) straight to base64 takes about a third of the time of
 * hashing to a Buffer and converting it (no Buffer is allocated).
 */
export const tokenKey: (token: string) => string =
  typeof crypto.hash === 'function'
    ? (token) => crypto.hash('sha256', token, 'base64')
    : (token) => crypto.createHash('sha256').update(token).digest('base64');

/** The same SHA-256 as stored (and looked up): one definition of a token's hash, so the two cannot drift. */
export const hashToken = (token: string): Buffer => Buffer.from(tokenKey(token), 'base64');

export type TokenFailure = 'malformed' | 'unknown' | 'expired' | 'revoked';

export const isTokenShaped = (token: string): boolean => TOKEN_SHAPE.test(token);

/** Why a stored credential cannot be used at time `now`; revocation and expiry are checked on every use. */
export function credentialProblem(found: TokenCredential, now: number): 'revoked' | 'expired' | undefined {
  if (found.revokedAt !== null) return 'revoked';
  if (found.expiresAt !== null && found.expiresAt <= now) return 'expired';
  return undefined;
}
