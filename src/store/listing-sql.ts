import { ACCESS_PATH_LIST, type AccessPath } from '../catalogue/access-rule.js';
import type { Position } from '../catalogue/plant-ids.js';
import { GROUP_SIZES, MEMBER_GRANTS } from './schema-names.js';
import type { FirstRead, PlantRow, ScannedRows, VisiblePage } from './records.js';

/**
 * How many of the viewer's positions a filtered page's first read takes (RequestReads.firstFilteredPage): without a
 * tag every position read is the page's, so the first `wanted` are enough; with one, `first.positions`, or `wanted`
 * when more.
 */
export const firstReadPositions = (first: FirstRead, wanted: number, tagged: boolean): number =>
  tagged ? Math.max(first.positions, wanted) : wanted;

/**
 * Whether a first read of `positions` of the viewer's positions found the page: it filled it, or it came out short
 * because those positions (`positionsRead` of them) were all the viewer sees from there on.
 */
export const firstReadIsPage = (found: VisiblePage, positionsRead: number, positions: number): boolean =>
  found.more || positionsRead < positions;

/**
 * The access rule (catalogue/access-rule.ts) as SQL for both backends: one page of what a user may see, in one
 * statement, and whether a user sees one plant (the delete check).
 *
 * Each path of the rule is an index range read in catalogue order from `after`, once for the viewer: the group
 * path through the viewer's small groups too, as the member grants (one range per user, kept by the triggers of
 * migrations 0012 and 0014), so a user in many small groups reads no more than one in a few. The groups read
 * once per group are the viewer's ranged groups (too large for member grants: at most one grant row a member
 * joins or a plant is shared, see migration 0014) and those a JWT's groups claim names, which are no stored
 * memberships. The union of the ranges is cut at `limit`, and only then joined to `plants`: a page costs about
 * (paths + ranged and claimed groups) x `limit` index entries whatever the size of the catalogue and however many
 * small groups the viewer is in.
 *
 * The SQL that differs between the databases (a page's JSON columns, parameters, how ranges merge) is in
 * sqlite/sqlite-listing-sql.ts and postgres/postgres-listing-sql.ts, built from the parts here.
 */

/**
 * How a database's listing statement names its parameters: the viewer's user id, the position the page starts
 * after, and the SQL of the group names a JWT claims.
 */
export interface ListingParams {
  user: string;
  after: string;
  claims: string;
}

/**
 * Where each plant of a page's JSON starts after the first, with ids or without: a `{"id":` or `{"name":` cannot
 * occur inside a JSON string, whose quotes are escaped.
 */
const nextPlant = (withIds: boolean): string => (withIds ? ',{"id":' : ',{"name":');

/**
 * Whether a page's JSON met a position of no plant: a grant whose plant is gone (plain SQL without foreign keys
 * leaves them), joined to nothing, so that its `name` is null, which no plant's is. Such a page is read again with
 * `exact` (see the visible-plants statements), since those positions took the places of plants that follow.
 */
export const metGonePlant = (plants: string): boolean => plants.includes('{"name":null');

/**
 * A page's rows (id, name, tag) in id order from `page`, the positions of a union of ranges: joined so that a
 * position of no plant stays a row, with a null name (see metGonePlant).
 */
export const pageRows = (page: string): string =>
  `SELECT page.id AS id, p.name AS name, p.tag AS tag FROM ${page} LEFT JOIN plants p ON p.id = page.id`;

/**
 * The JSON array of the plants in `plants` without its last. Each database's listing SQL builds a plant as the
 * contract's Plant object, compact and `name` first: `{"name":…}`, with `"tag":…` only when the plant has one; or
 * with `withIds` as a NewPlant, `{"id":…,"name":…}`.
 */
function dropLastPlant(plants: string, withIds: boolean): string {
  const last = plants.lastIndexOf(nextPlant(withIds));
  return last === -1 ? '[]' : `${plants.slice(0, last)}]`;
}

