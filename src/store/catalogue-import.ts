import type { PlantFields } from '../catalogue/plant-fields.js';
import { then, type Awaitable } from '../awaitable.js';
import { conflict, DomainError, invalidInput } from '../catalogue/errors.js';
import { lookalikeName } from '../catalogue/names.js';
import { nextAutomaticId, type PlantId } from '../catalogue/plant-ids.js';
import { parseSharedWith, unknownName } from '../import-format/record-fields.js';
import { GROUP_SIZES, MEMBER_GRANTS, PLANT_API_ID_INDEX, TAG_RANGE_INDEX_NAMES } from './schema-names.js';
import type { CatalogueRecord, GroupRecord, PlantRecord } from '../import-format/records.js';
import type { NumberedRecord } from '../import-format/records.js';
import type { ImportProgress, ImportSummary } from './records.js';

type Named = 'user' | 'group';

/**
 * The ids of the users and groups an import has met: written by it (its target says so with `learn`) or found
 * stored (looked up once, through the target's `find`). They grow with users and groups, never with plants, so
 * memory stays flat on big imports.
 */
export class KnownNames {
  private readonly users = new Map<string, number>();
  private readonly groups = new Map<string, number>();

  /** `find` looks names up together: those stored, with their ids, in any order; a name not stored is left out. */
  constructor(private readonly find: (what: Named, names: readonly string[]) => Awaitable<readonly StoredName[]>) {}

  learn(what: Named, name: string, id: number): void {
    (what === 'user' ? this.users : this.groups).set(name, id);
  }

  /** The id of `name`, at once when known; a name neither written nor stored is the file's error at `line`. */
  id(what: Named, name: string, line: number): Awaitable<number> {
    const known = (what === 'user' ? this.users : this.groups).get(name);
    if (known !== undefined) return known;
    return then(this.ids(what, [name], line), ([id]) => id!);
  }

  /**
   * The ids of `names`, in order, those not met yet looked up in one go (a group of stored members is one round
   * trip, not one a member); the first neither written nor stored is the file's error at `line`.
   */
  ids(what: Named, names: readonly string[], line: number): Awaitable<readonly number[]> {
    const known = what === 'user' ? this.users : this.groups;
    const inOrder = () =>
      names.map((name) => {
        const id = known.get(name);
        if (id === undefined) throw unknownName(what, name, line);
        return id;
      });
    const unmet = [...new Set(names.filter((name) => !known.has(name)))];
    if (unmet.length === 0) return inOrder();
    return then(this.find(what, unmet), (found) => {
      for (const { name, id } of found) known.set(name, id);
      return inOrder();
    });
  }
}

/** A stored user's or group's name with its id. */
export interface StoredName {
  name: string;
  id: number;
}

/** A plant of an import with its owner and grantees as ids; each grantee once. */
export interface ImportedPlant {
  /** Its public id: the record's, or the next automatic one. */
  id: PlantId;
  /** Its fields (catalogue/plant-fields.ts), as the record gives them. */
  fields: PlantFields;
  ownerId: number;
  isPublic: boolean;
  userIds: readonly number[];
  groupIds: readonly number[];
}

/**
 * What a backend does for an import; the flow (`importCatalogue`) reads, resolves names and counts. Everything
 * happens in one transaction, in the order of the file. A method may answer at once or with a promise: a
 * backend that needs no round trip (SQLite) costs the import no promise per record.
 */
export interface ImportTarget {
  readonly names: KnownNames;
  /** Opens the transaction; resolves to the largest plant id ever used (0 for none: see largestUsedPlantId). */
  begin(): Promise<number>;
  /** Before each record: a target that writes one type's records in batches writes them when another type comes. */
  next(type: CatalogueRecord['type']): Awaitable<void>;
  user(name: string, admin: boolean | undefined): Awaitable<void>;
  group(name: string, memberIds: readonly number[]): Awaitable<void>;
  plant(plant: ImportedPlant): Awaitable<void>;
  /**
   * Writes what is left, records one broad change in the change log (not a row per record) and commits; with
   * `usedIds` (the largest of the file's usedIds records, else 0) it first raises the stored largest id a deleted
   * plant held to it, if lower, so that no automatic id is ever at or below it.
   */
  commit(usedIds: number): Promise<void>;
  /** Rolls back after `err` and gives the error to report: a batch still being written holds earlier lines. */
  rollback(err: unknown): Promise<unknown>;
}

