/**
 * Errors raised below the HTTP layer (store, access rules, CLI input). Each carries a kind from a closed
 * union so callers can map it (to an HTTP status, a CLI exit code) without string matching.
 */
export type DomainErrorKind = 'not_found' | 'conflict' | 'invalid_input' | 'unavailable';

export class DomainError extends Error {
  constructor(
    readonly kind: DomainErrorKind,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
    this.name = 'DomainError';
  }
}

export const notFound = (message: string): DomainError => new DomainError('not_found', message);
export const conflict = (message: string): DomainError => new DomainError('conflict', message);
export const invalidInput = (message: string): DomainError => new DomainError('invalid_input', message);
/** `cause`: the database's own error, for the log and the CLI (an HTTP answer never shows it). */
export const unavailable = (message: string, cause?: unknown): DomainError =>
  new DomainError('unavailable', message, cause === undefined ? undefined : { cause });
