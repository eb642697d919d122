import { loadJwtConfig, type JwtConfig, type JwtConfigInput } from './access/jwt-config.js';
import { invalidInput } from './errors.js';

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;
export type LogLevel = (typeof LOG_LEVELS)[number];

/** Validated configuration. Only the entry points read the environment; everything else gets this. */
export interface Config {
  /** SQLite file path (or `:memory:`), or a postgres:// URL. */
  db: string;
  /** Optional PostgreSQL read replica for listings; tokens are always checked on the primary. */
  readDb: string | undefined;
  /** PostgreSQL connections per process. */
  poolSize: number;
  /** PostgreSQL statement timeout, so a stuck query becomes a 503 instead of a hung request. */
  statementTimeoutMs: number;
  /** HTTP worker processes for `serve` (one per core is typical). */
  workers: number;
  host: string;
  port: number;
  logLevel: LogLevel;
  /** Log one line per request (method, path, status, time); never headers. */
  logRequests: boolean;
  /** Seconds to wait for in-flight requests on SIGTERM before closing anyway. */
  shutdownGraceSeconds: number;
  /** In-memory caches of token checks and first pages, emptied on every committed change (any process). */
  cache: boolean;
  /** JWTs from an identity provider, accepted beside Plant Store's own tokens; undefined when not configured. */
  jwt: JwtConfig | undefined;
  /**
   * Browser origins (`https://app.example`, or `*` for any) allowed to call the API cross-origin. Empty: CORS
   * is off and no `Access-Control-*` header is ever sent, so only same-origin pages and non-browser clients call.
   */
  corsOrigins: string[];
  /** Connection and request-size limits of the HTTP server (slow or oversized clients). */
  http: HttpLimits;
  /** Requests per window per bearer token (per client IP without a valid token); undefined when off. */
  rateLimit: RateLimitConfig | undefined;
  /** Redis that holds the rate-limit counters, shared by every instance; in-process counters when undefined. */
  redisUrl: string | undefined;
  /** Prefix of the rate-limit keys in Redis, so several deployments can share one Redis. */
  redisKeyPrefix: string;
  /** Prometheus metrics on a separate admin listener; undefined (the default) collects nothing. */
  metrics: MetricsListen | undefined;
  /**
   * Full listings (streamed responses): how many at once per process and per user (past them, 503 and 429),
   * and the slowest client served (bytes a second over a window of seconds; slower ones are cut off).
   */
  listings: { perProcess: number; perUser: number; minBytesPerSecond: number; rateWindowSeconds: number };
}

export interface HttpLimits {
  /** Request line plus headers, in bytes (Node's maxHeaderSize); more is a 431. */
  maxHeaderBytes: number;
  /** Request target (path and query), in bytes; more is a 414. */
  maxUrlBytes: number;
  /** Time to receive the request line and headers (slowloris); then 408 and the connection closes. */
  headersTimeoutMs: number;
  /** Time to receive the whole request; then 408 and the connection closes. */
  requestTimeoutMs: number;
  /** Idle time of a keep-alive connection between requests. */
  keepAliveTimeoutMs: number;
  /** Open connections per process; further ones are closed as they arrive. */
  maxConnections: number;
}

export interface RateLimitConfig {
  max: number;
  windowMs: number;
}

/** Where the admin listener serves `/metrics`: never the public port, so metrics are not exposed by accident. */
export interface MetricsListen {
  host: string;
  port: number;
}

/** Loose input: command-line flags win over `PLANTSTORE_*` environment variables, which win over defaults. */
export interface ConfigInput extends JwtConfigInput {
  db?: string | undefined;
  readDb?: string | undefined;
  poolSize?: string | number | undefined;
  statementTimeoutMs?: string | number | undefined;
  workers?: string | number | undefined;
  host?: string | undefined;
  port?: string | number | undefined;
  logLevel?: string | undefined;
  logRequests?: string | boolean | undefined;
  shutdownGraceSeconds?: string | number | undefined;
  cache?: string | boolean | undefined;
  /** Comma-separated origins (`--cors-origins`, `PLANTSTORE_CORS_ORIGINS`). */
  corsOrigins?: string | undefined;
  maxHeaderBytes?: string | number | undefined;
  maxUrlBytes?: string | number | undefined;
  headersTimeoutMs?: string | number | undefined;
  requestTimeoutMs?: string | number | undefined;
  keepAliveTimeoutMs?: string | number | undefined;
  maxConnections?: string | number | undefined;
  /** `<requests>/<window>`, e.g. `30000/1m`, or `off`. */
  rateLimit?: string | undefined;
  redisUrl?: string | undefined;
  redisKeyPrefix?: string | undefined;
  metricsHost?: string | undefined;
  metricsPort?: string | number | undefined;
  maxListings?: string | number | undefined;
  maxListingsPerUser?: string | number | undefined;
  listingMinRate?: string | number | undefined;
  listingRateWindow?: string | number | undefined;
}

