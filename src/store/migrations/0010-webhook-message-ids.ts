import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/** A new id: 128 random bits, as a receiver reads it in `webhook-id`. */
const SQLITE_NEW_ID = "'msg_' || lower(hex(randomblob(16)))";
const POSTGRES_NEW_ID = "'msg_' || replace(gen_random_uuid()::text, '-', '')";

/**
 * Each webhook event gets a message id of its own, random, sent as `webhook-id`. Before, the id was the event's row
 * id (`msg_<id>`), which a restored backup or an export and import into a new database hands out again, so that
 * receivers, which skip ids they have seen, dropped new plants. Events already in the outbox keep the id they were
 * sent with, so that a retry is still recognised.
 *
 * PostgreSQL draws the id in the column's default; SQLite cannot give an added column a default that is not a
 * constant, so a trigger draws it for a row inserted without one (an import writes it in its own statement).
 */
export function webhookMessageIds(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`ALTER TABLE webhook_events ADD COLUMN message_id text`.execute(db);
      await sql`UPDATE webhook_events SET message_id = 'msg_' || id`.execute(db);
      if (dialect === 'postgres') {
        await sql.raw(`ALTER TABLE webhook_events ALTER COLUMN message_id SET DEFAULT ${POSTGRES_NEW_ID}`).execute(db);
        await sql`ALTER TABLE webhook_events ALTER COLUMN message_id SET NOT NULL`.execute(db);
        return;
      }
      await sql
        .raw(
          `CREATE TRIGGER webhook_events_message_id AFTER INSERT ON webhook_events WHEN NEW.message_id IS NULL BEGIN ` +
            `UPDATE webhook_events SET message_id = ${SQLITE_NEW_ID} WHERE id = NEW.id; END`,
        )
        .execute(db);
    },
  };
}
