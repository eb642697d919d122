import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * The largest id a plant held stays used (0007's watermark) when plain SQL makes it go without a row's DELETE: a
 * `TRUNCATE` of plants (or of users, cascading to them), which fires no row trigger, or an `UPDATE` that gives the
 * plant of the largest id another id. Automatic ids then started again below an id already handed out, and a
 * client that kept the old id could delete the new plant. SQLite has no TRUNCATE (its `DELETE FROM plants` runs the
 * row triggers).
 */
export function plantIdsKeptByEveryWriter(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect === 'sqlite') {
        await sql
          .raw(
            `CREATE TRIGGER plants_api_id_left AFTER UPDATE OF api_id ON plants
  WHEN OLD.api_id > coalesce((SELECT max(api_id) FROM plants), 0) AND OLD.api_id > (SELECT largest_deleted FROM plant_id_watermark) BEGIN
  UPDATE plant_id_watermark SET largest_deleted = OLD.api_id;
END`,
          )
          .execute(db);
        return;
      }
      // TRUNCATE holds the table alone, so the largest id read before it goes is the largest committed.
      await sql
        .raw(
          `CREATE FUNCTION plantstore_plant_api_ids_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  UPDATE plant_id_watermark SET largest_deleted = largest
    FROM (SELECT max(api_id) AS largest FROM plants) p WHERE largest > largest_deleted;
  RETURN NULL;
END $$`,
        )
        .execute(db);
      await sql`CREATE TRIGGER plants_api_ids_truncated BEFORE TRUNCATE ON plants FOR EACH STATEMENT EXECUTE FUNCTION plantstore_plant_api_ids_truncated()`.execute(
        db,
      );
      // An id changed away from the largest: as 0007's DELETE trigger does for the row that goes.
      await sql`CREATE TRIGGER plants_api_id_left AFTER UPDATE OF api_id ON plants FOR EACH ROW
        WHEN (OLD.api_id IS DISTINCT FROM NEW.api_id AND OLD.api_id IS NOT NULL) EXECUTE FUNCTION plantstore_plant_api_id_retired()`.execute(
        db,
      );
    },
  };
}
