import { sql, type Kysely, type Migration } from 'kysely';
import { grantTagFunction } from './0018-grants-by-tag.js';
import { plantTagToGrantsFunction } from './0019-grant-tags-first.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * PostgreSQL: the writes whose grants' tags are right only at READ COMMITTED are refused at a stricter isolation level
 * (plain SQL at REPEATABLE READ or SERIALIZABLE), where they could leave a grant with its plant's old tag for good.
 *
 * The triggers that keep grants' tags (migrations 0018, 0019) rely on each statement of a READ COMMITTED transaction
 * reading what committed before it: whichever of two writers waits for the other's lock reads the other's rows once
 * it has it. A REPEATABLE READ transaction reads its first snapshot all through:
 * - a change of a plant's tag rewrites the grants its snapshot holds, and misses a grant committed since (that
 *   grant's share lock of the plant is over once it commits, so the change does not fail on it);
 * - a member grant (a membership, a group's grant, a group no longer ranged) reads its plant's tag unlocked, under
 *   its group's lock, which a change of tag takes but does not change, so the change committed since goes unseen.
 * Both are refused with a message that says what to do; each then runs at READ COMMITTED, PostgreSQL's default. A
 * user's or group's own grant at REPEATABLE READ stays allowed: it reads its plant's tag under a share lock, which
 * fails with a serialization error when the plant's row changed since the snapshot, as that level does.
 *
 * The service's own sessions run at READ COMMITTED whatever the database's or role's default
 * (store/postgres/postgres-connection.ts). SQLite runs one writing transaction at a time: nothing changes there.
 */
export function grantTagsReadCommitted(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      const refuse = (what: string) => `IF current_setting('transaction_isolation') <> 'read committed' THEN
    RAISE EXCEPTION '${what.replaceAll("'", "''")} runs at READ COMMITTED only, not %: the tags of grants are kept from rows a stricter level''s snapshot may miss', upper(current_setting('transaction_isolation'))
      USING ERRCODE = 'feature_not_supported', HINT = 'Run it in a transaction at READ COMMITTED, PostgreSQL''s default.';
  END IF;`;
      await sql.raw(`CREATE OR REPLACE ${plantTagToGrantsFunction(refuse("A change of a plant's tag"))}`).execute(db);
      const group = refuse("A write of group access (a membership, a group's grant)");
      await sql.raw(`CREATE OR REPLACE ${grantTagFunction('plant_member_grants', group)}`).execute(db);
    },
  };
}
