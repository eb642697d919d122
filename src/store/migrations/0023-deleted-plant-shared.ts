import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * PostgreSQL: whether a plant a delete removes had grants, read with a snapshot of its own. A delete that waited
 * for a share committing meanwhile (the grant's key lock on the plant) sees the grant only through a fresh snapshot:
 * in the delete's own, read as it began, the plant was unshared, and its writer skipped reading the change log for
 * the grantees' cascaded rows, so their cached pages kept the plant until the next read of the log. A volatile
 * function's query takes a new snapshot at its start in READ COMMITTED, after the delete has its row. SQLite's
 * writers run one at a time and read the grants in the statement.
 */
export function deletedPlantShared(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      await sql`
        CREATE FUNCTION plantstore_plant_shared(plant bigint) RETURNS boolean LANGUAGE sql VOLATILE AS $$
          SELECT EXISTS (SELECT 1 FROM plant_user_grants WHERE plant_id = plant)
              OR EXISTS (SELECT 1 FROM plant_group_grants WHERE plant_id = plant)
        $$`.execute(db);
    },
  };
}
