import type { Store } from './store.js';

/** Which database, and how to use it (the configuration's `store` slice). */
export interface StoreConfig {
  /** SQLite file path (or `:memory:`), or a postgres:// URL. */
  db: string;
  /** Optional PostgreSQL read replica for listings; tokens are always checked on the primary. */
  readDb: string | undefined;
  /** PostgreSQL connections per process. */
  poolSize: number;
  /** PostgreSQL statement timeout, so a stuck query becomes a 503 instead of a hung request. */
  statementTimeoutMs: number;
}

export const isPostgresUrl = (db: string): boolean => /^postgres(ql)?:\/\//i.test(db);

/**
 * Opens and migrates the database named by `--db` / `PLANTSTORE_DB`: a SQLite path or a postgres:// URL. With
 * `create` (the default) a SQLite file, or a PostgreSQL `?schema=`, that is not there yet is created; without,
 * its absence is an error (not_found). `oneShot` is a command's store, whose few writes have nothing to group
 * with: SQLite writes them on its own connection instead of starting a writer thread.
 */
export async function openStore(
  config: Pick<StoreConfig, 'db'> & Partial<StoreConfig>,
  { create = true, oneShot = false } = {},
): Promise<Store> {
  // Only the backend in use is loaded: every CLI command starts faster without the other's driver.
  if (!isPostgresUrl(config.db))
    return (await import('./sqlite/sqlite-seam.js')).openSqliteStore({ path: config.db, create, groupCommit: !oneShot });
  const { openPostgresStore } = await import('./postgres/postgres-seam.js');
  return openPostgresStore({
    url: config.db,
    create,
    ...(config.readDb ? { readUrl: config.readDb } : {}),
    ...(config.poolSize ? { poolSize: config.poolSize } : {}),
    ...(config.statementTimeoutMs ? { statementTimeoutMs: config.statementTimeoutMs } : {}),
  });
}

/**
 * The files a store at `db` lives in, for a command that writes a file of its own, which must not be one of them:
 * a SQLite database and its journals; none for PostgreSQL.
 */
export function databaseFiles(db: string): string[] {
  return isPostgresUrl(db) ? [] : ['', '-wal', '-shm', '-journal'].map((suffix) => `${db}${suffix}`);
}
