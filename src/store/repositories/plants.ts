import { sql, type Kysely, type Transaction } from 'kysely';
import { isOperator, mayChangePlant, newPlantOwner, type Actor, type PlantDraft, type Viewer } from '../../catalogue/access-rule.js';
import { conflict, notFound } from '../../catalogue/errors.js';
import { checkPlant } from '../../catalogue/names.js';
import { nextAutomaticId, plantId, position, type PlantId, type Position } from '../../catalogue/plant-ids.js';
import type { StoreDialect } from '../dialect.js';
import { plantVisibleSql } from '../listing-sql.js';
import type { Database } from '../schema.js';
import { AUTOMATIC_IDS_LOCK } from '../schema-names.js';
import type { CreatedPlant, PlantInfo } from '../store.js';
import { userIdByName } from './users.js';

// Plants: the one create and the one delete of every actor, and the operator's list, in the SQL both backends share.

type Db = Kysely<Database> | Transaction<Database>;

/**
 * The largest public id the catalogue has used: held by a plant, or by a deleted one (the watermark kept by
 * migration 0007's trigger). Automatic ids come after it (catalogue/plant-ids.ts, nextAutomaticId).
 */
export async function largestUsedPlantId(db: Db): Promise<number> {
  const { rows } = await sql.raw<{ largest: number | string | null }>(LARGEST_USED_PLANT_ID_SQL).execute(db);
  return Number(rows[0]?.largest ?? 0);
}

/** The same, as one statement of either database, for imports (one row, one column `largest`). */
export const LARGEST_USED_PLANT_ID_SQL =
  'SELECT max(largest) AS largest FROM (SELECT max(api_id) AS largest FROM plants UNION ALL SELECT largest_deleted FROM plant_id_watermark) used';

/** The catalogue position of the plant whose public id is `id`. */
export async function plantPosition(db: Db, id: PlantId): Promise<Position> {
  const row = await db.selectFrom('plants').select('id').where('api_id', '=', id).executeTakeFirst();
  if (!row) throw notFound(`no plant with id ${id}`);
  return position(Number(row.id));
}

interface PlantRow {
  name: string;
  tag: string | null;
  is_public: number;
  created_at: number;
}

/**
 * Inserts the plant unless its id is taken. DO NOTHING waits for a concurrent insert of the same id and then
 * skips: the retry of a create that is still committing answers like one that has, never with a unique violation.
 * The owner is an id, or a name read in the same statement (a name nobody has leaves the owner NULL, refused).
 */
function insertPlant(db: Db, id: PlantId, owner: { userId: number } | { name: string }, row: PlantRow) {
  return db
    .insertInto('plants')
    .values({
      api_id: id,
      ...row,
      owner_id: 'userId' in owner ? owner.userId : db.selectFrom('users').select('id').where('name', '=', owner.name),
    })
    .onConflict((oc) => oc.column('api_id').doNothing())
    .returning('id')
    .executeTakeFirst();
}

/**
 * Creates a plant with `actor`'s rights (catalogue/access-rule.ts). With an id, one statement; without, the next
 * automatic id is taken under the lock every automatic numbering takes (plain SQL's trigger too). When the id is
 * taken, the plant holding it is read: the same plant is a retried create (`existing`), another is a conflict.
 */
