import type { Awaitable } from '../awaitable.js';
import { granteeText } from '../catalogue/names.js';
import { fieldSelection, fieldsOfRow, type FieldColumns } from '../catalogue/plant-fields.js';
import { MAX_PLANT_ID } from '../catalogue/plant-ids.js';
import { invalidInput } from '../catalogue/errors.js';
import type { CatalogueRecord, GroupRecord, PlantRecord, UsedIdsRecord, UserRecord } from '../import-format/records.js';

/** A list of names in an export row: a JSON array on SQLite, an array on PostgreSQL. */
type NameList = string | string[];

const names = (list: NameList): string[] => (typeof list === 'string' ? (JSON.parse(list) as string[]) : list);

/**
 * The largest id a deleted plant held, when larger than every plant's: the one row of the export's `usedIds` record,
 * or none (automatic ids come after the largest id used, which the plants' ids then say).
 */
const USED_IDS_SQL =
  'SELECT largest_deleted AS largest FROM plant_id_watermark WHERE largest_deleted > coalesce((SELECT max(api_id) FROM plants), 0)';

/** The export's queries, in catalogue order: the used ids, users, groups with members, plants with grantees. */
function exportQueries(nameList: ExportSnapshot['nameList']): { usedIds: string; users: string; groups: string; plants: string } {
  return {
    usedIds: USED_IDS_SQL,
    users: 'SELECT name, is_admin FROM users ORDER BY id',
    groups:
      `SELECT g.name, ${nameList('SELECT u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE m.group_id = g.id ORDER BY u.id')} AS members ` +
      'FROM groups g ORDER BY g.id',
    plants:
      `SELECT p.api_id, ${fieldSelection('p').join(', ')}, u.name AS owner, p.is_public, ` +
      `${nameList('SELECT gu.name FROM plant_user_grants g JOIN users gu ON gu.id = g.user_id WHERE g.plant_id = p.id ORDER BY gu.id')} AS users, ` +
      `${nameList('SELECT gr.name FROM plant_group_grants g JOIN groups gr ON gr.id = g.group_id WHERE g.plant_id = p.id ORDER BY gr.id')} AS groups ` +
      'FROM plants p JOIN users u ON u.id = p.owner_id ORDER BY p.id',
  };
}

type UserRow = { name: string; is_admin: number };
type GroupRow = { name: string; members: NameList };
type PlantRow = FieldColumns & {
  api_id: number | string | null;
  owner: string;
  is_public: number;
  users: NameList;
  groups: NameList;
};

/** One consistent snapshot of a backend, read by the export flow. */
export interface ExportSnapshot {
  /** A subquery of names as one column (the databases differ only in how they aggregate it). */
  nameList(subquery: string): string;
  /** The rows of one of `exportQueries`, in order, without holding them all in memory. */
  rows<R>(sql: string): Iterable<R> | AsyncIterable<R>;
  /** Ends the snapshot (also after a failure or a consumer that stopped early). */
  close(): Awaitable<void>;
}

/** Export records in the one canonical shape both backends emit: optional fields absent, not empty. */
const exportRecord = {
  // Plain SQL can store a larger id than the API gives; past MAX_PLANT_ID no automatic id is left either way.
  usedIds: (row: { largest: number | string }): UsedIdsRecord => ({
    type: 'usedIds',
    largest: Math.min(Number(row.largest), MAX_PLANT_ID),
  }),
  user: (u: UserRow): UserRecord => (u.is_admin === 1 ? { type: 'user', name: u.name, admin: true } : { type: 'user', name: u.name }),
  group(g: GroupRow): GroupRecord {
    const members = names(g.members);
    return members.length > 0 ? { type: 'group', name: g.name, members } : { type: 'group', name: g.name };
  },
  plant(p: PlantRow): PlantRecord {
    const sharedWith = [...names(p.users), ...names(p.groups).map((group) => granteeText({ group }))];
    const id = Number(p.api_id);
    // Plain SQL can store an id the API has not (above 2^53 - 1 a number reads it rounded): written, it would be
    // another plant's id, or one an import refuses.
    if (!Number.isSafeInteger(id) || id < 1 || id > MAX_PLANT_ID)
      throw invalidInput(
        `the plant ${JSON.stringify(p.name)} of ${p.owner} has ${p.api_id === null ? 'no id' : `an id outside the ids the API gives (1 to ${MAX_PLANT_ID})`}: ` +
          'give it one with SQL ("plantstore doctor" names its row), then export again',
      );
    return {
      type: 'plant',
      id,
      ...fieldsOfRow(p),
      owner: p.owner,
      public: p.is_public === 1,
      ...(sharedWith.length > 0 ? { sharedWith } : {}),
    };
  },
};

/** How many records the export holds, counted in its snapshot. */
const RECORD_COUNT_SQL = `SELECT (SELECT count(*) FROM (${USED_IDS_SQL}) u) + (SELECT count(*) FROM users) + (SELECT count(*) FROM groups) + (SELECT count(*) FROM plants) AS n`;

/**
 * The one export flow of both backends: the used ids (when a deleted plant's is the largest), every user, then every
 * group, then every plant, from one snapshot.
 * `onTotal` hears how many records follow, counted in the snapshot: they are the records it streams, and the count
 * runs in the snapshot's transaction, which a bulk command keeps from the request timeout.
 */
export async function* exportCatalogue(
  open: () => Awaitable<ExportSnapshot>,
  onTotal?: (records: number) => void,
): AsyncGenerator<CatalogueRecord> {
  const snapshot = await open();
  const queries = exportQueries((subquery) => snapshot.nameList(subquery));
  try {
    if (onTotal) for await (const { n } of snapshot.rows<{ n: number | string }>(RECORD_COUNT_SQL)) onTotal(Number(n));
    for await (const row of snapshot.rows<{ largest: number | string }>(queries.usedIds)) yield exportRecord.usedIds(row);
    for await (const u of snapshot.rows<UserRow>(queries.users)) yield exportRecord.user(u);
    for await (const g of snapshot.rows<GroupRow>(queries.groups)) yield exportRecord.group(g);
    for await (const p of snapshot.rows<PlantRow>(queries.plants)) yield exportRecord.plant(p);
  } finally {
    await snapshot.close();
  }
}
