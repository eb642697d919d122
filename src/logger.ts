import type { DestinationStream, LoggerOptions } from 'pino';
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

export function loggerOptions(level: LogLevel, stream?: DestinationStream): LoggerOptions & { stream?: DestinationStream } {
  return {
    level,
    redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
    ...(stream ? { stream } : {}),
  };
}
