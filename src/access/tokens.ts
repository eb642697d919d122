import * as crypto from 'node:crypto';
import type { TokenCredential } from '../store/store.js';
import type { Viewer } from './viewer.js';

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

/** SHA-256 of a token; crypto.hash (Node 20.12+) is a one-shot, about twice as fast as createHash per request. */
export const hashToken: (token: string) => Buffer =
  typeof crypto.hash === 'function'
    ? (token) => crypto.hash('sha256', token, 'buffer')
    : (token) => crypto.createHash('sha256').update(token).digest();

export type TokenFailure = 'malformed' | 'unknown' | 'expired' | 'revoked';

export type TokenCheck = { ok: true; viewer: Viewer } | { ok: false; reason: TokenFailure };

export const isTokenShaped = (token: string): boolean => TOKEN_SHAPE.test(token);

/** The verdict on a stored credential (or none) at time `now`; revocation and expiry are checked on every use. */
export function checkCredential(found: TokenCredential | undefined, now: number): TokenCheck {
  if (!found) return { ok: false, reason: 'unknown' };
  if (found.revokedAt !== null) return { ok: false, reason: 'revoked' };
  if (found.expiresAt !== null && found.expiresAt <= now) return { ok: false, reason: 'expired' };
  return { ok: true, viewer: { userId: found.userId, admin: found.admin } };
}
