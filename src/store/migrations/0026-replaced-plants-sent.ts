import { sql, type Kysely, type Migration } from 'kysely';
import { takingEndpoints } from './0016-webhook-event-types.js';
import { SQLITE_NOW } from './0020-webhook-event-ids.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * SQLite: a plant that plain SQL's `INSERT OR REPLACE` (or `UPDATE OR REPLACE`) deletes to make room at its position
 * gets its `plant.deleted` event, as a delete gives it, when its public id leaves with it. SQLite runs no delete
 * trigger for such a row, so a receiver mirroring the catalogue kept the old plant for good. (A row replaced for its
 * public id needs no event: the new row's `plant.created` of the same id comes later and supersedes it.)
 *
 * The event cannot be written before the row is replaced: a trigger before an insert runs for an insert that a
 * conflict then skips (`INSERT OR IGNORE`, `ON CONFLICT DO NOTHING`, as the service's create on a taken id), which
 * would tell receivers of a delete that never happened. So the trigger before keeps the row aside in
 * `plants_replaced`, and the trigger after the row's write, which runs only for a row written, sends what was kept
 * for the new row's position. Each trigger before also empties what an earlier skipped row left there, and SQLite
 * runs one row's triggers before and after it before the next row's, so the trigger after sees only its own row's.
 * PostgreSQL has no REPLACE.
 */
export function replacedPlantsSent(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'sqlite') return;
      await sql`CREATE TABLE plants_replaced (id integer NOT NULL, api_id integer NOT NULL, name text NOT NULL, tag text)`.execute(db);
      // The plant at the new row's position, when its public id is not the new row's and an endpoint takes deletes.
      const displaced = `plants WHERE id = NEW.id AND api_id IS NOT NULL AND api_id IS NOT NEW.api_id AND EXISTS (SELECT 1 FROM ${takingEndpoints('plant.deleted')})`;
      const pending = 'EXISTS (SELECT 1 FROM plants_replaced)';
      const keep = `DELETE FROM plants_replaced; INSERT INTO plants_replaced (id, api_id, name, tag) SELECT id, api_id, name, tag FROM ${displaced};`;
      const send = `
        INSERT INTO webhook_events (type, plant_id, name, tag, created_at)
          SELECT 'plant.deleted', api_id, name, tag, ${SQLITE_NOW} FROM plants_replaced WHERE id = NEW.id;
        INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at)
          SELECT (SELECT max(id) FROM webhook_events), id, ${SQLITE_NOW} FROM ${takingEndpoints('plant.deleted')}
            AND EXISTS (SELECT 1 FROM plants_replaced WHERE id = NEW.id);
        DELETE FROM plants_replaced;`;
      const statements = [
        // A create that leaves the position to SQLite sees NEW.id as -1, no row's: two probes that find nothing.
        `CREATE TRIGGER plants_replaced_kept_by_insert BEFORE INSERT ON plants WHEN ${pending} OR EXISTS (SELECT 1 FROM ${displaced}) BEGIN ${keep} END`,
        `CREATE TRIGGER plants_replaced_sent_by_insert AFTER INSERT ON plants WHEN ${pending} BEGIN ${send} END`,
        `CREATE TRIGGER plants_replaced_kept_by_update BEFORE UPDATE OF id ON plants WHEN ${pending} OR (NEW.id IS NOT OLD.id AND EXISTS (SELECT 1 FROM ${displaced})) BEGIN ${keep} END`,
        `CREATE TRIGGER plants_replaced_sent_by_update AFTER UPDATE OF id ON plants WHEN ${pending} BEGIN ${send} END`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  };
}
