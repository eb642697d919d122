import type pg from 'pg';
import Cursor from 'pg-cursor';
import type { ExportSnapshot } from '../catalogue-export.js';
import { checkOut, withoutStatementTimeout } from './postgres-connection.js';

/** The rows of `text`, read through a cursor a thousand at a time, so memory stays flat. */
async function* cursorRows<R extends pg.QueryResultRow>(client: pg.PoolClient, text: string): AsyncGenerator<R> {
  const cursor = client.query(new Cursor<R>(text));
  try {
    for (;;) {
      const rows = await cursor.read(1_000);
      if (rows.length === 0) return;
      yield* rows;
    }
  } finally {
    await cursor.close();
  }
}

/** One REPEATABLE READ transaction: the export is a consistent snapshot even while others write (see sqlite-export.ts). */
export async function exportSnapshot(pool: pg.Pool): Promise<ExportSnapshot> {
  const { client, release } = await checkOut(pool);
  try {
    await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    // The statement timeout bounds requests' queries; a cursor read in many fetches is one statement that lasts
    // the whole export, so an operator's bulk command goes without it.
    await withoutStatementTimeout(client);
  } catch (err) {
    release();
    throw err;
  }
  return {
    nameList: (subquery) => `ARRAY(${subquery})`,
    rows: <R>(text: string) => cursorRows(client, text) as AsyncIterable<R>,
    close: async () => {
      await client.query('ROLLBACK').catch(() => {});
      release();
    },
  };
}