/**
 * The indexes a bulk import (SQLite: one that writes more plants than are stored; PostgreSQL: a first load)
 * drops and builds again once, from the whole table, instead of entry by entry: each is in another order than
 * the one rows arrive in (by owner, by tag, by public id; by plant, where SQLite writes grants and member grants by
 * grantee), so every entry lands somewhere else, and sorting once costs less. The member grants are written
 * before the indexes are built again.
 */
export const BULK_IMPORT_INDEXES = [
  'plants_by_owner',
  'plants_by_tag',
  PLANT_API_ID_INDEX,
  'plant_user_grants_by_plant',
  'plant_group_grants_by_plant',
  `${MEMBER_GRANTS}_by_group`,
  ...TAG_RANGE_INDEX_NAMES,
];

/** A group keeps member grants while it has at most as many plants and members as this table's row says (migration 0014). */
const bound = (column: 'plants' | 'members') => `(SELECT ${column} FROM group_access_bounds)`;

/**
 * The rows an import added to each group it touched (grants of its plants to the group, members), counted as it
 * wrote them: the import goes without the triggers of migrations 0012 and 0014, which count them row by row.
 * Counting them here, rather than counting each group's rows again at the end, costs nothing per row, and a group
 * given 10^6 plants before the import costs no more than one given none.
 */
export class GroupGrowth {
  private readonly added = new Map<number, { plants: number; members: number }>();

  /** Records `plants` grants and `members` members added to group `id` (either may be 0: a group written, no rows). */
  add(id: number, plants: number, members: number): void {
    // PostgreSQL's bigint ids arrive as text from some statements and as numbers from others: one key for both.
    const key = Number(id);
    const grown = this.added.get(key);
    if (grown === undefined) this.added.set(key, { plants, members });
    else {
      grown.plants += plants;
      grown.members += members;
    }
  }

  /** The ids, grants and members added, as three columns. */
  columns(): [number[], number[], number[]] {
    const entries = [...this.added];
    return [entries.map(([id]) => id), entries.map(([, g]) => g.plants), entries.map(([, g]) => g.members)];
  }
}

/**
 * How a backend writes the statements of grownGroupsSql: its SQL for the set of grown groups' ids and for the
 * rows of their growth (group_id, plants, members), with the values each takes; how it inserts a row that may be
 * there already; and the row lock it first takes the groups with, if any.
 */
export interface GrowthSql {
  ids: { sql: string; values: unknown[] };
  growth: { sql: string; values: unknown[] };
  insertIgnoring: (insert: string) => string;
  /** The row lock the groups are first taken with, in id order (PostgreSQL: the triggers' FOR NO KEY UPDATE); none on SQLite. */
  lockGroups: string | undefined;
}

/**
 * What the triggers of migrations 0012 and 0014 would have left for the groups an import grew, as statements with
 * their values: their counts raised by what the import added, whether they are ranged, and member grants exactly
 * for the others. PostgreSQL first locks the groups in id order, as the triggers do, so that the counts and grants
 * of every other writer of these groups are committed and read (each statement of a READ COMMITTED transaction
 * reads anew); SQLite's import holds the write lock.
 */
