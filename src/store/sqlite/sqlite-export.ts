import type BetterSqlite3 from 'better-sqlite3';
import type { ExportSnapshot } from '../catalogue-export.js';

/** One read transaction: the export is a consistent snapshot even while others write. */
export function exportSnapshot(db: BetterSqlite3.Database): ExportSnapshot {
  db.exec('BEGIN');
  return {
    nameList: (subquery) => `(SELECT json_group_array(name) FROM (${subquery}))`,
    rows: <R>(sql: string) => db.prepare(sql).iterate() as Iterable<R>,
    close: () => {
      if (db.inTransaction) db.exec('COMMIT');
    },
  };
}
