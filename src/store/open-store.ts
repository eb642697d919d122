import { invalidInput } from '../errors.js';
import { SqliteStore } from './sqlite/sqlite-store.js';
import type { Store } from './store.js';

/** Opens (creating and migrating if needed) the database named by `--db` / `PLANTSTORE_DB`. */
export async function openStore(db: string): Promise<Store> {
  if (/^postgres(ql)?:\/\//i.test(db)) {
    throw invalidInput('PostgreSQL is not supported by this build yet; use a SQLite file path');
  }
  return SqliteStore.open({ path: db });
}
