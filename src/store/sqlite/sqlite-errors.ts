import type { ErrorKind } from '../seam.js';

/** SQLite's result codes of a database that cannot serve now: locked too long, failing I/O, read-only, full, closed. */
const UNAVAILABLE = /^SQLITE_(BUSY|LOCKED|IOERR|CANTOPEN|PROTOCOL|READONLY|FULL)/;

/** What a better-sqlite3 error means to Plant Store (see DatabaseSeam.classify). */
export function classifySqliteError(err: unknown): ErrorKind | undefined {
  if (closedConnection(err)) return 'unavailable';
  const code = (err as { code?: unknown }).code;
  if (typeof code !== 'string') return undefined;
  if (code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY') return 'unique_violation';
  if (code === 'SQLITE_CONSTRAINT_FOREIGNKEY') return 'foreign_key_violation';
  if (UNAVAILABLE.test(code)) return 'unavailable';
  return undefined;
}

/**
 * A statement on a connection the store has closed (its file was removed or replaced), which better-sqlite3 and
 * Kysely refuse by message alone: unavailable, whichever connection the store holds by the time it is judged.
 */
const closedConnection = (err: unknown): boolean =>
  err instanceof Error &&
  ((err instanceof TypeError && err.message === 'The database connection is not open') ||
    err.message === 'driver has already been destroyed');

/** Whether `err` is SQLite's refusal of an entry of `index` already taken (its message names the index's columns). */
export const isUniqueViolationOf = (err: unknown, columns: string): boolean =>
  (err as { code?: string }).code === 'SQLITE_CONSTRAINT_UNIQUE' && (err as Error).message.includes(columns);

/** Whether `err` is a SQLite write lock held by another connection for longer than we wait. */
export const isBusy = (err: unknown): boolean => /^SQLITE_BUSY/.test((err as { code?: string }).code ?? '');

/**
 * What to tell an operator when SQLite refused a write (full disk, failing I/O, read-only file): SQLite's own words
 * ("disk I/O error") do not say that a write was refused and rolled back. Undefined for any other error.
 */
export function sqliteWriteFailure(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | undefined)?.code;
  if (typeof code !== 'string' || !/^SQLITE_(FULL|IOERR|READONLY)/.test(code)) return undefined;
  const message = `cannot write the database: ${(err as Error).message} (${code})`;
  // SQLite in WAL mode writes beside the file (-wal, -shm), so the folder must be writable too.
  return code.startsWith('SQLITE_READONLY') ? `${message}; the database file and its folder must be writable by this user` : message;
}