export const DEFAULT_DB = './data/plantstore.db';

/**
 * 500 requests a second per token, sustained: no interactive or batch client comes near it, and it is twice
 * what each of the benchmark's 100 tokens sends while the service is saturated (about 250 a second), so a
 * load test never meets it however long it runs; yet one leaked or runaway token cannot take the service.
 */
export const DEFAULT_RATE_LIMIT = '30000/1m';

const WINDOW_UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000 } as const;

/** `30000/1m`, `100/10s`, `20/500ms` (a missing window count means 1: `30000/m`), or `off`. */
export function parseRateLimit(text: string): RateLimitConfig | undefined {
  const value = text.trim().toLowerCase();
  if (['off', 'false', 'none', '0'].includes(value)) return undefined;
  const match = /^([1-9][0-9]{0,8}) *\/ *([1-9][0-9]{0,6})? *(ms|s|m|h)$/.exec(value);
  const windowMs = match ? Number(match[2] ?? 1) * WINDOW_UNIT_MS[match[3] as keyof typeof WINDOW_UNIT_MS] : 0;
  if (!match || windowMs > 86_400_000) {
    throw invalidInput(`invalid rate limit "${text}": expected <requests>/<window> (e.g. 30000/1m, 100/10s) or off`);
  }
  return { max: Number(match[1]), windowMs };
}

function pick<T>(flag: T | undefined, env: T | undefined, fallback: T): T {
  return flag ?? env ?? fallback;
}

function integerIn(name: string, value: string | number, min: number, max: number): number {
  const text = String(value).trim();
  if (!/^[0-9]+$/.test(text) || Number(text) < min || Number(text) > max) {
    throw invalidInput(`invalid ${name} "${value}": expected a whole number from ${min} to ${max}`);
  }
  return Number(text);
}

function bool(name: string, value: string | boolean): boolean {
  if (typeof value === 'boolean') return value;
  const v = value.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(v)) return true;
  if (['0', 'false', 'no', 'off'].includes(v)) return false;
  throw invalidInput(`invalid ${name} "${value}": expected true or false`);
}

/** Exact origins only (scheme, host, optional port; no path), so an allow-list entry cannot match more than it says. */
function origins(value: string): string[] {
  const list = value
    .split(',')
    .map((o) => o.trim())
    .filter((o) => o !== '');
  for (const origin of list) {
    let parsed: URL | undefined;
    try {
      parsed = new URL(origin);
    } catch {
      parsed = undefined;
    }
    if (origin !== '*' && (parsed === undefined || !/^https?:$/.test(parsed.protocol) || parsed.origin !== origin || origin.includes('*'))) {
      throw invalidInput(`invalid CORS origin "${origin}": expected an origin like https://app.example or http://localhost:3000 (no path, no trailing slash), or *`);
    }
  }
  return [...new Set(list)];
}

