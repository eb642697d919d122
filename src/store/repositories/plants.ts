import { CompiledQuery, sql, type Compilable, type Kysely, type Transaction } from 'kysely';
import { conditionHolds, type VersionCondition } from '../../catalogue/version-conditions.js';
import { changeablePlants, isOperator, newPlantOwner, type Actor, type PlantDraft } from '../../catalogue/access-rule.js';
import { conflict, notFound } from '../../catalogue/errors.js';
import { checkClientChange, checkClientPlant, checkPlant } from '../../catalogue/names.js';
import {
  changedFields,
  FIELD_NAMES,
  fieldColumns,
  fieldSelection,
  fieldsOfRow,
  plantVersion,
  sameFields,
  type FieldColumns,
  type PlantChange,
  type PlantFields,
} from '../../catalogue/plant-fields.js';
import { nextAutomaticId, plantId, position, type PlantId, type Position } from '../../catalogue/plant-ids.js';
import type { Change } from '../change-log.js';
import type { OwnChanges, DatabaseSeam } from '../seam.js';
import type { Database } from '../schema.js';
import { AUTOMATIC_IDS_LOCK } from '../schema-names.js';
import type { CreatedPlant, PlantDeletion, PlantInfo, PlantRead, PlantWrite } from '../records.js';
import { withStoreErrors } from '../writes.js';
import { changeablePlant, foundPlant } from './plant-access.js';
import { Batch } from '../batch.js';
import { userIdByName, userNameById } from './users.js';

// Plants: the one create, read, change and delete of every actor, and the operator's list, in the SQL both backends share.

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

/**
 * Raises the largest id a deleted plant held to `largest` (a parameter, named as the database takes it), if lower:
 * an import's `usedIds` record, which carries that id from an export.
 */
export const raiseUsedIdsSql = (largest: string): string =>
  `UPDATE plant_id_watermark SET largest_deleted = ${largest} WHERE largest_deleted < ${largest}`;

/** The catalogue position of the plant whose public id is `id`. */
export async function plantPosition(db: Db, id: PlantId): Promise<Position> {
  const row = await db.selectFrom('plants').select('id').where('api_id', '=', id).executeTakeFirst();
  if (!row) throw notFound(`no plant with id ${id}`);
  return position(Number(row.id));
}

type PlantRow = FieldColumns & {
  is_public: number;
  created_at: number;
};

/**
 * A new plant's row, made from its fields' columns in place: spreading them into a new object with the other
 * columns takes V8's slow path (a runtime call each time), which a create pays on the request path.
 */
function newPlantRow(draft: PlantDraft): PlantRow {
  const row = fieldColumns(draft) as FieldColumns & Partial<PlantRow>;
  row.is_public = draft.public === true ? 1 : 0;
  row.created_at = Date.now();
  return row as PlantRow;
}

/** A user's create's row's columns in the order the batched insert binds them: the id, the row's, the owner. */
const ROW_COLUMNS = [...FIELD_NAMES, 'is_public', 'created_at'] as const;

/**
 * Inserts the plant unless its id is taken. DO NOTHING waits for a concurrent insert of the same id and then
 * skips: the retry of a create that is still committing answers like one that has, never with a unique violation.
 * The owner is a name read in the same statement (a name nobody has leaves the owner NULL, refused).
 */
function insertOperatorPlant(db: Db, id: PlantId, owner: string, row: PlantRow) {
  return db
    .insertInto('plants')
    .values({ api_id: id, ...row, owner_id: db.selectFrom('users').select('id').where('name', '=', owner) })
    .onConflict((oc) => oc.column('api_id').doNothing())
    .returning('id')
    .executeTakeFirst();
}

/**
 * The change-log row of a plant added or deleted, as its triggers write it (migration 0003), for its writer's own
 * caches (DatabaseSeam.writeStatement). A deleted plant's grants are logged as rows of their own (see `shared`).
 */
const plantChanged = (row: { id: Position; owner_id: number; is_public: number }): Change => ({
  table: 'plants',
  userId: Number(row.owner_id),
  groupId: null,
  plantId: Number(row.id),
  tokenId: null,
  name: null,
  isPublic: Number(row.is_public) === 1,
});

/** A row a batched create or delete returns; a delete also says whether the plant was shared (`shared`). */
type WrittenRow = { id: Position; api_id: number; owner_id: number; is_public: number; tx: string | null; shared?: boolean | number };

