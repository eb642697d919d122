import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/** The milliseconds 0006's and 0016's PostgreSQL trigger read: a cast to bigint rounds to the nearest. */
const ROUNDED_NOW = '(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/** The same milliseconds floored, as Node's `Date.now()` and SQLite's `CAST(… AS INTEGER)` give them. */
export const FLOORED_NOW = 'floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint';

/**
 * PostgreSQL: a delivery the webhook trigger writes is due in the millisecond it was written, not the next one.
 * The trigger rounded the clock, so a delivery written in the second half of a millisecond was due in the next,
 * and a claim made in the same millisecond (`next_attempt_at <= Date.now()`) left it to the poll after; its event's
 * `created_at` could also lie half a millisecond ahead of the commit. SQLite's triggers already floor.
 */
export function webhookClockFloored(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      const { rows } = await sql<{ definition: string }>`
        SELECT pg_get_functiondef(to_regproc('plantstore_webhook_event')) AS definition`.execute(db);
      const definition = rows[0]?.definition;
      if (!definition?.includes(ROUNDED_NOW)) throw new Error('plantstore_webhook_event does not read the clock as 0016 wrote it');
      await sql.raw(definition.replaceAll(ROUNDED_NOW, FLOORED_NOW)).execute(db);
    },
  };
}
