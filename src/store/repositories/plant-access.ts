import { sql, type Kysely, type Transaction } from 'kysely';
import { mayChangePlant, type Actor, type Viewer } from '../../catalogue/access-rule.js';
import {
  accessVersion,
  changedAccess,
  checkGrantee,
  granteesOf,
  type AccessChange,
  type Grantee,
  type PlantAccess,
} from '../../catalogue/plant-access.js';
import { position, type PlantId, type Position } from '../../catalogue/plant-ids.js';
import type { StoreDialect } from '../dialect.js';
import { plantVisibleSql } from '../listing-sql.js';
import type { Database } from '../schema.js';
import type { AccessRead, AccessWrite } from '../store.js';
import { writing } from '../writes.js';

// The access of one plant (its public flag and grants), read and changed with an actor's rights: the owner's and
// admins' sharing over HTTP, and the operator's `grants` and `plants set-public` commands, through one path.

type Db = Kysely<Database> | Transaction<Database>;

/** The plant as an actor who may change it finds it. */
interface ChangeablePlant {
  at: Position;
  isPublic: boolean;
}

/**
 * The plant with public id `id`, when `actor` may change it (the rule of delete, access-rule.ts): 'hidden' when
 * there is none or the actor may not see it, so that ids of others' private plants cannot be probed; 'forbidden'
 * when the actor sees it but may not change it.
 */
export async function changeablePlant(db: Db, actor: Actor, id: PlantId): Promise<ChangeablePlant | 'hidden' | 'forbidden'> {
  const plant = await db.selectFrom('plants').select(['id', 'owner_id', 'is_public']).where('api_id', '=', id).executeTakeFirst();
  if (plant === undefined) return 'hidden';
  const at = position(Number(plant.id));
  if (mayChangePlant(actor, Number(plant.owner_id))) return { at, isPublic: Number(plant.is_public) === 1 };
  return 'operator' in actor || !(await visibleTo(db, at, actor)) ? 'hidden' : 'forbidden';
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
  const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0);
  return { public: plant.isPublic, users: users.sort(byName).map((u) => u.name), groups: groups.sort(byName).map((g) => g.name) };
}

/** The access of the plant with public id `id`, when `actor` may change it. */
export async function readAccess(d: StoreDialect, actor: Actor, id: PlantId): Promise<AccessRead> {
  return writing(d, async () => {
    const plant = await changeablePlant(d.db, actor, id);
    return typeof plant === 'string' ? { outcome: plant } : { outcome: 'read', access: await accessAt(d.db, plant) };
  });
}

/**
 * Changes the access of the plant with public id `id` when `actor` may, in one transaction that holds the plant's
 * access against every other change of it: with `ifVersion`, only while its version (catalogue/plant-access.ts)
 * is one of those. Names that are not granted yet must be of users and groups that exist (an unknown one changes
 * nothing, and is named); a grantee taken away that was never granted changes nothing. The grants' and the flag's
 * rows log themselves, so every cache and instance follows (store/change-log.ts).
 */
export async function changeAccess(
  d: StoreDialect,
  actor: Actor,
  id: PlantId,
  change: AccessChange,
  ifVersion?: readonly string[],
): Promise<AccessWrite> {
  for (const grantee of change.kind === 'replace' ? granteesOf(change.access) : change.kind === 'public' ? [] : [change.grantee]) {
    checkGrantee(grantee);
  }
  return writing(d, () =>
    d.writeTransaction(async (trx): Promise<AccessWrite> => {
      await d.lock(trx, `plant-access:${id}`);
      const plant = await changeablePlant(trx, actor, id);
      if (typeof plant === 'string') return { outcome: plant };
      const current = await accessAt(trx, plant);
      if (ifVersion !== undefined && !ifVersion.includes(accessVersion(current))) return { outcome: 'stale', access: current };
      const next = changedAccess(current, change);
      const added = { users: without(next.users, current.users), groups: without(next.groups, current.groups) };
      const removed = { users: without(current.users, next.users), groups: without(current.groups, next.groups) };
      // Taking away a grantee that was never granted asks about a name too: it must be one that exists.
      const named = change.kind === 'unshare' && removed.users.length + removed.groups.length === 0 ? [change.grantee] : [];
      const ids = await idsOf(trx, {
        users: [...added.users, ...named.flatMap(userOf)],
        groups: [...added.groups, ...named.flatMap(groupOf)],
      });
      if (ids.missing.length > 0) return { outcome: 'unknown', grantees: ids.missing };
      let changed = false;
      if (next.public !== current.public) {
        await trx
          .updateTable('plants')
          .set({ is_public: next.public ? 1 : 0 })
          .where('id', '=', plant.at)
          .execute();
        changed = true;
      }
      if (removed.users.length > 0) {
        await trx
          .deleteFrom('plant_user_grants')
          .where('plant_id', '=', plant.at)
          .where('user_id', 'in', trx.selectFrom('users').select('id').where('name', 'in', removed.users))
          .execute();
        changed = true;
      }
      if (removed.groups.length > 0) {
        await trx
          .deleteFrom('plant_group_grants')
          .where('plant_id', '=', plant.at)
          .where('group_id', 'in', trx.selectFrom('groups').select('id').where('name', 'in', removed.groups))
          .execute();
        changed = true;
      }
      if (added.users.length > 0) {
        const rows = added.users.map((name) => ({ plant_id: plant.at, user_id: ids.users.get(name)! }));
        await trx.insertInto('plant_user_grants').values(rows).execute();
        changed = true;
      }
      if (added.groups.length > 0) {
        const rows = added.groups.map((name) => ({ plant_id: plant.at, group_id: ids.groups.get(name)! }));
        await trx.insertInto('plant_group_grants').values(rows).execute();
        changed = true;
      }
      return { outcome: changed ? 'changed' : 'unchanged', access: next };
    }),
  );
}

const without = (names: readonly string[], taken: readonly string[]): string[] => names.filter((n) => !taken.includes(n));
const userOf = (g: Grantee): string[] => ('user' in g ? [g.user] : []);
const groupOf = (g: Grantee): string[] => ('group' in g ? [g.group] : []);

/** The ids of the users and groups named, and the grantees of names nobody has. */
async function idsOf(
  db: Db,
  names: { users: readonly string[]; groups: readonly string[] },
): Promise<{ users: Map<string, number>; groups: Map<string, number>; missing: Grantee[] }> {
  const users = new Map<string, number>();
  const groups = new Map<string, number>();
  if (names.users.length > 0) {
    for (const row of await db.selectFrom('users').select(['id', 'name']).where('name', 'in', names.users).execute()) {
      users.set(row.name, Number(row.id));
    }
  }
  if (names.groups.length > 0) {
    for (const row of await db.selectFrom('groups').select(['id', 'name']).where('name', 'in', names.groups).execute()) {
      groups.set(row.name, Number(row.id));
    }
  }
  const missing: Grantee[] = [
    ...names.users.filter((name) => !users.has(name)).map((user) => ({ user })),
    ...names.groups.filter((name) => !groups.has(name)).map((group) => ({ group })),
  ];
  return { users, groups, missing };
}