/** Whether a deleted plant had grants (a boolean on PostgreSQL, 0 or 1 on SQLite): see WritingStatements. */
const shared = (d: DatabaseSeam) => sql.raw<boolean | number>(d.statements.deletedPlantSharedSql).as('shared');

/**
 * The SQL text of each shape of batched statement (creates of n plants; deletes, each with or without an owner),
 * compiled by Kysely once: building and compiling a statement of many rows costs more than the rest of its batch.
 * A shape's parameters are given in the order its statement takes them.
 */
class StatementShapes {
  private readonly texts = new Map<string, string>();

  constructor(private readonly d: DatabaseSeam) {}

  async run<R>(db: Kysely<Database>, shape: string, parameters: readonly unknown[], build: () => Compilable): Promise<R[]> {
    let text = this.texts.get(shape);
    if (text === undefined) {
      const compiled = build().compile();
      // The parameters given must be the ones Kysely compiled, in its order: later batches of the shape rely on it.
      if (compiled.parameters.length !== parameters.length || compiled.parameters.some((p, i) => p !== parameters[i])) {
        throw new Error(`statement shape ${shape}: parameters out of step with the compiled statement`);
      }
      if (this.texts.size >= MAX_SHAPES) this.texts.delete(this.texts.keys().next().value!);
      this.texts.set(shape, (text = compiled.sql));
      this.d.statements.prepare(text);
    }
    return (await db.executeQuery<R>(CompiledQuery.raw(text, [...parameters]))).rows;
  }
}

/** Shapes kept: creates of 1 to 256 plants, and the delete shapes seen most recently. */
const MAX_SHAPES = 1024;

/** The column `tx` a writing statement returns: its transaction, as the change log records it. */
const transaction = (d: DatabaseSeam) => sql.raw<string | null>(d.statements.transactionIdSql).as('tx');

/** What a statement that added or deleted plants changed, from the rows it returned (see plantChanged). */
const ownChanges = (rows: readonly WrittenRow[]): OwnChanges => ({
  transaction: rows[0]?.tx,
  changes: rows.map(plantChanged),
  // A shared plant's grants go with it by the cascade, logged as rows of their own: its grantees' next request
  // here must not show it, so the write waits for the feed to read them.
  complete: !rows.some((r) => r.shared === true || r.shared === 1),
});

/** A user's create with its id, as one row of a batch (see plantWrites). */
interface UserCreate {
  id: PlantId;
  ownerId: number;
  row: PlantRow;
}

/** A delete as one row of a batch: the plant's id, and the owner it must have (none for an actor who may change any). */
interface Deletion {
  id: PlantId;
  ownedBy: number | undefined;
}

/** Writes the rows of a batch (or of one item) and says, for each, whether it was written. */
type WriteRows<I> = (items: readonly I[]) => Promise<readonly boolean[]>;

/**
 * The one create and the one delete of every actor (catalogue/access-rule.ts), for one store. Where one statement
 * of many rows is the faster way (PostgreSQL: see WritingStatements.manyRows), the creates of users (`POST
 * /plants`) and every delete asked while the last such statement is in flight are written by one statement each
 * (see batch.ts): one round trip however many clients write at once. Elsewhere each is a statement of its own, and
 * SQLite's group commit puts them in one transaction.
 */
