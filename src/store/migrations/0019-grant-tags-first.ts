import { sql, type Kysely, type Migration } from 'kysely';
import { rewriteTags } from './0018-grants-by-tag.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * Grants' tags right for two more writers: on PostgreSQL, a group share beside a change of its plant's tag; on
 * SQLite, a plant replaced by plain SQL without foreign keys.
 *
 * PostgreSQL: a grant reads its plant's tag before the service's other triggers of its row run.
 *
 * PostgreSQL fires the triggers of one event on one table in the order of their names. Named `…_tag` (migration
 * 0018), a group grant's tag trigger ran after `…_member_grants`, which writes the group's member grants, each
 * reading the plant's tag without a lock. A change of the plant's tag that had updated the plant's row but not yet
 * committed locks only the groups already holding a grant of the plant, so it did not wait for this one: the member
 * grants took the old tag, the grant's own tag trigger then waited for the change and mended the grant alone, and
 * the members kept the plant under the old tag. Renamed to sort first, the tag trigger takes its share lock of the
 * plant's row before the member grants are written, so they read what the change committed. The three grant tables'
 * tag triggers are renamed alike. (Foreign keys' own triggers still fire before them: they take no lock a change of
 * tag waits for.)
 *
 * A change of tag now locks the plant's groups after it has rewritten the plant's grants, no longer before: the groups
 * are those holding the plant once its grants are rewritten, and so locked by it. Locked before, from an earlier
 * snapshot, they missed a group that a grant was moved to (plain SQL updating a grant's group_id, which takes no
 * lock of the plant) while the change waited: a member joining that group then wrote its rows with the old tag
 * before the change committed. After the rewrite no grant of the plant can come or go until the change commits (a
 * new grant waits for the plant's row; a grant moved or deleted, for the row the change rewrote).
 *
 * SQLite runs one writing transaction at a time: its triggers' order changes nothing there. But a plain `sqlite3`
 * session runs without foreign keys: its `INSERT OR REPLACE` of a plant (or a delete and an insert of the same id)
 * leaves the old row's grants in place for the new one, with the old row's tag, and only a change of tag rewrote
 * grants' tags. A plant inserted now gives its tag to the grants that already name it; the condition, two probes of
 * the grants by plant, finds none for any other insert. PostgreSQL always checks its foreign keys: a plant's grants
 * go with it.
 */
/**
 * The PostgreSQL function (`FUNCTION …`) that rewrites the tags of a plant's grants when its tag changes; `guard`,
 * when given, runs first (migration 0024's refusal at a stricter isolation level). The member grants are found by
 * the plant's groups, which the change locks first (see above).
 */
export function plantTagToGrantsFunction(guard = ''): string {
  const [userGrants, groupGrants, memberGrants] = rewriteTags('NEW.id', 'NEW.tag');
  return `FUNCTION plantstore_plant_tag_to_grants() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
${guard === '' ? '' : `  ${guard}\n`}  ${userGrants};
  ${groupGrants};
  PERFORM 1 FROM groups WHERE id IN (SELECT group_id FROM plant_group_grants WHERE plant_id = NEW.id) ORDER BY id FOR NO KEY UPDATE;
  ${memberGrants};
  RETURN NULL;
END $$`;
}

export function grantTagsFirst(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      const [userGrants, groupGrants, memberGrants] = rewriteTags('NEW.id', 'NEW.tag');
      if (dialect === 'sqlite') {
        const named = (table: string) => `EXISTS (SELECT 1 FROM ${table} WHERE plant_id = NEW.id)`;
        await sql
          .raw(
            `CREATE TRIGGER plants_tag_to_earlier_grants AFTER INSERT ON plants ` +
              `WHEN ${named('plant_user_grants')} OR ${named('plant_group_grants')} BEGIN ${userGrants}; ${groupGrants}; ${memberGrants}; END`,
          )
          .execute(db);
        return;
      }
      for (const table of ['plant_user_grants', 'plant_group_grants', 'plant_member_grants']) {
        await sql.raw(`ALTER TRIGGER ${table}_tag ON ${table} RENAME TO ${table}_inherit_tag`).execute(db);
      }
      await sql.raw(`CREATE OR REPLACE ${plantTagToGrantsFunction()}`).execute(db);
    },
  };
}
