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
    sqlite.pragma('journal_mode = WAL');
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