/**
 * A page of at most `limit` plants from the page columns of a query that read up to `limit + 1`: the extra
 * row, when there is one, says that more follow and is left out. Undefined when the ids are not in ascending
 * order (SQLite aggregated them out of order: read again with `ordered`).
 */
export function pageFromColumns(
  ids: string,
  plants: string,
  limit: number,
  groupIds: readonly number[],
  cacheable: boolean,
  withIds = false,
): VisiblePage | undefined {
  // Read from the database's own JSON: catalogue positions.
  const positions = JSON.parse(ids) as Position[];
  for (let i = 1; i < positions.length; i++) if (positions[i]! <= positions[i - 1]!) return undefined;
  const more = positions.length > limit;
  const next = more ? positions[limit] : undefined;
  if (more) positions.length = limit;
  return { json: more ? dropLastPlant(plants, withIds) : plants, ids: positions, more, next, groupIds, cacheable };
}

/** The ids of the user's groups: stored memberships, and with `withClaims` the stored groups the claim names. */
export function viewerGroups(params: ListingParams, withClaims: boolean): string {
  return memberGroups(params.user, withClaims ? claimedGroups(params.claims) : undefined);
}

/**
 * The groups whose grants a page reads range by range: the viewer's ranged groups (those too large for member
 * grants, see migration 0014), and with `withClaims` the stored groups a JWT's claim names.
 */
export function rangedGroups(params: ListingParams, withClaims: boolean): string {
  const ranged =
    `SELECT m.group_id AS id FROM group_members m JOIN ${GROUP_SIZES} s ON s.group_id = m.group_id ` +
    `WHERE m.user_id = ${params.user} AND s.ranged = 1`;
  return withClaims ? `${ranged} UNION ${claimedGroups(params.claims)}` : ranged;
}

/**
 * Whether user `user` is a member of a small group (a condition): one whose grants are the user's member grants,
 * which a viewer in none has none of. A group without a size yet counts as small.
 */
export const smallGroupsSql = (user: string): string =>
  `EXISTS (SELECT 1 FROM group_members m WHERE m.user_id = ${user} AND NOT EXISTS ` +
  `(SELECT 1 FROM ${GROUP_SIZES} s WHERE s.group_id = m.group_id AND s.ranged = 1))`;

function memberGroups(user: string, claimed: string | undefined): string {
  return `SELECT group_id AS id FROM group_members WHERE user_id = ${user}${claimed === undefined ? '' : ` UNION ${claimed}`}`;
}

/**
 * A path's range for one viewer: its table where its key matches, read by its position column. `distinct` when
 * the range may hold a position more than once (a plant shared with two of the viewer's groups).
 */
export interface Range {
  column: AccessPath['position'];
  from: string;
  distinct?: boolean;
}

/**
 * With `exact`, a range of a table other than plants skips the positions whose plant is gone (a probe of plants
 * each): for the rare page whose first reading met one (metGonePlant).
 */
export function existing(table: string, column: string, exact: boolean): string {
  return exact && table !== 'plants' ? ` AND EXISTS (SELECT 1 FROM plants e WHERE e.id = ${table}.${column})` : '';
}

/**
 * The ranges for the viewer whose id is the SQL expression `user`: one per path, the group path through the
 * viewer's small groups included, read from the member grants the triggers keep (one range per user, however
 * many groups). Ranged groups and those a JWT claims are read once per group (GROUP_PATHS).
 */
export function viewerRanges(user: string, exact = false): Range[] {
  const ranges: Range[] = [];
  for (const path of ACCESS_PATH_LIST) {
    const from = (table: string, where: string) => `${table} WHERE ${where}${existing(table, path.position, exact)}`;
    switch (path.by) {
      case 'public':
        ranges.push({ column: path.position, from: from(path.table, `${path.key} = 1`) });
        break;
      case 'user':
        ranges.push({ column: path.position, from: from(path.table, `${path.key} = ${user}`) });
        break;
      case 'group':
        ranges.push({ column: path.position, from: from(MEMBER_GRANTS, `user_id = ${user}`), distinct: true });
        break;
      default:
        path.by satisfies never;
    }
  }
  return ranges;
}

