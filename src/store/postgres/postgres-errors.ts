import type { ErrorKind } from '../seam.js';

/**
 * Errors that mean "the database is not there right now" rather than "this request is wrong": the server cannot be
 * reached or is shutting down, or it refuses this connection (too many clients, connections to the database turned
 * off, the database or the role gone, a password no longer accepted).
 */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (
    e.code &&
    /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND|EPIPE|57P0[1-3]|57014|08\w{3}|53300|3D000|28000|28P01)$/.test(e.code)
  )
    return true;
  if (e.code === '55000' && /not currently accepting connections/.test(e.message ?? '')) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    e.message ?? '',
  );
}

/** What a node-postgres error means to Plant Store (see DatabaseSeam.classify). */
export function classifyPostgresError(err: unknown): ErrorKind | undefined {
  const code = (err as { code?: string }).code;
  if (code === '23505') return 'unique_violation';
  if (code === '23503') return 'foreign_key_violation';
  if (code === '40P01' || code === '40001') return 'deadlock';
  if (isConnectionError(err)) return 'unavailable';
  // The schema or its tables gone under a running instance (dropped, or not yet restored): nothing a request can
  // mend, and `plantstore migrate` or a restore brings them back.
  if (code === '42P01' || code === '3F000') return 'unavailable';
  return undefined;
}

/**
 * Takes the advisory lock of key $1 in this schema until the transaction ends (see DatabaseSeam.lock). The text
 * hashed is the schema's name, a dot and the key: what migration 0007's numbering trigger locks for automatic ids.
 */
export const advisoryLockSql = "SELECT pg_advisory_xact_lock(hashtext(current_schema() || '.' || $1))";

/**
 * The CLI's line for a statement PostgreSQL cancelled at the statement timeout, most often one waiting for a lock
 * another transaction holds: its own words say neither which setting nor what to do.
 */
export function postgresWaitFailure(err: unknown): string | undefined {
  const e = err as { code?: unknown; message?: unknown } | undefined;
  if (e?.code !== '57014' || typeof e.message !== 'string' || !e.message.includes('statement timeout')) return undefined;
  return (
    'the database did not finish within the statement timeout (--pg-statement-timeout-ms): another transaction may ' +
    'hold what this command changes, or the database is overloaded; try again'
  );
}
