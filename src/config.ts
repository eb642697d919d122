import ipaddr from 'ipaddr.js';
import { loadJwtConfig, type JwtConfig } from './auth/jwt-config.js';
import { invalidInput } from './catalogue/errors.js';
import {
  readSettings,
  SETTINGS,
  type ConfigInput,
  type LogLevel,
  type RateLimitConfig,
  type SettingName,
  type SettingValues,
} from './settings.js';
import { isPostgresUrl, type StoreConfig } from './store/open-store.js';

export type { StoreConfig };

export type { LogLevel } from './settings.js';

/**
 * Validated configuration, one slice per consumer: the store, the server process and the HTTP application. Only
 * the entry points read the environment; everything else gets its slice. Each setting is defined once, in
 * settings.ts, with the slots it fills (`into`); what is written here is how settings go together.
 */
export interface Config {
  store: StoreConfig;
  server: ServerConfig;
  app: AppConfig;
}

/** The serving process: where it listens, how many workers, how it stops. */
export interface ServerConfig {
  host: string;
  port: number;
  /** HTTP worker processes for `serve` (one per core is typical). */
  workers: number;
  /** Seconds to wait for in-flight requests on SIGTERM before closing anyway. */
  shutdownGraceSeconds: number;
  /** Where the admin listener serves Prometheus metrics; undefined (the default) collects nothing. */
  metrics: MetricsListen | undefined;
  logLevel: LogLevel;
}

/** The HTTP application (see app.ts, buildApp). */
export interface AppConfig {
  logLevel: LogLevel;
  /** Log one line per request (method, path, status, time); never headers. */
  logRequests: boolean;
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
  /** Creates and deletes per window per user, beside the per-token limit; undefined when off. */
  writeRateLimit: RateLimitConfig | undefined;
  /** Redis that holds the rate-limit counters, shared by every instance; in-process counters when undefined. */
  redisUrl: string | undefined;
  /** Prefix of the rate-limit keys in Redis, so several deployments can share one Redis. */
  redisKeyPrefix: string;
  /** Whether this process collects Prometheus metrics (served by the server's admin listener). */
  metrics: boolean;
  /**
   * Full listings (streamed responses): how many at once per process and per user (past them, 503 and 429),
   * and the slowest client served (bytes a second over a window of seconds; slower ones are cut off).
   */
  listings: { perProcess: number; perUser: number; minBytesPerSecond: number; rateWindowSeconds: number };
  /** Seconds a process holds a webhook delivery it is sending before another may take it over. */
  webhookLeaseSeconds: number;
  /** Whether webhooks go to loopback and private addresses too (never to link-local or metadata ones). */
  webhookAllowPrivate: boolean;
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

/** Where the admin listener serves `/metrics`: never the public port, so metrics are not exposed by accident. */
export interface MetricsListen {
  host: string;
  port: number;
}

export type { ConfigInput, RateLimitConfig };

/** Slots filled from several settings together, below; every other slot is a setting's `into`. */
type Combined = 'server.metrics' | 'app.metrics' | 'app.jwt';

export function loadConfig(input: ConfigInput = {}, env: NodeJS.ProcessEnv = {}): Config {
  const v = readSettings(input, env);
  if (v.readDb && !isPostgresUrl(v.db)) {
    throw invalidInput('a read replica (--read-db) needs a PostgreSQL primary (--db postgres://...)');
  }
  // Node refuses a headers timeout longer than the request timeout (the headers are part of the request).
  if (v.headersTimeoutMs > v.requestTimeoutMs) {
    throw invalidInput('invalid timeouts: PLANTSTORE_HEADERS_TIMEOUT_MS must not exceed PLANTSTORE_REQUEST_TIMEOUT_MS');
  }
  // A request target longer than the headers' whole budget would be refused as headers (431) before its own 414.
  if (v.maxUrlBytes > v.maxHeaderBytes) {
    throw invalidInput(
      `invalid --max-url-bytes ${v.maxUrlBytes}: it must not exceed --max-header-bytes (${v.maxHeaderBytes}), which counts the request line too`,
    );
  }
  if (v.metricsPort !== undefined && v.metricsPort !== 0 && v.metricsPort === v.port && sameAddress(v.host, v.metricsHost)) {
    throw invalidInput(
      `the metrics port (--metrics-port, PLANTSTORE_METRICS_PORT) must differ from the HTTP port: both are ${v.port} on ${v.metricsHost}`,
    );
  }
  const config: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(SETTINGS) as Array<[SettingName, { into: readonly string[] }]>) {
    for (const path of s.into) put(config, path, v[name]);
  }
  const combined: Record<Combined, unknown> = {
    'server.metrics': v.metricsPort === undefined ? undefined : ({ host: v.metricsHost, port: v.metricsPort } satisfies MetricsListen),
    'app.metrics': v.metricsPort !== undefined,
    'app.jwt': loadJwtConfig(v),
  };
  for (const [path, value] of Object.entries(combined)) put(config, path, value);
  // Every slot is filled with a value of its type: checked at compile time below.
  return config as unknown as Config;
}