export function plantRepository(d: DatabaseSeam) {
  const shapes = new StatementShapes(d);
  // Which rows went in: those the statement returns. The first of two creates of one id in a batch wins it.
  const insertRows: WriteRows<UserCreate> = async (items) => {
    // Bound in a loop rather than through a row object each: see newPlantRow. The shape's first compile checks the order.
    const parameters: unknown[] = [];
    for (const { id, ownerId, row } of items) {
      parameters.push(id);
      for (const column of ROW_COLUMNS) parameters.push(row[column]);
      parameters.push(ownerId);
    }
    const returned = await d.writeStatement(
      (db) =>
        shapes.run<WrittenRow>(db, `insert ${items.length}`, parameters, () =>
          db
            .insertInto('plants')
            .values(items.map(({ id, ownerId, row }) => ({ api_id: id, ...row, owner_id: ownerId })))
            .onConflict((oc) => oc.column('api_id').doNothing())
            .returning(['id', 'api_id', 'owner_id', 'is_public', transaction(d)]),
        ),
      ownChanges,
    );
    const inserted = new Set(returned.map((r) => Number(r.api_id)));
    return items.map((item) => inserted.delete(item.id));
  };
  // Which deletes happened: each plant returned goes to the first item of its id whose condition it meets.
  const deleteRows: WriteRows<Deletion> = async (items) => {
    const shape = `delete ${items.map((item) => (item.ownedBy === undefined ? 'a' : 'o')).join('')}`;
    const returned = await d.writeStatement(
      (db) =>
        shapes.run<WrittenRow>(
          db,
          shape,
          items.flatMap(({ id, ownedBy }) => (ownedBy === undefined ? [id] : [id, ownedBy])),
          () =>
            db
              .deleteFrom('plants')
              .where((eb) =>
                eb.or(
                  items.map(({ id, ownedBy }) =>
                    ownedBy === undefined ? eb('api_id', '=', id) : eb.and([eb('api_id', '=', id), eb('owner_id', '=', ownedBy)]),
                  ),
                ),
              )
              .returning(['id', 'api_id', 'owner_id', 'is_public', transaction(d), shared(d)]),
        ),
      ownChanges,
    );
    const gone = returned.map((r) => ({ id: Number(r.api_id), ownerId: Number(r.owner_id) }));
    return items.map((item) => {
      const i = gone.findIndex((g) => g.id === item.id && (item.ownedBy === undefined || item.ownedBy === g.ownerId));
      return i >= 0 && gone.splice(i, 1).length === 1;
    });
  };
  const creates = oneByOneOrBatched(d, insertRows);
  const deletes = oneByOneOrBatched(d, deleteRows);
  return {
    /**
     * Creates a plant: a user's own and private, or the operator's with the owner and flag it names. Without an id
     * it gets the next automatic one. The same plant (id, owner, name and tag) already there is `existing` (a
     * retried create); an id taken by another plant is a conflict.
     */
    create: (actor: Actor, draft: PlantDraft): Promise<CreatedPlant> => withStoreErrors(d, () => create(d, creates, actor, draft)),
    /**
     * Deletes the plant with public id `id` when `actor` may change it: 'hidden' when there is no such plant or the
     * actor may not see it, 'forbidden' when the actor sees it but may not change it.
     */
    delete: (actor: Actor, id: PlantId): Promise<'deleted' | 'hidden' | 'forbidden'> =>
      withStoreErrors(d, () => remove(d, deletes, actor, id)),
    /**
     * The same, only while the plant's version (catalogue/plant-fields.ts, plantVersion) meets `condition`
     * (If-Match, If-None-Match): in one transaction that holds the plant against every other change of it, as update does,
     * rather than in the batch of deletes, whose condition is the owner's alone.
     */
    deleteIfAt: (actor: Actor, id: PlantId, condition: VersionCondition): Promise<PlantDeletion> =>
      withStoreErrors(d, () => removeIfAt(d, actor, id, condition)),
    /** The plant with public id `id`, as `actor` sees it: 'hidden' when there is none or the actor may not see it. */
    read: (actor: Actor, id: PlantId): Promise<PlantRead> =>
      withStoreErrors(d, async () => {
        const plant = await foundPlant(d.db, actor, id);
        return plant === 'hidden' ? { outcome: 'hidden' } : { outcome: 'read', plant: { id, ...plant.fields } };
      }),
    /**
     * Changes the fields of the plant with public id `id` as `change` says (a merge patch, PlantChange) when `actor`
     * may change it (as a delete: 'hidden', 'forbidden'); with `condition`, only while its version
     * (catalogue/plant-fields.ts, plantVersion) meets it. The plant keeps its id, position, owner and grants.
     * The row logs itself with its grantees, so every cache and instance follows (store/change-log.ts), and raises
     * the plant.updated event (migration 0016).
     */
    update: (actor: Actor, id: PlantId, change: PlantChange, condition?: VersionCondition): Promise<PlantWrite> =>
      withStoreErrors(d, () => update(d, actor, id, change, condition)),
    /** Every plant, or those of one owner, with one tag or with one id, as the operator sees them (the CLI). */
    list: (filter: PlantFilter): Promise<PlantInfo[]> => listPlants(d, filter),
  };
}

export type PlantRepository = ReturnType<typeof plantRepository>;

/** A write of one item: in the next batch of its kind where the database writes many rows at once. */
function oneByOneOrBatched<I>(d: DatabaseSeam, write: WriteRows<I>): (item: I) => Promise<boolean> {
  if (!d.statements.manyRows) return async (item) => (await write([item]))[0]!;
  const batch = new Batch<I, boolean>(write);
  return (item) => batch.add(item);
}

