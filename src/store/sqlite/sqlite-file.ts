import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { Kysely } from 'kysely';
import { CHANGE_LOG_RETENTION_MS } from '../change-log.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { isBusy } from './sqlite-errors.js';
import { openConnection } from './sqlite-connection.js';
import { WritingTransactionsDialect } from './writing-transactions.js';

// The SQLite file itself: opening it as Plant Store wants it, and keeping its change log short.

/** Opens the file (creating it unless `mustExist`), sets the pragmas and brings the schema up to date. */
export async function openDatabase(path: string, mustExist: boolean): Promise<{ sqlite: BetterSqlite3.Database; db: Kysely<Database> }> {
  if (path !== ':memory:' && !mustExist) mkdirSync(dirname(path), { recursive: true });
  const sqlite = openConnection(path, { mustExist });
  try {
    const db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(sqlite) });
    await migrateToLatest(db, 'sqlite');
    return { sqlite, db };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}

/**
 * One pruning pass (see CHANGE_LOG_RETENTION_MS): deletes the rows that existed at the previous pass, if that
 * was at least the retention ago, and marks where this pass stands. Gives up at once when another process
 * holds the write lock (this connection is synchronous: waiting would hold up every request); the next pass
 * tries again.
 */
export function pruneChangeLog(db: BetterSqlite3.Database, now: number): void {
  const timeout = db.pragma('busy_timeout', { simple: true });
  db.pragma('busy_timeout = 0');
  try {
    db.transaction(() => {
      const mark = db.prepare('SELECT mark_seq AS seq, mark_at AS at FROM change_log_state').get() as { seq: number; at: number };
      if (now - mark.at < CHANGE_LOG_RETENTION_MS) return;
      db.prepare('DELETE FROM change_log WHERE seq <= ?').run(mark.seq);
      db.prepare(
        'UPDATE change_log_state SET pruned_through = max(pruned_through, ?), mark_seq = coalesce((SELECT max(seq) FROM change_log), ?), mark_at = ?',
      ).run(mark.seq, mark.seq, now);
    }).immediate();
  } catch (err) {
    if (!isBusy(err)) throw err;
  } finally {
    db.pragma(`busy_timeout = ${String(timeout)}`);
  }
}