/**
 * Whether two listeners on these hosts may take one address: either on every address, or an address in common. Hosts
 * are compared by what they stand for, without a lookup: the config is read before anything resolves.
 */
function sameAddress(a: string, b: string): boolean {
  const [x, y] = [listenAddresses(a), listenAddresses(b)];
  return x === 'every' || y === 'every' || x.some((address) => y.includes(address));
}

/**
 * The addresses a listener on `host` may take, or 'every' (`0.0.0.0`, `::` however written). An IP address in any
 * spelling is one address (`127.1`, `::ffff:127.0.0.1` and `127.0.0.1` alike, as the resolver reads them); localhost
 * names are loopback (RFC 6761), both addresses since the resolver gives either first; any other name is itself.
 */
function listenAddresses(host: string): 'every' | string[] {
  const name = host
    .trim()
    .replace(/^\[(.*)\]$/, '$1')
    .replace(/\.$/, '')
    .toLowerCase();
  if (name === 'localhost' || name.endsWith('.localhost')) return ['127.0.0.1', '::1'];
  if (!ipaddr.isValid(name)) return [name];
  const address = ipaddr.process(name);
  return address.range() === 'unspecified' ? 'every' : [address.toString()];
}

/** Sets the value at a dotted path, making the slices on the way. */
function put(target: Record<string, unknown>, path: string, value: unknown): void {
  const keys = path.split('.');
  const last = keys.pop()!;
  let slice = target;
  for (const key of keys) slice = (slice[key] ??= {}) as Record<string, unknown>;
  slice[last] = value;
}

// The compile-time check of the settings' slots: a setting whose value does not fit a slot it names, or a slot of
// Config that nothing fills, makes `SLOTS_CHECKED` fail to compile with the path in the message.

/** Config's slots as dotted paths: slices are walked into, anything else (a list, an optional object) is a slot. */
type Slots<T, Prefix extends string = ''> = {
  [K in keyof T & string]: T[K] extends readonly unknown[]
    ? `${Prefix}${K}`
    : T[K] extends object
      ? Slots<T[K], `${Prefix}${K}.`>
      : `${Prefix}${K}`;
}[keyof T & string];

/** The type of the slot at a dotted path. */
type At<T, P extends string> = P extends `${infer K}.${infer Rest}`
  ? K extends keyof T
    ? At<T[K], Rest>
    : never
  : P extends keyof T
    ? T[P]
    : never;

type Into<K extends SettingName> = (typeof SETTINGS)[K]['into'][number];
type Misfit<K extends SettingName, P> = P extends string
  ? [SettingValues[K]] extends [At<Config, P>]
    ? never
    : `${K} does not fit ${P}`
  : never;
type Misfits = { [K in SettingName]: Misfit<K, Into<K>> }[SettingName];
type Unfilled = Exclude<Slots<Config>, { [K in SettingName]: Into<K> }[SettingName] | Combined>;

// Assigning `true` compiles only when there is no mistake; otherwise the error names them.
const SLOTS_CHECKED: [Misfits, Unfilled] extends [never, never] ? true : { misfits: Misfits; unfilled: Unfilled } = true;
void SLOTS_CHECKED;
