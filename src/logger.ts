import type { FastifyBaseLogger } from 'fastify';
import { destination, levels, type Bindings, type ChildLoggerOptions, type DestinationStream, type LoggerOptions } from 'pino';
import type { LogLevel } from './settings.js';

/** Paths censored in every log line, wherever a request, its headers or a secret may be logged. */
export const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'headers.authorization',
  'request.headers.authorization',
  'authorization',
  'token',
];

/** Query parameters whose values are secrets if a client puts a credential in the URL (we never accept it there). */
const SECRET_QUERY = /([?&](?:access_token|token|api_key|apikey|key|secret|password)=)[^&#]*/gi;

export function redactQuerySecrets(url: string): string {
  return url.replace(SECRET_QUERY, '$1[redacted]');
}

interface LoggedRequest {
  method: string;
  url: string;
  host?: string;
  ip?: string;
  socket?: { remotePort?: number };
}

export function loggerOptions(level: LogLevel, stream?: DestinationStream): LoggerOptions & { stream: DestinationStream } {
  return {
    level,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    serializers: {
      // Fastify's request fields, with any credential-looking query value masked; headers are never logged.
      req: (req: LoggedRequest) => ({
        method: req.method,
        url: redactQuerySecrets(req.url),
        host: req.host,
        remoteAddress: req.ip,
        remotePort: req.socket?.remotePort,
      }),
    },
    // Synchronous writes to stdout: pino's default asynchronous stream flushes in a loop at exit, which never
    // ends once the reader of stdout is gone (EPIPE), so SIGTERM would hang the process. Synchronous writes
    // turn a lost reader into dropped log lines, and no line is lost in a crash.
    stream: stream ?? destination({ dest: 1, sync: true }),
  };
}

const LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const;

/**
 * A request's logger that makes its pino child (which binds the reqId) on the first log call. Fastify makes
 * one per request and most requests never log, while making a child is a noticeable share of a cached page.
 */
// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging -- the log methods are put on the prototype below
class LazyChildLogger {
  private made: FastifyBaseLogger | undefined;

  constructor(
    private readonly parent: FastifyBaseLogger,
    private readonly bindings: Bindings,
    private readonly options: ChildLoggerOptions,
  ) {}

  /** The real child, made now if it was not yet. */
  get logger(): FastifyBaseLogger {
    return (this.made ??= this.parent.child(this.bindings, this.options));
  }

  get level(): string {
    return this.made?.level ?? this.options.level ?? this.parent.level;
  }

  set level(level: string) {
    this.logger.level = level;
  }

  child(bindings: Bindings, options?: ChildLoggerOptions): FastifyBaseLogger {
    return this.logger.child(bindings, options);
  }

  logAt(level: (typeof LEVELS)[number], args: unknown[]): void {
    // Below the level (Fastify's request lines when request logs are on and the level is warn) a call logs
    // nothing, so it makes no child either; `silent` never logs.
    if (level === 'silent' || (this.made === undefined && !(levels.values[level]! >= levels.values[this.level]!))) return;
    // eslint-disable-next-line @typescript-eslint/no-unnecessary-type-assertion -- tsc needs it: pino's overloads take no spread
    (this.logger[level] as LogCall)(...args);
  }
}

// eslint-disable-next-line @typescript-eslint/no-unsafe-declaration-merging, @typescript-eslint/no-empty-object-type -- see above
interface LazyChildLogger extends Pick<FastifyBaseLogger, (typeof LEVELS)[number]> {}

type LogCall = (...args: unknown[]) => void;
// On the prototype, not per instance: nothing is allocated for a request until it logs.
for (const level of LEVELS) {
  LazyChildLogger.prototype[level] = function (this: LazyChildLogger, ...args: unknown[]) {
    this.logAt(level, args);
  };
}

/** Fastify's `childLoggerFactory`. */
export const lazyChildLogger = (logger: FastifyBaseLogger, bindings: Bindings, options: ChildLoggerOptions): FastifyBaseLogger =>
  new LazyChildLogger(logger, bindings, options);
