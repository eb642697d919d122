import { destination, type DestinationStream, type LoggerOptions } from 'pino';
import type { LogLevel } from './config.js';

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

export function redactUrl(url: string): string {
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
        url: redactUrl(req.url),
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
