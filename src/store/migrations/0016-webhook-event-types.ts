import { sql, type Kysely, type Migration } from 'kysely';
import { UNLESS_BULK_LOAD } from './0003-change-log.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * Events for every change of a plant: beside the new plant (`plant.created`), a change of its fields
 * (`plant.updated`) and its deletion (`plant.deleted`), each written in the same transaction as the change, by
 * trigger, for every writer.
 *
 * Each endpoint chooses what it receives (`webhook_endpoints.events`): NULL, as every endpoint registered before,
 * is the original webhook, new plants alone, each sent as the `NewPlant` it was; a list (`,plant.created,…,`,
 * commas around each type so that one type is found with LIKE on both databases) is the types chosen, each sent
 * in the Standard Webhooks envelope (see webhooks/event-body.ts). An event is written only while an enabled
 * endpoint takes its type, and gets a delivery for each such endpoint.
 */
export function webhookEventTypes(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`ALTER TABLE webhook_endpoints ADD COLUMN events text`.execute(db);
      await sql`ALTER TABLE webhook_events ADD COLUMN type text NOT NULL DEFAULT 'plant.created'`.execute(db);
      if (dialect === 'sqlite') await sqliteTriggers(db);
      else await postgresTriggers(db);
    },
  };
}

/** The enabled endpoints that take events of `type` (SQL of both databases; `type` is one of ours). */
export const takingEndpoints = (type: string): string =>
  `webhook_endpoints WHERE disabled_at IS NULL AND (${type === 'plant.created' ? 'events IS NULL OR ' : ''}events LIKE '%,${type},%')`;

/** The SQLite clock of migration 0009: every SQLite reads it. */
const SQLITE_NOW = "CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)";

/** The event of `type` for the plant in `row`, and its deliveries (SQLite). */
const sqliteRecord = (type: string, row: 'NEW' | 'OLD'): string => `
  INSERT INTO webhook_events (type, plant_id, name, tag, created_at) VALUES ('${type}', ${row}.api_id, ${row}.name, ${row}.tag, ${SQLITE_NOW});
  INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at)
    SELECT last_insert_rowid(), id, ${SQLITE_NOW} FROM ${takingEndpoints(type)};`;

const taken = (type: string): string => `EXISTS (SELECT 1 FROM ${takingEndpoints(type)})`;

async function sqliteTriggers(db: Kysely<any>): Promise<void> {
  // The new-plant triggers of 0006 (as 0009 left them), now for the endpoints that take new plants.
  await sql`DROP TRIGGER plants_webhook_insert`.execute(db);
  await sql`DROP TRIGGER plants_webhook_numbered`.execute(db);
  const created = 'plant.created';
  const statements = [
    `CREATE TRIGGER plants_webhook_insert AFTER INSERT ON plants WHEN NEW.api_id IS NOT NULL AND ${taken(created)} ` +
      `BEGIN ${sqliteRecord(created, 'NEW')} END`,
    // A plant inserted without an id gets it from another trigger, by an UPDATE right after the insert.
    `CREATE TRIGGER plants_webhook_numbered AFTER UPDATE OF api_id ON plants WHEN OLD.api_id IS NULL AND NEW.api_id IS NOT NULL ` +
      `AND ${taken(created)} BEGIN ${sqliteRecord(created, 'NEW')} END`,
    `CREATE TRIGGER plants_webhook_update AFTER UPDATE OF name, tag ON plants WHEN NEW.api_id IS NOT NULL ` +
      `AND (OLD.name IS NOT NEW.name OR OLD.tag IS NOT NEW.tag) AND ${taken('plant.updated')} BEGIN ${sqliteRecord('plant.updated', 'NEW')} END`,
    `CREATE TRIGGER plants_webhook_delete AFTER DELETE ON plants WHEN OLD.api_id IS NOT NULL AND ${taken('plant.deleted')} ` +
      `BEGIN ${sqliteRecord('plant.deleted', 'OLD')} END`,
  ];
  for (const statement of statements) await sql.raw(statement).execute(db);
}

/**
 * The event of `type` for the plant in `row`, and its deliveries (a PL/pgSQL function's body with the variables
 * `event bigint` and `now bigint`, the clock in milliseconds).
 */
export const postgresRecord = (type: string, row: 'NEW' | 'OLD') => `
    IF EXISTS (SELECT 1 FROM ${takingEndpoints(type)}) THEN
      INSERT INTO webhook_events (type, plant_id, name, tag, created_at) VALUES ('${type}', ${row}.api_id, ${row}.name, ${row}.tag, now)
        RETURNING id INTO event;
      INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at) SELECT event, id, now FROM ${takingEndpoints(type)};
    END IF;`;

async function postgresTriggers(db: Kysely<any>): Promise<void> {
  await sql
    .raw(
      `CREATE OR REPLACE FUNCTION plantstore_webhook_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  event bigint;
  now bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN ${postgresRecord('plant.created', 'NEW')}
  ELSIF TG_OP = 'UPDATE' THEN ${postgresRecord('plant.updated', 'NEW')}
  ELSE ${postgresRecord('plant.deleted', 'OLD')}
  END IF;
  RETURN NULL;
END $$`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE TRIGGER plants_webhook_update AFTER UPDATE OF name, tag ON plants FOR EACH ROW ` +
        `WHEN ((OLD.name IS DISTINCT FROM NEW.name OR OLD.tag IS DISTINCT FROM NEW.tag) AND ${UNLESS_BULK_LOAD}) ` +
        'EXECUTE FUNCTION plantstore_webhook_event()',
    )
    .execute(db);
  await sql
    .raw(
      `CREATE TRIGGER plants_webhook_delete AFTER DELETE ON plants FOR EACH ROW WHEN (${UNLESS_BULK_LOAD}) EXECUTE FUNCTION plantstore_webhook_event()`,
    )
    .execute(db);
}
