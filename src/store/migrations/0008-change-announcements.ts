import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * PostgreSQL: the change log's inserts stop notifying. A transaction that NOTIFYs takes the notification queue's
 * global lock through its commit, so every write of every instance committed one at a time. Instances now read
 * the log at least every 250 ms whoever wrote, and a process that writes announces its commits after they are
 * done, in a statement of its own, so that the others read sooner. SQLite has nothing to change.
 */
export function changeAnnouncements(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      await sql`DROP TRIGGER change_log_notify ON change_log`.execute(db);
    },
  };
}
