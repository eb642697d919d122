import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/** Tables whose changes can alter who sees what (or who is authenticated). */
export const WATCHED_TABLES = ['users', 'groups', 'group_members', 'plants', 'plant_user_grants', 'plant_group_grants', 'tokens'] as const;

/** The NOTIFY channel of a schema is this and the schema's name, so Plant Stores sharing a database do not wake each other. */
const CHANNEL_PREFIX = 'plantstore_changes_';

/**
 * PostgreSQL: every committed change to a watched table sends one NOTIFY (per statement, merged per
 * transaction), which each instance LISTENs to in order to drop its caches. SQLite needs nothing: its
 * `PRAGMA data_version` already tells a connection that another one committed. Both dialects record this
 * migration, so the history stays the same on both backends.
 */
export function changeNotifications(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      await sql`
        CREATE FUNCTION plantstore_notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify(${sql.lit(CHANNEL_PREFIX)} || TG_TABLE_SCHEMA, TG_TABLE_NAME);
          RETURN NULL;
        END $$`.execute(db);
      for (const table of WATCHED_TABLES) {
        await sql`
          CREATE TRIGGER ${sql.id(`${table}_changed`)}
          AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON ${sql.table(table)}
          FOR EACH STATEMENT EXECUTE FUNCTION plantstore_notify_change()`.execute(db);
      }
    },
    async down(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      for (const table of WATCHED_TABLES) await sql`DROP TRIGGER ${sql.id(`${table}_changed`)} ON ${sql.table(table)}`.execute(db);
      await sql`DROP FUNCTION plantstore_notify_change()`.execute(db);
    },
  };
}
