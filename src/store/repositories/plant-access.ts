import { sql, type Kysely, type Transaction } from 'kysely';
import { conditionHolds, type VersionCondition } from '../../catalogue/version-conditions.js';
import { ACCESS_PATHS, mayChangePlant, type Actor, type Viewer } from '../../catalogue/access-rule.js';
import {
  accessVersion,
  changedAccess,
  checkAccessChange,
  granteesOf,
  normalAccess,
  type AccessChange,
  type Grantee,
  type PlantAccess,
} from '../../catalogue/plant-access.js';
import { FIELD_NAMES, fieldsOfRow, type PlantFields } from '../../catalogue/plant-fields.js';
import { position, type PlantId, type Position } from '../../catalogue/plant-ids.js';
import type { DatabaseSeam } from '../seam.js';
import { plantVisibleSql } from '../listing-sql.js';
import type { Database } from '../schema.js';
import type { AccessRead, AccessWrite } from '../records.js';
import { withStoreErrors } from '../writes.js';

// The access of one plant (its public flag and grants), read and changed with an actor's rights: the owner's and
// admins' sharing over HTTP, and the operator's `grants` and `plants set-public` commands, through one path.

type Db = Kysely<Database> | Transaction<Database>;

/** The plant as an actor who may change it finds it. */
interface ChangeablePlant {
  at: Position;
  isPublic: boolean;
}

/** A plant as an actor who sees it finds it: where it is, its fields, and whether the actor may change it. */
export interface FoundPlant extends ChangeablePlant {
  fields: PlantFields;
  changeable: boolean;
}

/**
 * The plant with public id `id` as `actor` finds it (the access rule, access-rule.ts): 'hidden' when there is none
 * or the actor may not see it, so that nothing tells of a plant the actor cannot see. In a writing transaction,
 * `lock` (DatabaseSeam's rowLocks.change) holds the plant until the commit: a delete under way is waited for,
 * and then there is none.
 */
export async function foundPlant(db: Db, actor: Actor, id: PlantId, lock = ''): Promise<FoundPlant | 'hidden'> {
  const plant = await db
    .selectFrom('plants')
    .select(['id', 'owner_id', 'is_public', ...FIELD_NAMES])
    .where('api_id', '=', id)
    .modifyEnd(sql.raw(lock))
    .executeTakeFirst();
  if (plant === undefined) return 'hidden';
  const at = position(Number(plant.id));
  const found = { at, isPublic: Number(plant.is_public) === 1, fields: fieldsOfRow(plant) };
  if (mayChangePlant(actor, Number(plant.owner_id))) return { ...found, changeable: true };
  return 'operator' in actor || !(await visibleTo(db, at, actor)) ? 'hidden' : { ...found, changeable: false };
}

/**
 * The plant with public id `id`, when `actor` may change it (the rule of delete, access-rule.ts): 'hidden' as
 * foundPlant has it; 'forbidden' when the actor sees it but may not change it.
 */
export async function changeablePlant(db: Db, actor: Actor, id: PlantId, lock = ''): Promise<FoundPlant | 'hidden' | 'forbidden'> {
  const plant = await foundPlant(db, actor, id, lock);
  return plant === 'hidden' || plant.changeable ? plant : 'forbidden';
}

/** Whether the user `viewer` sees the plant at `at` (the access rule for one plant; see listing-sql.ts). */
async function visibleTo(db: Db, at: Position, viewer: Viewer): Promise<boolean> {
  const claimed =
    viewer.groups === undefined || viewer.groups.length === 0
      ? []
      : (await db.selectFrom('groups').select('id').where('name', 'in', viewer.groups).execute()).map((g) => Number(g.id));
  const { rows } = await sql<{ visible: unknown }>`SELECT ${sql.raw(plantVisibleSql(at, viewer.userId, claimed))} AS visible`.execute(db);
  // A boolean on PostgreSQL, 0 or 1 on SQLite.
  return rows[0]?.visible === true || rows[0]?.visible === 1;
}

/** The grants of the plant at `at`, with its flag, in the access's one form. */
async function accessAt(db: Db, plant: ChangeablePlant): Promise<PlantAccess> {
  const users = await db
    .selectFrom('plant_user_grants as g')
    .innerJoin('users as u', 'u.id', 'g.user_id')
    .select(['u.name', 'u.id'])
    .where('g.plant_id', '=', plant.at)
    .execute();
  const groups = await db
    .selectFrom('plant_group_grants as g')
    .innerJoin('groups as gr', 'gr.id', 'g.group_id')
    .select(['gr.name', 'gr.id'])
    .where('g.plant_id', '=', plant.at)
    .execute();
  return normalAccess({ public: plant.isPublic, users: users.map((u) => u.name), groups: groups.map((g) => g.name) });
}

/** The two lists of an access, each a kind of grantee. */
const LISTS = ['users', 'groups'] as const;
type List = (typeof LISTS)[number];

/** Where the grants of each list are kept (the access rule's paths), and the table of their names. */
const GRANTS = {
  users: { table: ACCESS_PATHS.sharedWithUser.table, column: ACCESS_PATHS.sharedWithUser.key, names: 'users' },
  groups: { table: ACCESS_PATHS.sharedWithGroup.table, column: ACCESS_PATHS.sharedWithGroup.key, names: 'groups' },
} as const satisfies Record<List, { table: keyof Database; column: string; names: keyof Database }>;

