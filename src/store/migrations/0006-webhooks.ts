import { sql, type Kysely, type Migration } from 'kysely';
import { UNLESS_BULK_LOAD } from './0003-change-log.js';

type Dialect = 'sqlite' | 'postgres';

/** SQLite's triggers that raise the event (an import drops them and raises its events in one statement). */
const WEBHOOK_TRIGGERS = ['plants_webhook_insert', 'plants_webhook_numbered'] as const;

/**
 * The new-plant webhook's tables. Endpoints are registered by operators (CLI). Every plant added, by any writer,
 * puts an event in the outbox (`webhook_events`) and one delivery per enabled endpoint (`webhook_deliveries`)
 * in the same transaction as the plant, by trigger: a crash after the commit loses nothing, and plain SQL and
 * imports are covered too. Nothing is written while no endpoint is enabled.
 */
export function webhooks(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      const id = dialect === 'sqlite' ? sql`id integer PRIMARY KEY AUTOINCREMENT` : sql`id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY`;
      const big = sql.raw(dialect === 'sqlite' ? 'integer' : 'bigint');
      await sql`CREATE TABLE webhook_endpoints (${id}, url text NOT NULL, secret text NOT NULL, previous_secret text,
        previous_until ${big}, disabled_at ${big}, disabled_reason text, created_at ${big} NOT NULL)`.execute(db);
      await sql`CREATE TABLE webhook_events (${id}, plant_id ${big} NOT NULL, name text NOT NULL, tag text, created_at ${big} NOT NULL)`.execute(
        db,
      );
      // One row per event and endpoint: its state, attempts and next try. lease_until: a process is delivering it.
      await sql`CREATE TABLE webhook_deliveries (event_id ${big} NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
        endpoint_id ${big} NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE, status text NOT NULL DEFAULT 'pending',
        attempts integer NOT NULL DEFAULT 0, next_attempt_at ${big} NOT NULL, lease_until ${big}, last_attempt_at ${big},
        last_status integer, last_error text, PRIMARY KEY (event_id, endpoint_id))`.execute(db);
      await sql`CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending'`.execute(db);
      if (dialect === 'sqlite') await sqliteTriggers(db);
      else await postgresTrigger(db);
    },
  };
}

const SQLITE_NOW = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/** The event and its deliveries, for the plant in NEW (SQLite). */
const sqliteRecord = (): string => `
  INSERT INTO webhook_events (plant_id, name, tag, created_at) VALUES (NEW.api_id, NEW.name, NEW.tag, ${SQLITE_NOW});
  INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at)
    SELECT last_insert_rowid(), id, ${SQLITE_NOW} FROM webhook_endpoints WHERE disabled_at IS NULL;`;

async function sqliteTriggers(db: Kysely<any>): Promise<void> {
  const enabled = 'EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL)';
  // A plant inserted without an id gets it from another trigger, by an UPDATE right after the insert: its event
  // waits for that update, so that it carries the id.
  await sql
    .raw(
      `CREATE TRIGGER ${WEBHOOK_TRIGGERS[0]} AFTER INSERT ON plants WHEN NEW.api_id IS NOT NULL AND ${enabled} BEGIN ${sqliteRecord()} END`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE TRIGGER ${WEBHOOK_TRIGGERS[1]} AFTER UPDATE OF api_id ON plants WHEN OLD.api_id IS NULL AND NEW.api_id IS NOT NULL AND ${enabled} BEGIN ${sqliteRecord()} END`,
    )
    .execute(db);
}

async function postgresTrigger(db: Kysely<any>): Promise<void> {
  await sql
    .raw(
      `CREATE FUNCTION plantstore_webhook_event() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  event bigint;
  now bigint := (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM webhook_endpoints WHERE disabled_at IS NULL) THEN RETURN NULL; END IF;
  INSERT INTO webhook_events (plant_id, name, tag, created_at) VALUES (NEW.api_id, NEW.name, NEW.tag, now) RETURNING id INTO event;
  INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at) SELECT event, id, now FROM webhook_endpoints WHERE disabled_at IS NULL;
  RETURN NULL;
END $$`,
    )
    .execute(db);
  // An import (bulk load) raises its events in one statement instead (see importedPlantEvents).
  await sql
    .raw(
      `CREATE TRIGGER plants_webhook AFTER INSERT ON plants FOR EACH ROW WHEN (${UNLESS_BULK_LOAD}) ` +
        'EXECUTE FUNCTION plantstore_webhook_event()',
    )
    .execute(db);
}