export function grownGroupsSql(parts: GrowthSql): Array<{ sql: string; values: unknown[] }> {
  const { ids, growth, insertIgnoring, lockGroups } = parts;
  return [
    ...(lockGroups === undefined
      ? []
      : [{ sql: `SELECT FROM groups WHERE id IN ${ids.sql} ORDER BY id ${lockGroups}`, values: ids.values }]),
    {
      sql:
        `INSERT INTO ${GROUP_SIZES} AS s (group_id, plants, members, ranged) SELECT d.group_id, d.plants, d.members, 0 FROM ${growth.sql} ` +
        // SQLite reads `ON CONFLICT` after a SELECT as a join's: `WHERE true` ends the SELECT.
        `WHERE true ON CONFLICT (group_id) DO UPDATE SET plants = s.plants + excluded.plants, members = s.members + excluded.members`,
      values: growth.values,
    },
    {
      sql:
        `UPDATE ${GROUP_SIZES} SET ranged = CASE WHEN plants > ${bound('plants')} OR members > ${bound('members')} THEN 1 ` +
        `WHEN plants <= ${bound('plants')} / 2 AND members <= ${bound('members')} / 2 THEN 0 ELSE ranged END WHERE group_id IN ${ids.sql}`,
      values: ids.values,
    },
    {
      sql: `DELETE FROM ${MEMBER_GRANTS} WHERE group_id IN (SELECT group_id FROM ${GROUP_SIZES} WHERE group_id IN ${ids.sql} AND ranged = 1)`,
      values: ids.values,
    },
    {
      sql: insertIgnoring(
        `INSERT INTO ${MEMBER_GRANTS} (user_id, plant_id, group_id, tag) SELECT m.user_id, g.plant_id, g.group_id, g.tag ` +
          `FROM ${GROUP_SIZES} s CROSS JOIN plant_group_grants g CROSS JOIN group_members m ` +
          `WHERE s.group_id IN ${ids.sql} AND s.ranged = 0 AND g.group_id = s.group_id AND m.group_id = s.group_id`,
      ),
      values: ids.values,
    },
  ];
}

/**
 * A plant id the unique index on public ids refused, with where the backend found it, as places among the
 * import's plants (1 for its first): `place` is the plant refused; `earlier` the one that had the id first, another
 * of the import's plants, `'stored'` for a plant stored before the import, or undefined when the backend cannot
 * tell which of the import's earlier plants it was. The flow turns places into lines (PlantLines).
 */
export class TakenPlantId extends Error {
  constructor(
    readonly id: number,
    readonly place: number,
    readonly earlier: number | 'stored' | undefined,
  ) {
    super(`plant id ${id} is taken`);
  }
}

/**
 * A user the import adds whose name looks like a stored user's (see importedLookalikeSql): found at the commit, and
 * reported by importCatalogue with the line that gave the name.
 */
export class ImportedLookalike extends Error {
  constructor(
    readonly user: string,
    readonly other: string,
  ) {
    super(lookalikeName(user, other).message);
  }
}

/**
 * The first plant whose public id an earlier plant (by catalogue position) already has, and that earlier plant's
 * position: what a bulk import reports when building the unique index again fails. One sort of the table, on the
 * error's path only.
 */
export const FIRST_REPEATED_PLANT_ID_SQL = `SELECT api_id AS id, position, earlier FROM (
  SELECT api_id, id AS position, lag(id) OVER (PARTITION BY api_id ORDER BY id) AS earlier FROM plants
) repeats WHERE earlier IS NOT NULL ORDER BY position LIMIT 1`;

/**
 * The file lines of an import's plants by place, and whether each was numbered automatically, kept as runs of
 * consecutive lines alike in that: they grow with the lines between plants (users, groups, blank lines) and with
 * changes between plants with ids and without, never with plants, so memory stays flat on big imports.
 */
export class PlantLines {
  private readonly firstPlaces: number[] = [];
  private readonly firstLines: number[] = [];
  private readonly automatic: boolean[] = [];
  private places = 0;
  private lastLine = -1;

  add(line: number, automatic: boolean): void {
    this.places++;
    if (line !== this.lastLine + 1 || automatic !== this.automatic.at(-1)) {
      this.firstPlaces.push(this.places);
      this.firstLines.push(line);
      this.automatic.push(automatic);
    }
    this.lastLine = line;
  }

  /** The line of the plant at `place` (1 for the import's first plant). */
  line(place: number): number {
    const run = this.run(place);
    return this.firstLines[run]! + place - this.firstPlaces[run]!;
  }

  /** Whether the plant at `place` was given no id, and took the next automatic one. */
  numberedAutomatically(place: number): boolean {
    return this.automatic[this.run(place)]!;
  }

