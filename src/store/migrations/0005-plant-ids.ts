import { sql, type Kysely, type Migration } from 'kysely';
import { unlogged } from './backfill.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * `plants.api_id`: a plant's public identifier, the `id` of the API's `NewPlant` and of `DELETE /plants/{id}`,
 * chosen by whoever creates the plant (a client, `plants add --id`, an import record). `plants.id` stays the
 * catalogue position (the order plants were added, which listings and cursors follow), so a client's choice of
 * id never moves a plant in the listing. Existing plants keep their numbers: api_id = id. A plant inserted
 * without one (the CLI without --id, plain SQL) gets its position, or the largest api_id plus one when that is
 * larger: where nobody chose ids, the two numbers stay the same and ids are never used twice.
 */
/** The trigger that gives a plant inserted without an api_id the next one. */
const PLANT_ID_TRIGGER = 'plants_api_id_given';
/** The unique index of public ids: an id given twice or already taken is refused by it. */
const PLANT_API_ID_INDEX = 'plants_by_api_id';

export function plantIds(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => (dialect === 'postgres' ? addPostgres(db) : addSqlite(db)),
  };
}

/** Existing plants keep their numbers. The backfill changes nothing anyone sees: it is not logged. */
function backfillIds(db: Kysely<any>, dialect: Dialect): Promise<void> {
  return unlogged(db, dialect, 'plants', async () => {
    await sql`UPDATE plants SET api_id = id`.execute(db);
  });
}

async function addSqlite(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE plants ADD COLUMN api_id INTEGER`.execute(db);
  await backfillIds(db, 'sqlite');
  await sql`CREATE UNIQUE INDEX ${sql.raw(PLANT_API_ID_INDEX)} ON plants (api_id)`.execute(db);
  // SQLite has no BEFORE trigger that can set a column: the row is completed right after its insert.
  await sql`CREATE TRIGGER ${sql.raw(PLANT_ID_TRIGGER)} AFTER INSERT ON plants WHEN NEW.api_id IS NULL BEGIN
    UPDATE plants SET api_id = max(NEW.id, (SELECT coalesce(max(api_id), 0) + 1 FROM plants)) WHERE id = NEW.id;
  END`.execute(db);
}

async function addPostgres(db: Kysely<any>): Promise<void> {
  await sql`ALTER TABLE plants ADD COLUMN api_id bigint`.execute(db);
  await backfillIds(db, 'postgres');
  // Inserts without an api_id take the next one under a lock held to their commit, so that two such inserts
  // never take the same number.
  await sql
    .raw(
      `CREATE FUNCTION plantstore_plant_api_id() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF NEW.api_id IS NULL THEN
    PERFORM pg_advisory_xact_lock(hashtext(current_schema() || '.plants.api_id'));
    NEW.api_id := greatest(NEW.id, (SELECT coalesce(max(api_id), 0) + 1 FROM plants));
  END IF;
  RETURN NEW;
END $$`,
    )
    .execute(db);
  await sql`CREATE TRIGGER ${sql.raw(PLANT_ID_TRIGGER)} BEFORE INSERT ON plants FOR EACH ROW WHEN (NEW.api_id IS NULL) EXECUTE FUNCTION plantstore_plant_api_id()`.execute(
    db,
  );
  await sql`ALTER TABLE plants ALTER COLUMN api_id SET NOT NULL`.execute(db);
  await sql`CREATE UNIQUE INDEX ${sql.raw(PLANT_API_ID_INDEX)} ON plants (api_id)`.execute(db);
}
