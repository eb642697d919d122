/**
 * When to try a failed delivery again, after its n-th attempt (Standard Webhooks / Svix): at once, 5 s, 5 min,
 * 30 min, 2 h, 5 h, 10 h; after the last, it has failed for good.
 */
export const RETRY_DELAYS_MS = [0, 5_000, 5 * 60_000, 30 * 60_000, 2 * 3_600_000, 5 * 3_600_000, 10 * 3_600_000] as const;

/** Retry-After is honoured up to this long; a receiver cannot park a delivery for days. */
const MAX_RETRY_AFTER_MS = 10 * 3_600_000;

/**
 * The time of the next attempt after `attempts` attempts (this one included), or undefined when none is left.
 * A receiver's Retry-After (seconds, or an HTTP date) moves it later, never earlier.
 */
export function nextAttemptAt(attempts: number, now: number, retryAfter?: string | null): number | undefined {
  const delay = RETRY_DELAYS_MS[attempts];
  if (delay === undefined) return undefined;
  return now + Math.max(delay, retryAfterMs(retryAfter, now));
}

function retryAfterMs(header: string | null | undefined, now: number): number {
  if (!header) return 0;
  const seconds = /^\s*(\d+)\s*$/.exec(header);
  const ms = seconds ? Number(seconds[1]) * 1000 : Date.parse(header) - now;
  return Number.isFinite(ms) && ms > 0 ? Math.min(ms, MAX_RETRY_AFTER_MS) : 0;
}
