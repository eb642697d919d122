import type { FastifyBaseLogger } from 'fastify';
import { Redis } from 'ioredis';
import type { RateLimitConfig } from '../config.js';

// Where rate-limit counts are kept: in this process, or in Redis for every instance.

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

/** ioredis's rejection of a command not answered within `commandTimeout`. */
const COMMAND_TIMED_OUT = 'Command timed out';

type HitCommand = (numberOfKeys: number, ...args: Array<string | number>) => Promise<[number, number]>;

/**
 * The database of a SELECT that the server refused (a number past its `databases`), when `err` is that refusal.
 * ioredis selects the URL's database on each connection and reports a refusal as an 'error' event only, then goes
 * on in database 0.
 */
export function refusedDatabase(err: unknown): string | undefined {
  const command = (err as { command?: { name?: unknown; args?: unknown[] } } | undefined)?.command;
  return err instanceof Error && err.name === 'ReplyError' && command?.name === 'select' ? String(command.args?.[0]) : undefined;
}

/**
 * Counters in Redis, shared by every instance (and every worker). Fails open: when Redis is down or slow,
 * requests are served uncounted and a warning is logged (at most every 10 s), because refusing every
 * request would turn a Redis outage into an outage of the whole service. A connection whose SELECT of the URL's
 * database the server refused counts as Redis away too, with one error logged: counting in database 0 instead would
 * mix these counters with whatever else lives there.
 */
export class RedisCounters implements RateLimitCounters {
  private readonly redis: Redis;
  private lastWarning = 0;
  /** The refused SELECT of the current connection, if the server refused it. */
  private selectRefused: Error | undefined;
  /** Whether that refusal was logged: once, until a connection selects the database again. */
  private selectRefusalLogged = false;

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
    // Each connection selects the database anew, between its 'connect' and its 'ready'.
    this.redis.on('connect', () => {
      this.selectRefused = undefined;
    });
    // Connection errors are reported through hit() failures; this listener keeps ioredis from printing them.
    this.redis.on('error', (err) => {
      const database = refusedDatabase(err);
      if (database === undefined) return;
      this.selectRefused = err;
      if (this.selectRefusalLogged) return;
      this.selectRefusalLogged = true;
      this.log.error(
        { err: err.message, prefix },
        `Redis refuses to select database ${database} (the path of PLANTSTORE_REDIS_URL / --redis-url); serving requests without rate limiting`,
      );
    });
    this.redis.on('ready', () => {
      if (this.selectRefused === undefined) this.selectRefusalLogged = false;
    });
  }

  async hit(key: string, guard?: string): Promise<RateLimitState | undefined> {
    if (this.selectRefused !== undefined) return undefined;
    const command = (this.redis as unknown as { plantstoreHit: HitCommand }).plantstoreHit.bind(this.redis);
    try {
      const [count, ttl] =
        guard === undefined
          ? await command(1, this.prefix + key, this.limit.max, this.limit.windowMs)
          : await command(2, this.prefix + key, this.prefix + guard, this.limit.max, this.limit.windowMs);
      if (count < 0) return { allowed: false, remaining: 0, resetMs: ttl };
      return { allowed: count <= this.limit.max, remaining: Math.max(0, this.limit.max - count), resetMs: ttl };
    } catch (err) {
      // No answer on a ready connection: it may be one the network dropped silently (a NAT or firewall that forgot
      // it), which the kernel gives up on only after many minutes, and every request would wait out the timeout
      // meanwhile. A new connection fails fast until it is ready; a Redis that is only slow answers on it again.
      if ((err as Error).message === COMMAND_TIMED_OUT && this.redis.status === 'ready') this.redis.disconnect(true);
      const now = Date.now();
      if (now - this.lastWarning >= 10_000) {
        this.lastWarning = now;
        this.log.warn({ err: (err as Error).message }, 'rate limit counters unreachable in Redis; serving requests without rate limiting');
      }
      return undefined;
    }
  }

  ready(timeoutMs: number): Promise<boolean> {
    if (this.redis.status === 'ready') return Promise.resolve(this.selectRefused === undefined);
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.redis.off('ready', onReady);
        resolve(false);
      }, timeoutMs);
      const onReady = () => {
        clearTimeout(timer);
        resolve(this.selectRefused === undefined);
      };
      this.redis.once('ready', onReady);
    });
  }

  async close(): Promise<void> {
    this.redis.disconnect();
  }
}
