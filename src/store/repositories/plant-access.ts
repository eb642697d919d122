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
      // Taking away a grantee that was never granted asks about a name too: it must be one that exists.
      const asked = change.kind === 'unshare' && !granteesOf(current).some((g) => sameGrantee(g, change.grantee)) ? [change.grantee] : [];
      const added = granteesOf(next).filter((g) => !granteesOf(current).some((c) => sameGrantee(c, g)));
      const removed = granteesOf(current).filter((g) => !granteesOf(next).some((n) => sameGrantee(n, g)));
      const { ids, missing } = await idsOf(trx, [...added, ...asked]);
      if (missing.length > 0) return { outcome: 'unknown', grantees: missing };
      if (next.public !== current.public) {
        await trx
          .updateTable('plants')
          .set({ is_public: next.public ? 1 : 0 })
          .where('id', '=', plant.at)
          .execute();
      }
      for (const kind of GRANTEE_KINDS) {
        const { table, column, names } = GRANTS[kind];
        const gone = removed.flatMap((g) => nameOf(g, kind));
        if (gone.length > 0) {
          await sql`DELETE FROM ${sql.table(table)} WHERE plant_id = ${plant.at}
            AND ${sql.ref(column)} IN (SELECT id FROM ${sql.table(names)} WHERE name IN (${sql.join(gone)}))`.execute(trx);
        }
        const come = added.flatMap((g) => nameOf(g, kind)).map((name) => sql`(${plant.at}, ${ids[kind].get(name)!})`);
        if (come.length > 0)
          await sql`INSERT INTO ${sql.table(table)} (plant_id, ${sql.ref(column)}) VALUES ${sql.join(come)}`.execute(trx);
      }
      const changed = next.public !== current.public || added.length + removed.length > 0;
      return { outcome: changed ? 'changed' : 'unchanged', access: next };
    }),
  );
}

const GRANTEE_KINDS = ['user', 'group'] as const;
type GranteeKind = (typeof GRANTEE_KINDS)[number];

/** Where the grants of each kind of grantee are kept, and the table of their names. */
const GRANTS = {
  user: { table: 'plant_user_grants', column: 'user_id', names: 'users' },
  group: { table: 'plant_group_grants', column: 'group_id', names: 'groups' },
} as const satisfies Record<GranteeKind, { table: keyof Database; column: string; names: keyof Database }>;

/** The grantee's name when it is of `kind`. */
const nameOf = (g: Grantee, kind: GranteeKind): string[] =>
  kind === 'user' ? ('user' in g ? [g.user] : []) : 'group' in g ? [g.group] : [];

const sameGrantee = (a: Grantee, b: Grantee): boolean =>
  'user' in a ? 'user' in b && a.user === b.user : 'group' in b && a.group === b.group;

/** The ids of the users and groups named, and the grantees of names nobody has. */
async function idsOf(db: Db, grantees: readonly Grantee[]): Promise<{ ids: Record<GranteeKind, Map<string, number>>; missing: Grantee[] }> {
  const ids = { user: new Map<string, number>(), group: new Map<string, number>() };
  const missing: Grantee[] = [];
  for (const kind of GRANTEE_KINDS) {
    const names = grantees.flatMap((g) => nameOf(g, kind));
    if (names.length === 0) continue;
    const { rows } = await sql<{
      id: number;
      name: string;
    }>`SELECT id, name FROM ${sql.table(GRANTS[kind].names)} WHERE name IN (${sql.join(names)})`.execute(db);
    for (const row of rows) ids[kind].set(row.name, Number(row.id));
    for (const name of names) if (!ids[kind].has(name)) missing.push(kind === 'user' ? { user: name } : { group: name });
  }
  return { ids, missing };
}