export function loadConfig(input: ConfigInput = {}, env: NodeJS.ProcessEnv = {}): Config {
  const db = pick(input.db, env.PLANTSTORE_DB, DEFAULT_DB);
  if (db.trim() === '') throw invalidInput('invalid database: PLANTSTORE_DB / --db must not be empty');
  const host = pick(input.host, env.PLANTSTORE_HOST, '127.0.0.1');
  if (host.trim() === '') throw invalidInput('invalid host: must not be empty');
  const logLevel = pick(input.logLevel, env.PLANTSTORE_LOG_LEVEL, 'info');
  if (!(LOG_LEVELS as readonly string[]).includes(logLevel)) {
    throw invalidInput(`invalid log level "${logLevel}": expected one of ${LOG_LEVELS.join(', ')}`);
  }
  const readDb = input.readDb ?? env.PLANTSTORE_READ_DB;
  if (readDb !== undefined && readDb !== '' && !/^postgres(ql)?:\/\//i.test(readDb)) {
    throw invalidInput('invalid read database: PLANTSTORE_READ_DB / --read-db must be a postgres:// URL');
  }
  if (readDb && !/^postgres(ql)?:\/\//i.test(db)) {
    throw invalidInput('a read replica (--read-db) needs a PostgreSQL primary (--db postgres://...)');
  }
  return {
    db,
    readDb: readDb || undefined,
    poolSize: integerIn('pool size', pick<string | number>(input.poolSize, env.PLANTSTORE_PG_POOL_SIZE, 10), 1, 1000),
    statementTimeoutMs: integerIn(
      'statement timeout',
      pick<string | number>(input.statementTimeoutMs, env.PLANTSTORE_PG_STATEMENT_TIMEOUT_MS, 5000),
      1,
      3_600_000,
    ),
    workers: integerIn('workers', pick<string | number>(input.workers, env.PLANTSTORE_WORKERS, 1), 1, 256),
    host,
    port: integerIn('port', pick<string | number>(input.port, env.PLANTSTORE_PORT, 8080), 0, 65535),
    logLevel: logLevel as LogLevel,
    logRequests: bool('PLANTSTORE_LOG_REQUESTS', pick<string | boolean>(input.logRequests, env.PLANTSTORE_LOG_REQUESTS, true)),
    shutdownGraceSeconds: integerIn(
      'shutdown grace',
      pick<string | number>(input.shutdownGraceSeconds, env.PLANTSTORE_SHUTDOWN_GRACE_SECONDS, 10),
      0,
      3600,
    ),
    cache: bool('PLANTSTORE_CACHE', pick<string | boolean>(input.cache, env.PLANTSTORE_CACHE, true)),
    jwt: loadJwtConfig(input, env),
    corsOrigins: origins(pick(input.corsOrigins, env.PLANTSTORE_CORS_ORIGINS, '')),
    http: loadHttpLimits(input, env),
    rateLimit: parseRateLimit(pick(input.rateLimit, env.PLANTSTORE_RATE_LIMIT, DEFAULT_RATE_LIMIT)),
    redisUrl: loadRedisUrl(pick<string | undefined>(input.redisUrl, env.PLANTSTORE_REDIS_URL, undefined)),
    redisKeyPrefix: pick(input.redisKeyPrefix, env.PLANTSTORE_REDIS_KEY_PREFIX, 'plantstore:ratelimit:'),
    metrics: loadMetricsListen(input, env),
    listings: {
      perProcess: integerIn('maximum listings', pick<string | number>(input.maxListings, env.PLANTSTORE_MAX_LISTINGS, 16), 1, 100_000),
      perUser: integerIn('maximum listings per user', pick<string | number>(input.maxListingsPerUser, env.PLANTSTORE_MAX_LISTINGS_PER_USER, 4), 1, 100_000),
      minBytesPerSecond: integerIn('listing minimum rate', pick<string | number>(input.listingMinRate, env.PLANTSTORE_LISTING_MIN_RATE, 1024), 0, 1_000_000_000),
      rateWindowSeconds: integerIn('listing rate window', pick<string | number>(input.listingRateWindow, env.PLANTSTORE_LISTING_RATE_WINDOW, 30), 1, 3600),
    },
  };
}

function loadRedisUrl(url: string | undefined): string | undefined {
  if (url === undefined || url.trim() === '') return undefined;
  if (!/^rediss?:\/\/./i.test(url.trim())) throw invalidInput('invalid Redis URL: PLANTSTORE_REDIS_URL / --redis-url must be a redis:// or rediss:// URL');
  return url.trim();
}

function loadHttpLimits(input: ConfigInput, env: NodeJS.ProcessEnv): HttpLimits {
  const number = (name: string, flag: string | number | undefined, variable: string, fallback: number, min: number, max: number) =>
    integerIn(name, pick<string | number>(flag, env[variable], fallback), min, max);
  const limits: HttpLimits = {
    maxHeaderBytes: number('maximum header size', input.maxHeaderBytes, 'PLANTSTORE_MAX_HEADER_BYTES', 16_384, 1024, 1_048_576),
    maxUrlBytes: number('maximum URL size', input.maxUrlBytes, 'PLANTSTORE_MAX_URL_BYTES', 8192, 64, 1_048_576),
    headersTimeoutMs: number('headers timeout', input.headersTimeoutMs, 'PLANTSTORE_HEADERS_TIMEOUT_MS', 10_000, 1, 3_600_000),
    requestTimeoutMs: number('request timeout', input.requestTimeoutMs, 'PLANTSTORE_REQUEST_TIMEOUT_MS', 30_000, 1, 3_600_000),
    keepAliveTimeoutMs: number('keep-alive timeout', input.keepAliveTimeoutMs, 'PLANTSTORE_KEEP_ALIVE_TIMEOUT_MS', 72_000, 1, 3_600_000),
    maxConnections: number('maximum connections', input.maxConnections, 'PLANTSTORE_MAX_CONNECTIONS', 10_000, 1, 1_000_000),
  };
  // Node refuses a headers timeout longer than the request timeout (the headers are part of the request).
  if (limits.headersTimeoutMs > limits.requestTimeoutMs) {
    throw invalidInput('invalid timeouts: PLANTSTORE_HEADERS_TIMEOUT_MS must not exceed PLANTSTORE_REQUEST_TIMEOUT_MS');
  }
  return limits;
}

function loadMetricsListen(input: ConfigInput, env: NodeJS.ProcessEnv): MetricsListen | undefined {
  const port = input.metricsPort ?? env.PLANTSTORE_METRICS_PORT;
  if (port === undefined || port === '') return undefined;
  const host = pick(input.metricsHost, env.PLANTSTORE_METRICS_HOST, '127.0.0.1');
  if (host.trim() === '') throw invalidInput('invalid metrics host: must not be empty');
  return { host, port: integerIn('metrics port', port, 0, 65535) };
}