  private run(place: number): number {
    let low = 0;
    let high = this.firstPlaces.length - 1;
    while (low < high) {
      const middle = (low + high + 1) >> 1;
      if (this.firstPlaces[middle]! <= place) low = middle;
      else high = middle - 1;
    }
    return low;
  }
}

/** The file's error for a taken plant id, naming the lines where it was given. */
function takenIdError({ id, place, earlier }: TakenPlantId, lines: PlantLines): Error {
  const given =
    earlier === 'stored'
      ? 'is already taken by a stored plant'
      : earlier === undefined
        ? 'is already given on an earlier line'
        : lines.numberedAutomatically(earlier)
          ? `is already the automatic id of the plant without one on line ${lines.line(earlier)}`
          : `is already given on line ${lines.line(earlier)}`;
  return invalidInput(`line ${lines.line(place)}: plant id ${id} ${given}`);
}

const NONE: readonly number[] = Object.freeze([]);
const NO_NAMES: readonly string[] = Object.freeze([]);

/** The one import flow of both backends: records in file order, names resolved to ids, one transaction. */
export async function importCatalogue(
  batches: AsyncIterable<readonly NumberedRecord[]>,
  target: ImportTarget,
  progress?: ImportProgress,
): Promise<ImportSummary> {
  const summary: ImportSummary = { users: 0, groups: 0, plants: 0, grants: 0 };
  let done = 0;
  const flow: Flow = { target, summary, largestUsed: await target.begin(), usedIds: 0, lines: new PlantLines(), userLines: new Map() };
  try {
    for await (const batch of batches) {
      for (let pending = writeRecords(flow, batch, 0); pending; pending = writeRecords(flow, batch, pending.resume)) {
        await pending.wait;
      }
      done += batch.length;
      progress?.(done);
    }
    await target.commit(flow.usedIds);
  } catch (err) {
    const reported = await target.rollback(err);
    if (reported instanceof ImportedLookalike) {
      throw conflict(`line ${flow.userLines.get(reported.user)}: ${reported.message}`);
    }
    throw reported instanceof TakenPlantId ? takenIdError(reported, flow.lines) : reported;
  }
  progress?.(done);
  return summary;
}

/**
 * Writes the records of `batch` from `from` on, in a plain loop while the target answers at once (an `await`
 * in the loop would cost every record of a SQLite import a turn); at the first promise it returns that
 * promise and where to go on once it has settled.
 */
function writeRecords(flow: Flow, batch: readonly NumberedRecord[], from: number): { wait: Promise<unknown>; resume: number } | undefined {
  for (let i = from; i < batch.length; i++) {
    const { line, record } = batch[i]!;
    const ready = flow.target.next(record.type);
    if (ready instanceof Promise) return { wait: ready.then(() => writeRecord(flow, record, line)), resume: i + 1 };
    const written = writeRecord(flow, record, line);
    if (written instanceof Promise) return { wait: written, resume: i + 1 };
  }
  return undefined;
}

/** An import under way: its target, its counts, and the largest plant id used so far (stored or in the file). */
interface Flow {
  readonly target: ImportTarget;
  readonly summary: ImportSummary;
  largestUsed: number;
  /** The largest id the file's usedIds records give (0 for none), kept by the commit. */
  usedIds: number;
  /** The lines of the plants handed to the target so far, in the order it got them. */
  readonly lines: PlantLines;
  /** The first line of each user name, for an error found at the commit. */
  readonly userLines: Map<string, number>;
}

/** The id of a plant record: its own, or the next automatic one (catalogue/plant-ids.ts), counting ids given before it. */
function plantIdOf(flow: Flow, record: PlantRecord, line: number): PlantId {
  const id = record.id === undefined ? automaticId(flow.largestUsed, line) : (record.id as PlantId);
  if (id > flow.largestUsed) flow.largestUsed = id;
  return id;
}

/** The next automatic id; when none is left, that is the file's error at `line`. */
function automaticId(largestUsed: number, line: number): PlantId {
  try {
    return nextAutomaticId(largestUsed);
  } catch (err) {
    throw err instanceof DomainError ? invalidInput(`line ${line}: ${err.message}`) : err;
  }
}

