import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/** The clock 0006's SQLite triggers read: `subsec` came with SQLite 3.42, and older builds read it as NULL. */
const SUBSEC_NOW = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/** The same milliseconds from a function every SQLite has. */
const JULIAN_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/**
 * SQLite: the webhook triggers read the time in a form every SQLite understands, so that plain SQL from an older
 * `sqlite3` (Debian 12's is 3.40) adds plants while an endpoint is enabled; before, its inserts failed with
 * "NOT NULL constraint failed: webhook_events.created_at". PostgreSQL has nothing to change.
 */
export function webhookClock(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'sqlite') return;
      const { rows } = await sql<{ name: string; sql: string }>`SELECT name, sql FROM sqlite_master
        WHERE type = 'trigger' AND tbl_name = 'plants' AND instr(sql, ${SUBSEC_NOW}) > 0`.execute(db);
      for (const trigger of rows) {
        await sql`DROP TRIGGER ${sql.id(trigger.name)}`.execute(db);
        await sql.raw(trigger.sql.replaceAll(SUBSEC_NOW, JULIAN_NOW)).execute(db);
      }
    },
  };
}