/** The paths read once per group a JWT claims. */
export const GROUP_PATHS = ACCESS_PATH_LIST.filter((path) => path.by === 'group');

/** The ids of the stored groups a JWT's claim names (`claims`: the SQL of the names). */
const claimedGroups = (claims: string): string => `SELECT id FROM groups WHERE name IN ${claims}`;

/**
 * Whether user `user` may see the plant at catalogue position `plant` (the rule above, for one plant), as a
 * condition both databases evaluate; `claimedGroupIds` are the stored groups a JWT's groups claim names. Every
 * value is an id the store read itself, never client text, so they are written as literals.
 */
export function plantVisibleSql(plant: Position, user: number, claimedGroupIds: readonly number[]): string {
  for (const id of [plant, user, ...claimedGroupIds]) if (!Number.isSafeInteger(id)) throw new Error(`not an id: ${id}`);
  const claimed = claimedGroupIds.length === 0 ? undefined : `SELECT id FROM groups WHERE id IN (${claimedGroupIds.join(', ')})`;
  return visibleSql(String(plant), String(user), claimed);
}

/**
 * The rule for one plant as a condition: `plant` and `user` are SQL expressions of the plant's position and the
 * viewer's id (a column of an outer query, a parameter), `claimed` the SQL of the ids of the groups a JWT claims.
 * Each path is one index probe, whatever the size of the catalogue.
 */
function visibleSql(plant: string, user: string, claimed: string | undefined): string {
  const branches = viewerRanges(user).map(({ column, from }) => `EXISTS (SELECT 1 FROM ${from} AND ${column} = ${plant})`);
  for (const { table, position: column, key } of GROUP_PATHS) {
    branches.push(`EXISTS (SELECT 1 FROM ${table} WHERE ${column} = ${plant} AND ${key} IN (${memberGroups(user, claimed)}))`);
  }
  return branches.join(' OR ');
}

/**
 * Whether the viewer whose id is `user` sees the plant in row `row` of a query of `plants` (which has the plant's own
 * columns: its flag and owner need no probe), with the groups read range by range given as the SQL of their ids
 * (`ranged`: the viewer's ranged groups and those a JWT claims; none when undefined). One index probe for each
 * path through another table.
 */
function rowVisibleSql(row: string, user: string, groups: ProbedGroups): string {
  const branches: string[] = [];
  // The OFFSET keeps each probe a probe: PostgreSQL would otherwise read all of the viewer's rows of a table into a
  // hash table (a "hashed SubPlan") whenever its generic plan guesses that cheaper (an EXISTS with an OFFSET is never
  // turned into one). SQLite takes an OFFSET only after a LIMIT.
  const probe = (table: string, where: string) =>
    `EXISTS (SELECT 1 FROM ${table} x WHERE ${where} AND x.plant_id = ${row}.id LIMIT 1 OFFSET 0)`;
  for (const path of ACCESS_PATH_LIST) {
    switch (path.by) {
      case 'public':
        branches.push(path.table === 'plants' ? `${row}.${path.key} = 1` : probe(path.table, `x.${path.key} = 1`));
        break;
      case 'user':
        branches.push(path.table === 'plants' ? `${row}.${path.key} = ${user}` : probe(path.table, `x.${path.key} = ${user}`));
        break;
      case 'group':
        if (groups.small === true) branches.push(probe(MEMBER_GRANTS, `x.user_id = ${user}`));
        // Told by the statement: the condition first, so that a viewer in no small group skips the probe.
        else if (groups.small !== false) branches.push(`(${groups.small} AND ${probe(MEMBER_GRANTS, `x.user_id = ${user}`)})`);
        // By the plant's few group grants, each group then looked up in the list (`+` keeps the group's column out
        // of the index search): one probe however many groups are read range by range.
        if (groups.ranged !== undefined) {
          const byPlant = probe(path.table, `+x.${path.key} IN (${groups.ranged})`);
          if (!groups.rangedArray) {
            branches.push(byPlant);
          } else {
            // The array is read once a statement. A few groups are probed by the grants' key, each an index entry;
            // a plant's grants by the index of the plant alone each cost a read of the row (PostgreSQL's).
            const ids = `ARRAY(${groups.ranged})`;
            const byKey = probe(path.table, `x.${path.key} = ANY (${ids})`);
            branches.push(
              `CASE WHEN cardinality(${ids}) = 0 THEN false WHEN cardinality(${ids}) <= ${FEW_PROBED_GROUPS} THEN ${byKey} ELSE ${byPlant} END`,
            );
          }
        }
        break;
      default:
        path.by satisfies never;
    }
  }
  return branches.join(' OR ');
}