/** The names of `names` that `taken` does not hold, in their order. */
function without(names: readonly string[], taken: readonly string[]): string[] {
  const held = new Set(taken);
  return names.filter((name) => !held.has(name));
}

type Names = Record<List, readonly string[]>;
const NONE: Names = { users: [], groups: [] };

/** One grantee as the lists of an access. */
const listsOf = (grantee: Grantee): Names =>
  'user' in grantee ? { users: [grantee.user], groups: [] } : { users: [], groups: [grantee.group] };

/**
 * The ids of the users and groups named, by list, and the grantees of names nobody has. `lock` holds the rows
 * found until the commit: one being removed meanwhile is waited for, and is then unknown.
 */
async function idsOf(db: Db, named: Names, lock: string): Promise<{ ids: Record<List, Map<string, number>>; missing: Grantee[] }> {
  const ids = { users: new Map<string, number>(), groups: new Map<string, number>() };
  for (const list of LISTS) {
    if (named[list].length === 0) continue;
    const { rows } = await sql<{ id: number; name: string }>`SELECT id, name FROM ${sql.table(GRANTS[list].names)}
      WHERE name IN (${sql.join([...named[list]])}) ${sql.raw(lock)}`.execute(db);
    for (const row of rows) ids[list].set(row.name, Number(row.id));
  }
  const unknown = (list: List) => without(named[list], [...ids[list].keys()]);
  return { ids, missing: granteesOf({ public: false, users: unknown('users'), groups: unknown('groups') }) };
}

/**
 * Who has access to a plant, read and changed with the actor's rights (catalogue/access-rule.ts): its owner or an
 * admin over HTTP, or the operator (the CLI). One path whoever asks.
 */
export function accessRepository(d: DatabaseSeam) {
  return {
    /** The access of the plant with public id `id`, when `actor` may change it. */
    async read(actor: Actor, id: PlantId): Promise<AccessRead> {
      return withStoreErrors(d, async () => {
        const plant = await changeablePlant(d.db, actor, id);
        return typeof plant === 'string' ? { outcome: plant } : { outcome: 'read', access: await accessAt(d.db, plant) };
      });
    },

    /**
     * Changes the access of the plant with public id `id` when `actor` may, in one transaction that holds the plant's
     * access against every other change of it: with `condition`, only while its version (catalogue/plant-access.ts)
     * meets it. Names that are not granted yet must be of users and groups that exist (an unknown one changes
     * nothing, and is named); a grantee taken away that was never granted changes nothing. The grants' and the flag's
     * rows log themselves, so every cache and instance follows (store/change-log.ts).
     */
    async change(actor: Actor, id: PlantId, change: AccessChange, condition?: VersionCondition): Promise<AccessWrite> {
      checkAccessChange(change);
      return withStoreErrors(d, () =>
        d.writeTransaction(async (trx): Promise<AccessWrite> => {
          const plant = await changeablePlant(trx, actor, id, d.statements.rowLocks.change);
          if (typeof plant === 'string') return { outcome: plant };
          const current = await accessAt(trx, plant);
          const next = changedAccess(current, change);
          // Per list, the names the change adds and takes away; taking away a name never granted asks about it too:
          // it must be one that exists.
          const added = { users: without(next.users, current.users), groups: without(next.groups, current.groups) };
          const removed = { users: without(current.users, next.users), groups: without(current.groups, next.groups) };
          const asked = change.kind === 'unshare' && removed.users.length + removed.groups.length === 0 ? listsOf(change.grantee) : NONE;
          const named = { users: [...added.users, ...asked.users], groups: [...added.groups, ...asked.groups] };
          const { ids, missing } = await idsOf(trx, named, d.statements.rowLocks.keep);
          if (missing.length > 0) return { outcome: 'unknown', grantees: missing };
          // After the names: a change that would be refused without a precondition is refused so with one (RFC 9110
          // §13.2.1), whatever version it names.
          if (!conditionHolds(condition, accessVersion(current))) return { outcome: 'stale', access: current };
          if (next.public !== current.public) {
            await trx
              .updateTable('plants')
              .set({ is_public: next.public ? 1 : 0 })
              .where('id', '=', plant.at)
              .execute();
          }
          for (const list of LISTS) {
            const { table, column, names } = GRANTS[list];
            if (removed[list].length > 0) {
              await sql`DELETE FROM ${sql.table(table)} WHERE plant_id = ${plant.at}
                AND ${sql.ref(column)} IN (SELECT id FROM ${sql.table(names)} WHERE name IN (${sql.join(removed[list])}))`.execute(trx);
            }
            const rows = added[list].map((name) => sql`(${plant.at}, ${ids[list].get(name)!})`);
            if (rows.length > 0)
              await sql`INSERT INTO ${sql.table(table)} (plant_id, ${sql.ref(column)}) VALUES ${sql.join(rows)}`.execute(trx);
          }
          const changed = next.public !== current.public || LISTS.some((list) => added[list].length + removed[list].length > 0);
          return { outcome: changed ? 'changed' : 'unchanged', access: next };
        }),
      );
    },
  };
}

export type AccessRepository = ReturnType<typeof accessRepository>;