/**
 * Creates a plant with `actor`'s rights (catalogue/access-rule.ts): a user's with its id in the batch of creates;
 * the operator's with the owner it names, or with the next automatic id, taken under the lock every automatic
 * numbering takes (plain SQL's trigger too). When the id is taken, the plant holding it is read: the same plant is
 * a retried create (`existing`), another is a conflict.
 */
async function create(
  d: DatabaseSeam,
  creates: (item: UserCreate) => Promise<boolean>,
  actor: Actor,
  draft: PlantDraft,
): Promise<CreatedPlant> {
  if (isOperator(actor)) checkPlant(draft);
  else checkClientPlant(draft);
  const owner = newPlantOwner(actor, draft);
  const row = newPlantRow(draft);
  let id = draft.id === undefined ? undefined : plantId(draft.id);
  let inserted: boolean;
  if ('userId' in owner && id !== undefined) {
    inserted = await creates({ id, ownerId: owner.userId, row });
  } else {
    const ownerName = 'name' in owner ? owner.name : await userNameById(d.db, owner.userId);
    try {
      const written = await (id !== undefined
        ? d.writeStatement((db) => insertOperatorPlant(db, id!, ownerName, row))
        : d.writeTransaction(async (trx) => {
            await d.lock(trx, AUTOMATIC_IDS_LOCK);
            id = nextAutomaticId(await largestUsedPlantId(trx));
            return insertOperatorPlant(trx, id, ownerName, row);
          }));
      inserted = written !== undefined;
    } catch (err) {
      // A refusal that is not the plant's: name the owner nobody has.
      await userIdByName(d.db, ownerName);
      throw err;
    }
  }
  if (inserted) {
    if (!isOperator(actor)) await d.reads.rememberWriter(actor.userId);
    return { outcome: 'created', id: id! };
  }
  // Committed, since DO NOTHING waited for it: the plant that holds the id. Only the operator sets the flag.
  const taken = await d.db
    .selectFrom('plants')
    .innerJoin('users', 'users.id', 'plants.owner_id')
    .select(['plants.owner_id', 'users.name as owner', 'plants.is_public', ...fieldSelection('plants')])
    .where('plants.api_id', '=', id!)
    .executeTakeFirst();
  const same =
    taken !== undefined &&
    ('userId' in owner ? Number(taken.owner_id) === owner.userId : taken.owner === owner.name) &&
    sameFields(fieldsOfRow(taken), draft) &&
    (!isOperator(actor) || Number(taken.is_public) === row.is_public);
  if (same) return { outcome: 'existing', id: id! };
  // The operator sees every plant, so learns what makes this create no repeat; a user learns only that the id is
  // taken, whoever holds it (docs/security.md).
  const unlike =
    isOperator(actor) && 'name' in owner && taken !== undefined
      ? `: ${differences({ ...fieldsOfRow(taken), owner: taken.owner, public: Number(taken.is_public) === 1 }, { ...draft, owner: owner.name }).join('; ')}`
      : '';
  throw conflict(`plant id ${id} is taken by another plant${unlike}`);
}

/** How the stored plant differs from the one asked for, each difference as "its tag is "x", not "y"". */
function differences(stored: PlantFields & { owner: string; public: boolean }, asked: PlantDraft & { owner: string }): string[] {
  const shown = (value: string | undefined) => (value === undefined ? 'none' : JSON.stringify(value));
  return [
    ...(stored.owner === asked.owner ? [] : [`its owner is ${shown(stored.owner)}, not ${shown(asked.owner)}`]),
    ...FIELD_NAMES.filter((name) => stored[name] !== asked[name]).map(
      (name) => `its ${name} is ${shown(stored[name])}, not ${shown(asked[name])}`,
    ),
    ...(stored.public === (asked.public === true) ? [] : [`it is ${stored.public ? 'public, not private' : 'private, not public'}`]),
  ];
}

/**
 * Deletes the plant with public id `id` when `actor` may change it, in the batch of deletes, whose condition is the
 * rule (catalogue/access-rule.ts, changeablePlants). When nothing was deleted, the plant as it stands says why:
 * none, or one the actor may not see, is `hidden`, so that a delete tells nothing of a plant the actor cannot see
 * (docs/security.md says what a create's 409 tells); one the actor sees but may not change is `forbidden`. Of concurrent deletes of one plant, one is `deleted`.
 */
