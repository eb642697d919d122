import { sql, type Kysely, type Migration } from 'kysely';
import { takingEndpoints } from './0016-webhook-event-types.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * SQLite: each delivery of an event names the event by the event's own id, not by `last_insert_rowid()`.
 *
 * The triggers of 0016 wrote an event, then one delivery per endpoint that takes it with `INSERT … SELECT
 * last_insert_rowid(), id FROM webhook_endpoints …`. The SQLite that Plant Store bundles reads the function once
 * for the whole statement; an older one, such as Debian's `sqlite3` 3.40 used for plain SQL, reads it for each row,
 * after the row before was inserted: from the second endpoint on, a delivery named the delivery before it instead of
 * the event. The event went to one endpoint only, and the stray delivery later collided with the real one of another
 * event, failing that event's plant write. The event's id is now read from `webhook_events`, where it is the largest
 * (AUTOINCREMENT ids only grow), and the deliveries that name no event are dropped: no one can send them.
 *
 * PostgreSQL's trigger takes the event's id from `RETURNING`: nothing to change.
 */
export function webhookEventIds(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'sqlite') return;
      for (const statement of sqliteTriggers()) await sql.raw(statement).execute(db);
      await sql`DELETE FROM webhook_deliveries WHERE event_id NOT IN (SELECT id FROM webhook_events)`.execute(db);
    },
  };
}

/** The SQLite clock of migration 0009: every SQLite reads it. */
export const SQLITE_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/** The event of `type` for the plant in `row`, and its deliveries, each naming the event just written (SQLite). */
export const record = (type: string, row: 'NEW' | 'OLD'): string => `
  INSERT INTO webhook_events (type, plant_id, name, tag, created_at) VALUES ('${type}', ${row}.api_id, ${row}.name, ${row}.tag, ${SQLITE_NOW});
  INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at)
    SELECT (SELECT max(id) FROM webhook_events), id, ${SQLITE_NOW} FROM ${takingEndpoints(type)};`;

export const taken = (type: string): string => `EXISTS (SELECT 1 FROM ${takingEndpoints(type)})`;

/** 0016's four triggers, dropped and made again with `record`; their names and conditions are unchanged. */
function sqliteTriggers(): string[] {
  const created = 'plant.created';
  return [
    'DROP TRIGGER plants_webhook_insert',
    'DROP TRIGGER plants_webhook_numbered',
    'DROP TRIGGER plants_webhook_update',
    'DROP TRIGGER plants_webhook_delete',
    `CREATE TRIGGER plants_webhook_insert AFTER INSERT ON plants WHEN NEW.api_id IS NOT NULL AND ${taken(created)} ` +
      `BEGIN ${record(created, 'NEW')} END`,
    // A plant inserted without an id gets it from another trigger, by an UPDATE right after the insert.
    `CREATE TRIGGER plants_webhook_numbered AFTER UPDATE OF api_id ON plants WHEN OLD.api_id IS NULL AND NEW.api_id IS NOT NULL ` +
      `AND ${taken(created)} BEGIN ${record(created, 'NEW')} END`,
    `CREATE TRIGGER plants_webhook_update AFTER UPDATE OF name, tag ON plants WHEN NEW.api_id IS NOT NULL ` +
      `AND (OLD.name IS NOT NEW.name OR OLD.tag IS NOT NEW.tag) AND ${taken('plant.updated')} BEGIN ${record('plant.updated', 'NEW')} END`,
    `CREATE TRIGGER plants_webhook_delete AFTER DELETE ON plants WHEN OLD.api_id IS NOT NULL AND ${taken('plant.deleted')} ` +
      `BEGIN ${record('plant.deleted', 'OLD')} END`,
  ];
}
