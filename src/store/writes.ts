import { conflict, unavailable } from '../catalogue/errors.js';
import type { StoreDialect } from './dialect.js';

/**
 * Resolves with the result of `write` once it is committed and this process's change feed has taken it in, so
 * that the next request served here sees it (read-your-writes) without waiting for a notification.
 */
export async function seenHere<T>(d: StoreDialect, write: Promise<T>): Promise<T> {
  const result = await write;
  await d.changes.catchUp();
  return result;
}

/** Runs an insert whose unique key another row may hold: that is a conflict naming `what`. */
export async function insertUnique<T>(d: StoreDialect, what: string, insert: () => Promise<T>): Promise<T> {
  try {
    return await insert();
  } catch (err) {
    if (d.classify(err) === 'unique_violation') throw conflict(`${what} already exists`);
    throw err;
  }
}

/** `err`, or "unavailable" (503) when it means the database cannot be reached. */
export function unavailableOr(d: StoreDialect, err: unknown): unknown {
  return d.classify(err) === 'unavailable' ? unavailable('database unavailable', err) : err;
}

/** Runs a request's write or read of the primary: a database that cannot be reached, or is locked too long, is "unavailable" (503). */
export async function writing<T>(d: StoreDialect, write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    throw unavailableOr(d, err);
  }
}
