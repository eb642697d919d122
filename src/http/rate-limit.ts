import type { FastifyBaseLogger, FastifyReply, FastifyRequest } from 'fastify';
import { Redis } from 'ioredis';
import type { RateLimitConfig } from '../config.js';
import { ApiError } from './error-catalogue.js';

/** One counter's state after a request was counted. */
export interface RateLimitState {
  allowed: boolean;
  remaining: number;
  /** Milliseconds until the window of the counter that decided ends. */
  resetMs: number;
}

/**
 * Fixed-window request counters. `hit(key, guard)` counts one request against `key`; when `guard` is given
 * and that counter is already over the limit, the request is refused without being counted.
 */
export interface RateLimitCounters {
  /** Synchronous for in-process counters; undefined when the counters cannot be reached (fail open). */
  hit(key: string, guard?: string): RateLimitState | undefined | Promise<RateLimitState | undefined>;
  /** Resolves to false when the counters cannot be reached within `timeoutMs`. */
  ready(timeoutMs: number): Promise<boolean>;
  close(): Promise<void>;
}

/** Counters kept at most, so a flood of client addresses cannot grow the map without bound. */
const MAX_COUNTERS = 1_000_000;

/** In-process counters: one Map lookup per request, no promise. Expired windows are swept once a window. */
export class MemoryCounters implements RateLimitCounters {
  private readonly counters = new Map<string, { count: number; resetAt: number }>();
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly limit: RateLimitConfig) {
    this.sweeper = setInterval(() => {
      const now = Date.now();
      for (const [key, counter] of this.counters) if (counter.resetAt <= now) this.counters.delete(key);
    }, limit.windowMs);
    this.sweeper.unref();
  }

  hit(key: string, guard?: string): RateLimitState {
    const now = Date.now();
    if (guard !== undefined) {
      const blocking = this.counters.get(guard);
      if (blocking !== undefined && blocking.resetAt > now && blocking.count > this.limit.max) {
        return { allowed: false, remaining: 0, resetMs: blocking.resetAt - now };
      }
    }
    let counter = this.counters.get(key);
    if (counter === undefined || counter.resetAt <= now) {
      // At the cap, the oldest counter goes (a Map iterates in insertion order).
      if (counter === undefined && this.counters.size >= MAX_COUNTERS) this.counters.delete(this.counters.keys().next().value!);
      counter = { count: 0, resetAt: now + this.limit.windowMs };
      this.counters.set(key, counter);
    }
    counter.count++;
    return {
      allowed: counter.count <= this.limit.max,
      remaining: Math.max(0, this.limit.max - counter.count),
      resetMs: counter.resetAt - now,
    };
  }

  async ready(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {
    clearInterval(this.sweeper);
  }
}

// KEYS[1]: the counter to charge; KEYS[2] (optional): a counter that, when over the limit, refuses the request.
// One round trip, atomic: every instance sees the same count.
const HIT_SCRIPT = `
local max = tonumber(ARGV[1])
if KEYS[2] then
  local blocking = tonumber(redis.call('GET', KEYS[2]) or '0')
  if blocking > max then
    local ttl = redis.call('PTTL', KEYS[2])
    if ttl > 0 then return {-1, ttl} end
  end
end
local count = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  ttl = tonumber(ARGV[2])
end
return {count, ttl}
`;

type HitCommand = (numberOfKeys: number, ...args: Array<string | number>) => Promise<[number, number]>;

/**
 * Counters in Redis, shared by every instance (and every worker). Fails open: when Redis is down or slow,
 * requests are served uncounted and a warning is logged (at most every 10 s), because refusing every
 * request would turn a Redis outage into an outage of the whole service.
 */
export class RedisCounters implements RateLimitCounters {
  private readonly redis: Redis;
  private lastWarning = 0;

  constructor(
    url: string,
    private readonly prefix: string,
    private readonly limit: RateLimitConfig,
    private readonly log: FastifyBaseLogger,
  ) {
    this.redis = new Redis(url, {
      // Fail fast instead of queueing requests while disconnected, and never wait long for an answer.
      enableOfflineQueue: false,
      maxRetriesPerRequest: 0,
      commandTimeout: 500,
      connectTimeout: 2000,
      lazyConnect: false,
    });
    this.redis.defineCommand('plantstoreHit', { lua: HIT_SCRIPT });
    // Connection errors are reported through hit() failures; this listener keeps ioredis from printing them.
    this.redis.on('error', () => {});
  }

  async hit(key: string, guard?: string): Promise<RateLimitState | undefined> {
    const command = (this.redis as unknown as { plantstoreHit: HitCommand }).plantstoreHit.bind(this.redis);
    try {
      const [count, ttl] =
        guard === undefined
          ? await command(1, this.prefix + key, this.limit.max, this.limit.windowMs)
          : await command(2, this.prefix + key, this.prefix + guard, this.limit.max, this.limit.windowMs);
      if (count < 0) return { allowed: false, remaining: 0, resetMs: ttl };
      return { allowed: count <= this.limit.max, remaining: Math.max(0, this.limit.max - count), resetMs: ttl };
    } catch (err) {
      const now = Date.now();
      if (now - this.lastWarning >= 10_000) {
        this.lastWarning = now;
        this.log.warn({ err: (err as Error).message }, 'rate limit counters unreachable in Redis; serving requests without rate limiting');
      }
      return undefined;
    }
  }

  ready(timeoutMs: number): Promise<boolean> {
    if (this.redis.status === 'ready') return Promise.resolve(true);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.redis.off('ready', onReady);
        resolve(false);
      }, timeoutMs);
      const onReady = () => {
        clearTimeout(timer);
        resolve(true);
      };
      this.redis.once('ready', onReady);
    });
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}

const POLICY = 'default';

/**
 * The unit an address is counted as: an IPv4 address, or the /64 network of an IPv6 address, since one
 * IPv6 client usually holds a whole /64 and could otherwise start a fresh budget at every address.
 */
export function clientNetwork(ip: string): string {
  if (!ip.includes(':')) return ip;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped) return mapped[1]!;
  const [head = '', tail] = ip.toLowerCase().split('%', 1)[0]!.split('::', 2);
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array<string>(Math.max(0, 8 - left.length - right.length)).fill('0'), ...right];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

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
  ) {
    this.policyHeader = `"${POLICY}";q=${limit.max};w=${Math.max(1, Math.ceil(limit.windowMs / 1000))}`;
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
    reply.header('ratelimit-policy', this.policyHeader);
    reply.header('ratelimit', `"${POLICY}";r=${state.remaining};t=${seconds}`);
    if (state.allowed) return next(outcome);
    next(new ApiError('rate_limited', `Too many requests; retry in ${seconds} s`, { 'retry-after': String(seconds) }));
  }

  /** Waits a moment for the counters at start, so that the first requests are counted too. */
  ready(timeoutMs = 1000): Promise<boolean> {
    return this.counters.ready(timeoutMs);
  }

  close(): Promise<void> {
    return this.counters.close();
  }
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