/**
 * The groups a probe of one plant counts: whether the viewer may be in small groups (their grants are the viewer's
 * member grants: none without one), or the SQL of that condition where the statement tells it (smallGroupsSql); and
 * the SQL of the ids of the groups read range by range (ranged or claimed).
 */
export interface ProbedGroups {
  small: boolean | string;
  ranged: string | undefined;
  /** Whether the database probes a few such groups one by one (PostgreSQL; see rowVisibleSql). */
  rangedArray?: boolean;
}

/** How many groups read range by range a probe of one plant looks up one by one, at most (see rowVisibleSql). */
const FEW_PROBED_GROUPS = 8;

/**
 * How a filtered page's reads answer (store/listing.ts): the rows that match, (id, api_id, name, tag), and one row
 * more, whose name is null, with the last position read (`id`) and how many were read (`api_id`), so that the next
 * read starts there and the search knows when it has read everything. `read` is the SQL of the rows read, `c`, in
 * catalogue order; `matches` the SQL of the rows that match, from `c`.
 */
const scanned = (read: string, matches: string): string =>
  `WITH c AS MATERIALIZED (${read}) ${matches} UNION ALL SELECT max(id), count(*), NULL, NULL FROM c`;

/**
 * Up to `limit` plants with tag `tag` after position `after`, read by the index of plants by tag, and of them those
 * the viewer sees (see scanned): one way of a tag's page that its first read did not find (store/listing.ts),
 * cheap when the viewer sees most of the tag's plants. Ordered by tag and id, the one order only that index gives,
 * so that a plan made for any tag reads it.
 */
export function taggedRowsSql(params: { user: string; after: string; limit: string; tag: string }, groups: ProbedGroups): string {
  // Only the index's own columns: a plant's row is read for those the viewer sees alone.
  const read = `SELECT id, tag, is_public, owner_id FROM plants WHERE tag = ${params.tag} AND id > ${params.after} ORDER BY tag, id LIMIT ${params.limit}`;
  return scanned(
    read,
    `SELECT c.id, p.api_id, p.name, p.tag FROM c JOIN plants p ON p.id = c.id WHERE ${rowVisibleSql('c', params.user, groups)}`,
  );
}

/**
 * The first `wanted` plants with tag `tag` after position `after` that the viewer sees, rows (id, api_id, name,
 * tag): a rare tag's page, read in one pass of the index of plants by tag, a plant's row read for those the viewer
 * sees alone. SQLite defers reading a row until a column outside the index is wanted; PostgreSQL reads it with
 * each index entry, so with `fenced`, the tag's count being below that, the entries are read first (their LIMIT
 * keeps that read whole and tells the planner how few they are), and only the plants that pass joined.
 */
export function rareTagRowsSql(
  params: { user: string; after: string; tag: string; wanted: string },
  groups: ProbedGroups,
  { fenced }: { fenced?: string } = {},
): string {
  const { user, after, tag, wanted } = params;
  const visible = rowVisibleSql('c', user, groups);
  if (fenced === undefined) {
    return (
      `SELECT c.id AS id, c.api_id AS api_id, c.name AS name, c.tag AS tag FROM plants c WHERE c.tag = ${tag} ` +
      `AND c.id > ${after} AND (${visible}) ORDER BY c.tag, c.id LIMIT ${wanted}`
    );
  }
  const entries = `SELECT id, is_public, owner_id FROM plants WHERE tag = ${tag} AND id > ${after} ORDER BY tag, id LIMIT ${fenced}`;
  return (
    `SELECT c.id AS id, p.api_id AS api_id, p.name AS name, p.tag AS tag FROM (${entries}) c JOIN plants p ON p.id = c.id ` +
    `WHERE ${visible} ORDER BY c.id LIMIT ${wanted}`
  );
}

