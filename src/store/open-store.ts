import type { Config } from '../config.js';
import { PostgresStore } from './postgres/postgres-store.js';
import { SqliteStore } from './sqlite/sqlite-store.js';
import type { Store } from './store.js';

export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//i.test(db);

export type StoreSettings = Pick<Config, 'db'> & Partial<Pick<Config, 'readDb' | 'poolSize' | 'statementTimeoutMs'>>;

/** Opens (creating and migrating if needed) the database named by `--db` / `PLANTSTORE_DB`: a SQLite path or a postgres:// URL. */
export async function openStore(settings: StoreSettings): Promise<Store> {
  if (!isPostgresUrl(settings.db)) return SqliteStore.open({ path: settings.db });
  return PostgresStore.open({
    url: settings.db,
    ...(settings.readDb ? { readUrl: settings.readDb } : {}),
    ...(settings.poolSize ? { poolSize: settings.poolSize } : {}),
    ...(settings.statementTimeoutMs ? { statementTimeoutMs: settings.statementTimeoutMs } : {}),
  });
}
