import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import type { RateLimitConfig } from '../config.js';
import { clientNetwork } from './client-network.js';
import { ApiError } from './error-codes.js';
import { MemoryCounters, RedisCounters, type RateLimitCounters, type RateLimitState } from './rate-limit-counters.js';

/**
 * Per-token rate limiting, with the IETF httpapi RateLimit header fields (draft-ietf-httpapi-ratelimit-headers:
 * `RateLimit-Policy: "default";q=<requests>;w=<seconds>` and `RateLimit: "default";r=<remaining>;t=<seconds>`),
 * and `Retry-After` on a 429.
 *
 * An authenticated request counts against its token (keyed by a SHA-256 of the token, never the token). A
 * request without a token, or with one that is rejected, counts against the client IP; once an IP is over
 * the limit its requests are refused even with a valid token until the window ends, so the answers cannot
 * be used to tell guessed tokens apart.
 */
export class RateLimiter {
  private readonly policyHeader: string;
  private readonly addressKeys = new WeakMap<object, string>();

  constructor(
    private readonly counters: RateLimitCounters,
    limit: RateLimitConfig,
    /** The policy's name in the RateLimit headers; a second policy's values follow the first's (`, "writes";…`). */
    private readonly policy = 'default',
    /** What a request over this policy's limit is refused with. */
    private readonly refusal: (seconds: number) => ApiError = (seconds) =>
      new ApiError('rate_limited', `Too many requests; retry in ${seconds} s`, { 'retry-after': String(seconds) }),
  ) {
    this.policyHeader = `"${policy}";q=${limit.max};w=${Math.max(1, Math.ceil(limit.windowMs / 1000))}`;
  }

  /** Counts a request against `key` alone (the write budget: a user's id), then calls `next` as `check` does. */
  checkKey(key: string, reply: FastifyReply, next: (err?: Error) => void): void {
    const state = this.counters.hit(key);
    if (state instanceof Promise) {
      state.then(
        (s) => this.finish(reply, s, undefined, next),
        (err: unknown) => next(err as Error),
      );
    } else {
      this.finish(reply, state, undefined, next);
    }
  }

  /**
   * Counts the request, sets the RateLimit headers, and calls `next` with a 429 when over the limit, or with
   * `outcome` (the authentication's own result: nothing, or its 401) otherwise. `tokenKey` is the SHA-256 of
   * the valid token the authenticator already computed, undefined without one.
   */
  check(
    request: FastifyRequest,
    reply: FastifyReply,
    tokenKey: string | undefined,
    outcome: Error | undefined,
    next: (err?: Error) => void,
  ): void {
    const ipKey = this.addressKey(request);
    // A token key is base64, which never holds the ':' of an address key, so the two cannot collide.
    const state = tokenKey === undefined ? this.counters.hit(ipKey) : this.counters.hit(tokenKey, ipKey);
    if (state instanceof Promise) {
      state.then(
        (s) => this.finish(reply, s, outcome, next),
        (err: unknown) => next(err as Error),
      );
    } else {
      this.finish(reply, state, outcome, next);
    }
  }

  /**
   * The counter key of the client's address, worked out once per connection (a keep-alive connection sends many
   * requests). The address is the socket's own peer: no proxy header is trusted.
   */
  private addressKey(request: FastifyRequest): string {
    const socket = request.raw.socket;
    let key = this.addressKeys.get(socket);
    if (key === undefined) {
      // A client that has already disconnected has no address left (request.ip is then undefined).
      if (request.ip === undefined) return 'ip:unknown';
      key = `ip:${clientNetwork(request.ip)}`;
      this.addressKeys.set(socket, key);
    }
    return key;
  }

  private finish(reply: FastifyReply, state: RateLimitState | undefined, outcome: Error | undefined, next: (err?: Error) => void): void {
    if (state === undefined) return next(outcome);
    const seconds = Math.max(1, Math.ceil(state.resetMs / 1000));
    appendHeader(reply, 'ratelimit-policy', this.policyHeader);
    appendHeader(reply, 'ratelimit', `"${this.policy}";r=${state.remaining};t=${seconds}`);
    if (state.allowed) return next(outcome);
    next(this.refusal(seconds));
  }

  /** Waits a moment for the counters at start, so that the first requests are counted too. */
  ready(timeoutMs = 1000): Promise<boolean> {
    return this.counters.ready(timeoutMs);
  }

  close(): Promise<void> {
    return this.counters.close();
  }
}

/** Sets a RateLimit header, or adds this policy's member to the one another policy set (a structured field list). */
function appendHeader(reply: FastifyReply, name: string, value: string): void {
  const earlier = reply.getHeader(name);
  reply.header(name, typeof earlier === 'string' && earlier !== '' ? `${earlier}, ${value}` : value);
}

export function createRateLimiter(
  limit: RateLimitConfig | undefined,
  redis: { url: string | undefined; prefix: string },
  log: FastifyBaseLogger,
): RateLimiter | undefined {
  if (limit === undefined) return undefined;
  const counters = redis.url === undefined ? new MemoryCounters(limit) : new RedisCounters(redis.url, redis.prefix, limit, log);
  return new RateLimiter(counters, limit);
}

/**
 * The write budget: every write (`POST /plants`, `PATCH` and `DELETE` of a plant, the `PUT` and `DELETE` of its
 * access; each route spends it with `userWriteBudget`, routes/protected.ts) counts against the user's own counter too
 * (every token and JWT of the user alike), so that one client cannot fill the disk; reads keep the general limit
 * alone. Past it, 429 (42903).
 */
export function createWriteBudget(
  limit: RateLimitConfig | undefined,
  redis: { url: string | undefined; prefix: string },
  log: FastifyBaseLogger,
): RateLimiter | undefined {
  if (limit === undefined) return undefined;
  const prefix = `${redis.prefix}writes:`;
  const counters = redis.url === undefined ? new MemoryCounters(limit) : new RedisCounters(redis.url, prefix, limit, log);
  return new RateLimiter(
    counters,
    limit,
    'writes',
    (seconds) =>
      new ApiError('write_rate_limited', `Too many writes for this user; retry in ${seconds} s`, { 'retry-after': String(seconds) }),
  );
}
