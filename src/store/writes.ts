import { conflict, unavailable } from '../catalogue/errors.js';
import type { DatabaseSeam } from './seam.js';

/** Runs an insert whose unique key another row may hold: that is a conflict naming `what`. */
export async function insertUnique<T>(d: DatabaseSeam, what: string, insert: () => Promise<T>): Promise<T> {
  try {
    return await insert();
  } catch (err) {
    if (d.classify(err) === 'unique_violation') throw conflict(`${what} already exists`);
    throw err;
  }
}

/**
 * `err`, or what it means to a caller: "unavailable" (503) when the database cannot be reached; a conflict (409)
 * when a row the write referred to was removed by another writer after it was read (the write changed nothing).
 */
export function storeErrorOf(d: DatabaseSeam, err: unknown): unknown {
  switch (d.classify(err)) {
    case 'unavailable':
      return unavailable('database unavailable', err);
    case 'foreign_key_violation':
      return conflict('a plant, user or group this change refers to was removed meanwhile; read it again and retry');
    default:
      return err;
  }
}

/**
 * Runs `work` (a request's write, or its read of the primary) with the database's failures as the store's errors:
 * one that cannot be reached, or is locked too long, is "unavailable" (503); see storeErrorOf.
 */
export async function withStoreErrors<T>(d: DatabaseSeam, work: () => Promise<T>): Promise<T> {
  try {
    return await work();
  } catch (err) {
    throw storeErrorOf(d, err);
  }
}