async function remove(
  d: DatabaseSeam,
  deletes: (item: Deletion) => Promise<boolean>,
  actor: Actor,
  id: PlantId,
): Promise<'deleted' | 'hidden' | 'forbidden'> {
  const changeable = changeablePlants(actor);
  const deleted = await deletes({ id, ownedBy: 'ownedBy' in changeable ? changeable.ownedBy : undefined });
  if (deleted) {
    if (!isOperator(actor)) await d.reads.rememberWriter(actor.userId);
    return 'deleted';
  }
  // One the actor may change is not there any more: deleted meanwhile (and maybe added again since).
  return (await changeablePlant(d.db, actor, id)) === 'forbidden' ? 'forbidden' : 'hidden';
}

/** Deletes a plant while its version meets `condition`, in a transaction that holds it meanwhile. */
async function removeIfAt(d: DatabaseSeam, actor: Actor, id: PlantId, condition: VersionCondition): Promise<PlantDeletion> {
  const deleted = await d.writeTransaction(async (trx): Promise<PlantDeletion> => {
    const plant = await changeablePlant(trx, actor, id, d.statements.rowLocks.change);
    if (typeof plant === 'string') return { outcome: plant };
    if (!conditionHolds(condition, plantVersion(id, plant.fields))) return { outcome: 'stale', plant: { id, ...plant.fields } };
    await trx.deleteFrom('plants').where('id', '=', plant.at).execute();
    return { outcome: 'deleted' };
  });
  if (deleted.outcome === 'deleted' && !isOperator(actor)) await d.reads.rememberWriter(actor.userId);
  return deleted;
}

/** Changes a plant's fields in one transaction that holds the plant against every other change of it. */
async function update(d: DatabaseSeam, actor: Actor, id: PlantId, change: PlantChange, condition?: VersionCondition): Promise<PlantWrite> {
  // A user's values are checked as a create's, those alone: a field left as it is (an operator's name with a
  // control character) is no reason to refuse a change of another.
  if (!isOperator(actor)) checkClientChange(change);
  const written = await d.writeTransaction(async (trx): Promise<PlantWrite> => {
    const plant = await changeablePlant(trx, actor, id, d.statements.rowLocks.change);
    if (typeof plant === 'string') return { outcome: plant };
    const current = { id, ...plant.fields };
    if (!conditionHolds(condition, plantVersion(id, plant.fields))) return { outcome: 'stale', plant: current };
    const next = changedFields(plant.fields, change);
    if (isOperator(actor)) checkPlant(next);
    if (sameFields(next, plant.fields)) return { outcome: 'unchanged', plant: current };
    await trx.updateTable('plants').set(fieldColumns(next)).where('id', '=', plant.at).execute();
    return { outcome: 'changed', plant: { id, ...next } };
  });
  if (written.outcome === 'changed' && !isOperator(actor)) await d.reads.rememberWriter(actor.userId);
  return written;
}

/** What the operator's list narrows to; each filter given must hold (all plants with none). */
export interface PlantFilter {
  owner?: string;
  tag?: string;
  id?: PlantId;
}

/**
 * The plants a filter names, in catalogue order: an owner who does not exist is not found, as everywhere a name is
 * given; a tag or an id that no plant has is an empty list.
 */
async function listPlants(d: DatabaseSeam, filter: PlantFilter): Promise<PlantInfo[]> {
  if (filter.owner !== undefined) await userIdByName(d.db, filter.owner);
  let query = d.db
    .selectFrom('plants')
    .innerJoin('users', 'users.id', 'plants.owner_id')
    .select(['plants.api_id as id', 'plants.is_public', 'plants.created_at', 'users.name as owner', ...fieldSelection('plants')])
    .orderBy('plants.id');
  if (filter.owner !== undefined) query = query.where('users.name', '=', filter.owner);
  if (filter.tag !== undefined) query = query.where('plants.tag', '=', filter.tag);
  if (filter.id !== undefined) query = query.where('plants.api_id', '=', filter.id);
  const rows = await query.execute();
  return rows.map((r) => ({
    id: Number(r.id) as PlantId,
    ...fieldsOfRow(r),
    owner: r.owner,
    public: Number(r.is_public) === 1,
    createdAt: new Date(Number(r.created_at)),
  }));
}