/**
 * The first `wanted` of the viewer's positions `positions` (SQL of one column in catalogue order) whose plant has
 * tag `tag` (every one without), rows (id, api_id, name, tag): read lazily, each plant's row joined as its position
 * comes, so that a tag common among what the viewer sees stops after about `wanted` / its share of them. `join` is
 * the database's join that keeps the positions the outer side (SQLite's `CROSS JOIN`). A position whose plant is
 * gone matches nothing. The ORDER BY costs neither database a sort when the join keeps the positions' order, and
 * keeps the LIMIT to the first plants when PostgreSQL's planner hashes the positions instead, which yields plants in
 * the order of their rows on disk.
 */
export const firstVisibleRowsSql = (positions: string, tag: string | undefined, wanted: string, join: string): string =>
  `SELECT page.id AS id, p.api_id AS api_id, p.name AS name, p.tag AS tag FROM (${positions}) page ${join} plants p ` +
  `ON p.id = page.id${tag === undefined ? '' : ` WHERE p.tag = ${tag}`} ORDER BY page.id LIMIT ${wanted}`;

/**
 * Whether at least `rareBelow` plants have tag `tag` after `after` (a condition), read from the index of plants by
 * tag alone: a rare tag's page is read by that index (rareTagRowsSql), another's from what the viewer sees.
 */
export const commonTagSql = (params: { tag: string; after: string; rareBelow: string }): string =>
  `EXISTS (SELECT 1 FROM plants WHERE tag = ${params.tag} AND id > ${params.after} ORDER BY tag, id LIMIT 1 OFFSET ${params.rareBelow} - 1)`;

/**
 * The positions a viewer sees (`positions`, SQL of one column in catalogue order), each with its plant, and of them
 * those with tag `tag` when given (see scanned). A position whose plant is gone matches nothing.
 */
export const visibleRowsSql = (positions: string, tag: string | undefined): string =>
  scanned(
    `SELECT page.id AS id, p.api_id AS api_id, p.name AS name, p.tag AS tag FROM (${positions}) page LEFT JOIN plants p ON p.id = page.id`,
    `SELECT id, api_id, name, tag FROM c WHERE name IS NOT NULL${tag === undefined ? '' : ` AND tag = ${tag}`}`,
  );

/**
 * Up to `limit` plants after `after` in catalogue order, with `tag` when given: rows (id, api_id, name, tag) of what
 * an admin sees; a tag's read by its index (see taggedRowsSql).
 */
export const allRowsSql = (params: { after: string; limit: string; tag?: string }): string =>
  params.tag === undefined
    ? `SELECT id, api_id, name, tag FROM plants WHERE id > ${params.after} ORDER BY id LIMIT ${params.limit}`
    : `SELECT id, api_id, name, tag FROM plants WHERE tag = ${params.tag} AND id > ${params.after} ORDER BY tag, id LIMIT ${params.limit}`;

/** A row of the statements of `scanned`, as either database answers it: position, api_id, name, tag. */
export type ScannedColumns = [position: number | string | null, id: number | string | null, name: string | null, tag: string | null];

/** What the rows of `scanned` say: the matches in catalogue order, and the row with no name, how far the read went. */
export function scannedRows(rows: readonly ScannedColumns[]): ScannedRows {
  const matches: PlantRow[] = [];
  let last: Position | undefined;
  let read = 0;
  for (const [position, id, name, tag] of rows) {
    if (name === null) {
      read = Number(id ?? 0);
      last = position === null ? undefined : (Number(position) as Position);
    } else {
      matches.push({ position: Number(position) as Position, id: Number(id), name, tag });
    }
  }
  // Neither database promises that a join keeps the order of the positions it reads.
  matches.sort((a, b) => a.position - b.position);
  return { matches, last, read };
}
