import BetterSqlite3 from 'better-sqlite3';

/** How long a write waits for another process's write to finish before it fails with "database is locked". */
export const BUSY_TIMEOUT_MS = 5_000;

/**
 * The WAL file is cut back to this size whenever the log starts again from its beginning after a checkpoint, so
 * that one burst does not keep it large (and its size says how much it holds: see group-commit-thread.ts).
 */
const JOURNAL_SIZE_LIMIT_BYTES = 4 * 1024 * 1024;

/** A connection to the file as Plant Store writes it: WAL mode, durable on commit, foreign keys enforced. */
export function openConnection(path: string, { mustExist }: { mustExist: boolean }): BetterSqlite3.Database {
  const sqlite = new BetterSqlite3(path, { fileMustExist: mustExist });
  try {
    switchToWal(sqlite);
    // FULL: a commit is on disk before it is acknowledged, so a crash or power loss loses nothing committed.
    sqlite.pragma('synchronous = FULL');
    sqlite.pragma('foreign_keys = ON');
    // The server reads while the CLI writes; wait for a writer rather than failing at once.
    sqlite.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    sqlite.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT_BYTES}`);
    return sqlite;
  } catch (err) {
    sqlite.close();
    throw err;
  }
}

/**
 * Puts the file in WAL mode, waiting as a write does for another connection's transaction. The switch needs the
 * file to itself, and while another connection holds a write on a file still in rollback mode (a new file an
 * operator's sqlite3 has open), SQLite refuses it at once instead of calling the busy handler.
 */
function switchToWal(sqlite: BetterSqlite3.Database): void {
  const giveUpAt = Date.now() + BUSY_TIMEOUT_MS;
  const pause = new Int32Array(new SharedArrayBuffer(4));
  for (;;) {
    try {
      sqlite.pragma('journal_mode = WAL');
      return;
    } catch (err) {
      if ((err as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() >= giveUpAt) throw err;
      Atomics.wait(pause, 0, 0, 20);
    }
  }
}

/**
 * Statements of `db` by text, each prepared once: the `max` made most recently are kept, the oldest going first
 * (preparing costs more than running most statements).
 */
export function keptStatements(db: BetterSqlite3.Database, max: number): (sql: string) => BetterSqlite3.Statement<unknown[]> {
  const kept = new Map<string, BetterSqlite3.Statement<unknown[]>>();
  return (sql) => {
    let found = kept.get(sql);
    if (found === undefined) {
      if (kept.size >= max) kept.delete(kept.keys().next().value!);
      found = db.prepare(sql);
      kept.set(sql, found);
    }
    return found;
  };
}
