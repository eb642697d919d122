import { ACCESS_PATH_LIST, type AccessPath } from '../catalogue/access-rule.js';
import type { Position } from '../catalogue/plant-ids.js';
import { GROUP_SIZES, MEMBER_GRANTS } from './schema-names.js';
import type { PlantRow, VisiblePage } from './records.js';

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
 * leaves them), joined to nothing, so that its `name` is null, which no plant's is (with ids or without: a
 * `"name":` with its quotes cannot occur inside a JSON string). Such a page is read again with `exact` (see the
 * visible-plants statements), since those positions took the places of plants that follow.
 */
export const metGonePlant = (plants: string): boolean => plants.includes('"name":null');

/**
 * A page's rows (id, name, tag; with `withIds` api_id too) in id order from `page`, the positions of a union of
 * ranges: joined so that a position of no plant stays a row, with a null name (see metGonePlant).
 */
export const pageRows = (page: string, withIds = false): string =>
  `SELECT page.id AS id, ${withIds ? 'p.api_id AS api_id, ' : ''}p.name AS name, p.tag AS tag FROM ${page} LEFT JOIN plants p ON p.id = page.id`;

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
 * many groups). Ranged groups and those a JWT claims are read once per group (GROUP_PATHS). With `tag` (SQL of
 * a tag), each range holds only the plants with that tag: every table of a path keeps its plant's tag, indexed by
 * (key, tag, position) (migration 0018), so a page of one tag reads as far into each range as an untagged page.
 */
export function viewerRanges(user: string, exact = false, tag?: string): Range[] {
  const ranges: Range[] = [];
  for (const path of ACCESS_PATH_LIST) {
    const from = (table: string, where: string) => `${table} WHERE ${where}${tagCondition(tag)}${existing(table, path.position, exact)}`;
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

/** A range's condition on its rows' tag (see viewerRanges): none without one. */
export const tagCondition = (tag: string | undefined, alias?: string): string =>
  tag === undefined ? '' : ` AND ${alias === undefined ? '' : `${alias}.`}tag = ${tag}`;

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
 * Up to `limit` plants after `after` in catalogue order, with `tag` when given: rows (id, api_id, name, tag) of what
 * an admin sees; a tag's read by the index of plants by tag.
 */
export const allRowsSql = (params: { after: string; limit: string; tag?: string }): string =>
  params.tag === undefined
    ? `SELECT id, api_id, name, tag FROM plants WHERE id > ${params.after} ORDER BY id LIMIT ${params.limit}`
    : `SELECT id, api_id, name, tag FROM plants WHERE tag = ${params.tag} AND id > ${params.after} ORDER BY tag, id LIMIT ${params.limit}`;

/** A row of allRowsSql, as either database answers it: position, api_id, name, tag. */
export type RowColumns = [position: number | string, id: number | string, name: string, tag: string | null];

/** The plants of allRowsSql's rows. */
export const plantRows = (rows: readonly RowColumns[]): PlantRow[] =>
  rows.map(([position, id, name, tag]) => ({ position: Number(position) as Position, id: Number(id), name, tag }));
