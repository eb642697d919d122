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
  /** Prometheus metrics on a separate admin listener; undefined (the default) collects nothing. */
  metrics: MetricsListen | undefined;
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
  metricsHost?: string | undefined;
  metricsPort?: string | number | undefined;
}

export const DEFAULT_DB = './data/plantstore.db';

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
    metrics: loadMetricsListen(input, env),
  };
}

function loadMetricsListen(input: ConfigInput, env: NodeJS.ProcessEnv): MetricsListen | undefined {
  const port = input.metricsPort ?? env.PLANTSTORE_METRICS_PORT;
  if (port === undefined || port === '') return undefined;
  const host = pick(input.metricsHost, env.PLANTSTORE_METRICS_HOST, '127.0.0.1');
  if (host.trim() === '') throw invalidInput('invalid metrics host: must not be empty');
  return { host, port: integerIn('metrics port', port, 0, 65535) };
}