function writeRecord(flow: Flow, record: CatalogueRecord, line: number): Awaitable<void> {
  const { target, summary } = flow;
  switch (record.type) {
    case 'user': {
      summary.users++;
      if (!flow.userLines.has(record.name)) flow.userLines.set(record.name, line);
      return target.user(record.name, record.admin);
    }
    case 'group': {
      summary.groups++;
      const ids = memberIds(target.names, record, line);
      return ids instanceof Promise ? ids.then((resolved) => target.group(record.name, resolved)) : target.group(record.name, ids);
    }
    case 'plant': {
      summary.plants++;
      const plant = importedPlant(target.names, record, plantIdOf(flow, record, line), line);
      const write = (resolved: ImportedPlant) => {
        flow.lines.add(line, record.id === undefined);
        // The grants written: a grantee named twice (as "bob" and "user:bob") is granted once.
        summary.grants += resolved.userIds.length + resolved.groupIds.length;
        return target.plant(resolved);
      };
      return plant instanceof Promise ? plant.then(write) : write(plant);
    }
    case 'usedIds': {
      flow.usedIds = Math.max(flow.usedIds, record.largest);
      flow.largestUsed = Math.max(flow.largestUsed, record.largest);
      return undefined;
    }
  }
}

type NameRef = { kind: Named; name: string };
const NO_REFS: readonly NameRef[] = Object.freeze([]);

/**
 * The ids of `refs`, in order: at once while every name is known; from the first lookup on, one lookup at a
 * time in file order, so that the first unknown name is the one reported.
 */
function resolveAll(names: KnownNames, refs: readonly NameRef[], line: number): Awaitable<number[]> {
  const ids = new Array<number>(refs.length);
  for (let i = 0; i < refs.length; i++) {
    const id = names.id(refs[i]!.kind, refs[i]!.name, line);
    if (id instanceof Promise) {
      return (async () => {
        ids[i] = await id;
        for (let j = i + 1; j < refs.length; j++) ids[j] = await names.id(refs[j]!.kind, refs[j]!.name, line);
        return ids;
      })();
    }
    ids[i] = id;
  }
  return ids;
}

function memberIds(names: KnownNames, record: GroupRecord, line: number): Awaitable<readonly number[]> {
  const members = record.members ?? NO_NAMES;
  return members.length === 0 ? NONE : names.ids('user', members, line);
}

/** Each id of `ids` whose grantee is of `kind`, once. */
function idsOf(kind: Named, grantees: readonly NameRef[], ids: readonly number[]): readonly number[] {
  const chosen: number[] = [];
  for (let i = 0; i < ids.length; i++) if (grantees[i]!.kind === kind && !chosen.includes(ids[i]!)) chosen.push(ids[i]!);
  return chosen.length > 0 ? chosen : NONE;
}

function importedPlant(names: KnownNames, record: PlantRecord, id: PlantId, line: number): Awaitable<ImportedPlant> {
  const owner = names.id('user', record.owner, line);
  const shared = record.sharedWith;
  // Most plants: a known owner and nobody to share with (no closure, one object).
  if (shared === undefined || shared.length === 0) {
    return owner instanceof Promise ? owner.then((ownerId) => newPlant(record, id, ownerId)) : newPlant(record, id, owner);
  }
  const grantees = shared.map(parseSharedWith);
  // The owner first, then the grantees in the order given.
  if (owner instanceof Promise) {
    return owner.then(async (ownerId) => newPlant(record, id, ownerId, grantees, await resolveAll(names, grantees, line)));
  }
  const ids = resolveAll(names, grantees, line);
  return ids instanceof Promise
    ? ids.then((resolved) => newPlant(record, id, owner, grantees, resolved))
    : newPlant(record, id, owner, grantees, ids);
}

function newPlant(
  record: PlantRecord,
  id: PlantId,
  ownerId: number,
  grantees: readonly NameRef[] = NO_REFS,
  ids: readonly number[] = NONE,
): ImportedPlant {
  return {
    id,
    fields: record,
    ownerId,
    isPublic: record.public === true,
    userIds: ids.length === 0 ? NONE : idsOf('user', grantees, ids),
    groupIds: ids.length === 0 ? NONE : idsOf('group', grantees, ids),
  };
}
