import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * The member grants' triggers (migration 0012) on PostgreSQL lock the group row before they derive anything.
 *
 * A trigger reads the other table (a membership's reads the group's grants, a grant's reads the group's members),
 * and at READ COMMITTED it sees only what was committed when its statement began: a membership removed in an open
 * transaction while a plant is shared with the group left the leaver a member grant for good. Both triggers now
 * first take the group's row lock (FOR NO KEY UPDATE: it waits for the other side and does not conflict with the
 * foreign keys' KEY SHARE), and every statement of a VOLATILE PL/pgSQL function takes a fresh snapshot, so the
 * second of two transactions on one group derives from the first's committed rows. A membership that moves to
 * another group locks both rows in id order. SQLite runs one writing transaction at a time and needs none of it.
 */
export function memberGrantsLocked(dialect: Dialect): Migration {
  return {
    up: async (db: Kysely<any>) => {
      if (dialect !== 'postgres') return;
      for (const [table, body] of Object.entries(MAINTAINED)) {
        await sql
          .raw(
            `CREATE OR REPLACE FUNCTION plantstore_member_grants_${table}() RETURNS trigger LANGUAGE plpgsql VOLATILE
  SET search_path FROM CURRENT AS $$
DECLARE
  old_group bigint;
  new_group bigint;
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN old_group := OLD.group_id; END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN new_group := NEW.group_id; END IF;
  PERFORM 1 FROM groups WHERE id IN (old_group, new_group) ORDER BY id FOR NO KEY UPDATE;
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    ${body.delete};
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    ${body.insert} ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END $$`,
          )
          .execute(db);
      }
    },
  };
}

/** The trigger bodies of migration 0012, as released (a migration imports nothing that may change). */
const MAINTAINED = {
  group_members: {
    insert:
      'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT NEW.user_id, plant_id, NEW.group_id FROM plant_group_grants WHERE group_id = NEW.group_id',
    delete: 'DELETE FROM plant_member_grants WHERE user_id = OLD.user_id AND group_id = OLD.group_id',
  },
  plant_group_grants: {
    insert:
      'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT user_id, NEW.plant_id, NEW.group_id FROM group_members WHERE group_id = NEW.group_id',
    delete: 'DELETE FROM plant_member_grants WHERE plant_id = OLD.plant_id AND group_id = OLD.group_id',
  },
} as const;
