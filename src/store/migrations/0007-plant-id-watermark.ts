import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/** 2^53 - 1: the largest public id (a JSON number holds whole numbers exactly up to it). */
const MAX_PLANT_ID = '9007199254740991';

/** The largest public id a plant holds or a deleted plant held: automatic ids come after it. */
const LARGEST_USED = `max(coalesce((SELECT max(api_id) FROM plants), 0), (SELECT largest_deleted FROM plant_id_watermark))`;

const EXHAUSTED = `no automatic plant id is left (ids up to ${MAX_PLANT_ID} have been used): give the plant an id of its own`;

/**
 * Automatic plant ids that stay within 1..2^53 - 1 and are never handed out twice. A plant added without an id gets
 * one more than the largest id ever used, deleted plants included: `plant_id_watermark` keeps the largest id a
 * deleted plant held, written when the plant that held the largest id goes. Past 2^53 - 1 the insert is refused.
 * Before, the trigger of 0005 took the largest id in use plus one, which handed a deleted plant's id out again and
 * ran past 2^53 - 1 once a client chose that id.
 *
 * An existing catalogue's watermark starts at the largest catalogue position ever used: automatic ids were at least
 * the position before, so none handed out then comes again.
 */
export function plantIdWatermark(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => (dialect === 'postgres' ? addPostgres(db) : addSqlite(db)),
  };
}

async function addSqlite(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE plant_id_watermark (id INTEGER PRIMARY KEY CHECK (id = 1), largest_deleted INTEGER NOT NULL)`.execute(db);
  await sql`INSERT INTO plant_id_watermark VALUES (1, min(${sql.raw(MAX_PLANT_ID)},
    coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'plants'), 0)))`.execute(db);
  // The plant is completed right after its insert (SQLite has no BEFORE trigger that can set a column).
  await sql`DROP TRIGGER plants_api_id_given`.execute(db);
  await sql
    .raw(
      `CREATE TRIGGER plants_api_id_given AFTER INSERT ON plants WHEN NEW.api_id IS NULL BEGIN
  SELECT RAISE(ABORT, '${EXHAUSTED}') WHERE ${LARGEST_USED} >= ${MAX_PLANT_ID};
  UPDATE plants SET api_id = ${LARGEST_USED} + 1 WHERE id = NEW.id;
END`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE TRIGGER plants_api_id_retired AFTER DELETE ON plants
  WHEN OLD.api_id > coalesce((SELECT max(api_id) FROM plants), 0) AND OLD.api_id > (SELECT largest_deleted FROM plant_id_watermark) BEGIN
  UPDATE plant_id_watermark SET largest_deleted = OLD.api_id;
END`,
    )
    .execute(db);
}

async function addPostgres(db: Kysely<any>): Promise<void> {
  await sql`CREATE TABLE plant_id_watermark (id integer PRIMARY KEY CHECK (id = 1), largest_deleted bigint NOT NULL)`.execute(db);
  await sql`INSERT INTO plant_id_watermark VALUES (1, least(${sql.raw(MAX_PLANT_ID)},
    coalesce(pg_sequence_last_value(pg_get_serial_sequence('plants', 'id')::regclass), 0)))`.execute(db);
  // Inserts without an api_id take the next one under a lock held to their commit, so that two such inserts never
  // take the same number (the CLI and imports take the same lock).
  await sql
    .raw(
      `CREATE OR REPLACE FUNCTION plantstore_plant_api_id() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  largest bigint;
BEGIN
  IF NEW.api_id IS NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '.plants.api_id'));
    largest := greatest(coalesce((SELECT max(api_id) FROM plants), 0), (SELECT largest_deleted FROM plant_id_watermark));
    IF largest >= ${MAX_PLANT_ID} THEN
      RAISE EXCEPTION '${EXHAUSTED}' USING ERRCODE = 'check_violation';
    END IF;
    NEW.api_id := largest + 1;
  END IF;
  RETURN NEW;
END $$`,
    )
    .execute(db);
  await sql
    .raw(
      `CREATE FUNCTION plantstore_plant_api_id_retired() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF OLD.api_id > coalesce((SELECT max(api_id) FROM plants), 0) THEN
    UPDATE plant_id_watermark SET largest_deleted = OLD.api_id WHERE largest_deleted < OLD.api_id;
  END IF;
  RETURN NULL;
END $$`,
    )
    .execute(db);
  await sql`CREATE TRIGGER plants_api_id_retired AFTER DELETE ON plants FOR EACH ROW EXECUTE FUNCTION plantstore_plant_api_id_retired()`.execute(
    db,
  );
}