export async function createPlant(d: StoreDialect, actor: Actor, draft: PlantDraft): Promise<CreatedPlant> {
  checkPlant(draft);
  const owner = newPlantOwner(actor, draft);
  const row: PlantRow = { name: draft.name, tag: draft.tag ?? null, is_public: draft.public === true ? 1 : 0, created_at: Date.now() };
  let id = draft.id === undefined ? undefined : plantId(draft.id);
  let inserted: { id: Position } | undefined;
  try {
    inserted = await (id !== undefined
      ? d.writeStatement((db) => insertPlant(db, id!, owner, row))
      : d.writeTransaction(async (trx) => {
          await d.lock(trx, AUTOMATIC_IDS_LOCK);
          id = nextAutomaticId(await largestUsedPlantId(trx));
          return insertPlant(trx, id, owner, row);
        }));
  } catch (err) {
    // A refusal that is not the plant's: name the owner nobody has.
    if ('name' in owner) await userIdByName(d.db, owner.name);
    throw err;
  }
  if (inserted !== undefined) {
    await d.changes.catchUp();
    if (!isOperator(actor)) await d.reads.rememberWriter(actor.userId);
    return { outcome: 'created', id: id! };
  }
  // Committed, since DO NOTHING waited for it: the plant that holds the id. Only the operator sets the flag.
  const taken = await d.db
    .selectFrom('plants')
    .innerJoin('users', 'users.id', 'plants.owner_id')
    .select(['plants.owner_id', 'users.name as owner', 'plants.name', 'plants.tag', 'plants.is_public'])
    .where('plants.api_id', '=', id!)
    .executeTakeFirst();
  const same =
    taken !== undefined &&
    ('userId' in owner ? Number(taken.owner_id) === owner.userId : taken.owner === owner.name) &&
    taken.name === row.name &&
    taken.tag === row.tag &&
    (!isOperator(actor) || Number(taken.is_public) === row.is_public);
  if (same) return { outcome: 'existing', id: id! };
  throw conflict(`plant id ${id} is taken by another plant`);
}

/**
 * Deletes the plant with public id `id` when `actor` may change it. One that the actor may not change is
 * `forbidden` when the actor sees it and `hidden` otherwise, so that ids of others' private plants cannot be
 * probed; of concurrent deletes of one plant, one is `deleted` and the others find it `hidden`.
 */
export async function deletePlant(d: StoreDialect, actor: Actor, id: PlantId): Promise<'deleted' | 'hidden' | 'forbidden'> {
  const outcome = await d.writeTransaction(async (trx) => {
    const plant = await trx.selectFrom('plants').select(['id', 'owner_id']).where('api_id', '=', id).executeTakeFirst();
    if (plant === undefined) return 'hidden';
    const at = position(Number(plant.id));
    if (!isOperator(actor) && !mayChangePlant(actor, Number(plant.owner_id)))
      return (await visibleTo(trx, at, actor)) ? 'forbidden' : 'hidden';
    const { numDeletedRows } = await trx.deleteFrom('plants').where('id', '=', at).executeTakeFirst();
    return Number(numDeletedRows) > 0 ? 'deleted' : 'hidden';
  });
  if (outcome === 'deleted') {
    await d.changes.catchUp();
    if (!isOperator(actor)) await d.reads.rememberWriter(actor.userId);
  }
  return outcome;
}

/** Whether the user `viewer` sees the plant at `at` (the access rule for one plant; see listing-sql.ts). */
async function visibleTo(trx: Transaction<Database>, at: Position, viewer: Viewer): Promise<boolean> {
  const claimed =
    viewer.groups === undefined || viewer.groups.length === 0
      ? []
      : (await trx.selectFrom('groups').select('id').where('name', 'in', viewer.groups).execute()).map((g) => Number(g.id));
  const { rows } = await sql<{ visible: unknown }>`SELECT ${sql.raw(plantVisibleSql(at, viewer.userId, claimed))} AS visible`.execute(trx);
  // A boolean on PostgreSQL, 0 or 1 on SQLite.
  return rows[0]?.visible === true || rows[0]?.visible === 1;
}

export async function listPlants(d: StoreDialect, filter: { owner?: string }): Promise<PlantInfo[]> {
  let query = d.db
    .selectFrom('plants')
    .innerJoin('users', 'users.id', 'plants.owner_id')
    .select(['plants.api_id as id', 'plants.name', 'plants.tag', 'plants.is_public', 'plants.created_at', 'users.name as owner'])
    .orderBy('plants.id');
  if (filter.owner !== undefined) query = query.where('users.name', '=', filter.owner);
  const rows = await query.execute();
  return rows.map((r) => ({
    id: Number(r.id) as PlantId,
    name: r.name,
    ...(r.tag === null ? {} : { tag: r.tag }),
    owner: r.owner,
    public: Number(r.is_public) === 1,
    createdAt: new Date(Number(r.created_at)),
  }));
}
