import { sql, type Kysely } from 'kysely';
import { BULK_LOAD_SETTING, changeTriggerName, type LoggedTable } from './0003-change-log.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * Runs a backfill of `table` without its row-by-row change log (of no use to anyone: the step records one broad
 * change if readers must hear of it). SQLite drops the table's update trigger and restores it exactly;
 * PostgreSQL switches the log's triggers off for the transaction meanwhile.
 */
export async function unlogged(db: Kysely<any>, dialect: Dialect, table: LoggedTable, run: () => Promise<void>): Promise<void> {
  if (dialect === 'postgres') {
    await sql.raw(`SET LOCAL ${BULK_LOAD_SETTING} = 'on'`).execute(db);
    await run();
    await sql.raw(`SET LOCAL ${BULK_LOAD_SETTING} = 'off'`).execute(db);
    return;
  }
  const name = changeTriggerName(table, 'update');
  const trigger = (await sql<{ sql: string }>`SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ${name}`.execute(db)).rows[0]
    ?.sql;
  if (trigger !== undefined) await sql.raw(`DROP TRIGGER ${name}`).execute(db);
  await run();
  if (trigger !== undefined) await sql.raw(trigger).execute(db);
}
