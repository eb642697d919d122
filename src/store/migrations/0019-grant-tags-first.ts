import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * PostgreSQL: a grant reads its plant's tag before any other trigger of its row runs.
 *
 * PostgreSQL fires the triggers of one event on one table in the order of their names. Named `…_tag` (migration
 * 0018), a group grant's tag trigger ran after `…_member_grants`, which writes the group's member grants, each
 * reading the plant's tag without a lock. A change of the plant's tag that had updated the plant's row but not yet
 * committed locks only the groups already holding a grant of the plant, so it did not wait for this one: the member
 * grants took the old tag, the grant's own tag trigger then waited for the change and mended the grant alone, and
 * the members kept the plant under the old tag. Renamed to sort first, the tag trigger takes its share lock of the
 * plant's row before the member grants are written, so they read what the change committed. The three grant tables'
 * tag triggers are renamed alike.
 *
 * SQLite runs one writing transaction at a time: its triggers' order changes nothing there.
 */
export function grantTagsFirst(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      for (const table of ['plant_user_grants', 'plant_group_grants', 'plant_member_grants']) {
        await sql.raw(`ALTER TRIGGER ${table}_tag ON ${table} RENAME TO ${table}_inherit_tag`).execute(db);
      }
    },
  };
}
