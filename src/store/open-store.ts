import type { Config } from '../config.js';
import type { Store } from './store.js';

export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//i.test(db);

export type StoreSettings = Pick<Config, 'db'> & Partial<Pick<Config, 'readDb' | 'poolSize' | 'statementTimeoutMs'>>;

/**
 * Opens and migrates the database named by `--db` / `PLANTSTORE_DB`: a SQLite path or a postgres:// URL. With
 * `create` (the default) a SQLite file, or a PostgreSQL `?schema=`, that is not there yet is created; without,
 * its absence is an error (not_found).
 */
export async function openStore(settings: StoreSettings, { create = true } = {}): Promise<Store> {
  // Only the backend in use is loaded: every CLI command starts faster without the other's driver.
  if (!isPostgresUrl(settings.db)) return (await import('./sqlite/sqlite-store.js')).SqliteStore.open({ path: settings.db, create });
  const { PostgresStore } = await import('./postgres/postgres-store.js');
  return PostgresStore.open({
    url: settings.db,
    create,
    ...(settings.readDb ? { readUrl: settings.readDb } : {}),
    ...(settings.poolSize ? { poolSize: settings.poolSize } : {}),
    ...(settings.statementTimeoutMs ? { statementTimeoutMs: settings.statementTimeoutMs } : {}),
  });
}
