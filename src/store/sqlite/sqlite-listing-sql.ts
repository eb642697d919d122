import {
  existing,
  GROUP_PATHS,
  pageRows,
  rangedGroups,
  tagCondition,
  viewerGroups,
  viewerRanges,
  type ListingParams,
} from '../listing-sql.js';

/**
 * SQLite's listing statements, built from the access rule's parts (listing-sql.ts). SQLite merges branches that
 * are plain index ranges lazily (its UNION of ordered ranges under `ORDER BY 1 LIMIT n` reads only what the page
 * needs), so each ranged or claimed group is a branch of its own, its id a parameter, read beforehand in the same
 * snapshot (`viewerGroupsSql`). Past SQLITE_GROUP_BRANCHES such groups, one branch joins them all, each group's
 * range bounded by its `limit`-th grant (a correlated `OFFSET limit - 1` lookup, since SQLite has no LATERAL). The
 * limit is a literal, so statements are prepared per limit: SQLite plans a bound `LIMIT ?` less well.
 */

const PARAMS: ListingParams = { user: ':user', after: ':after', claims: '(SELECT value FROM json_each(:claims))' };

/** A listed plant as the response body shows it (the contract's Plant object), built by SQLite's JSON functions. */
const PLANT_JSON = `CASE WHEN tag IS NULL THEN json_object('name', name) ELSE json_object('name', name, 'tag', tag) END`;
/** A listed plant with its id (a NewPlant), from rows that have `api_id` too. */
const PLANT_WITH_ID_JSON = `CASE WHEN tag IS NULL THEN json_object('id', api_id, 'name', name) ELSE json_object('id', api_id, 'name', name, 'tag', tag) END`;

/**
 * A page's columns, `ids` and `plants` (JSON arrays of the catalogue positions and of the Plant objects, in id
 * order), from `sql`, a query of rows (id, name, tag) in id order. SQLite does not promise to aggregate rows in
 * the order they come, so with `ordered` the aggregates sort them themselves (dearer; see SqliteReadsAndChanges).
 */
export function pageColumnsSql(sql: string, { ordered = false, withIds = false } = {}): string {
  const order = ordered ? ' ORDER BY id' : '';
  return `SELECT json_group_array(id${order}) AS ids, json_group_array(${withIds ? PLANT_WITH_ID_JSON : PLANT_JSON}${order}) AS plants FROM (${sql})`;
}

/** Claimed groups that SQLite reads as branches of their own; more go through one joined branch. */
export const SQLITE_GROUP_BRANCHES = 16;

/** The SQLite parameter holding the id of the i-th group a JWT claims. */
export const groupParam = (i: number): string => `g${i}`;

/**
 * One page of the plants user `:user` may see after `:after`, at most `limit`, with `tagged` only those with tag
 * `:tag`: rows (id, name, tag; with `withIds` api_id too) in id order. The groups read range by range (the viewer's
 * ranged groups and those a JWT claims, read beforehand by `viewerGroupsSql`) come with `groups` a number as
 * `:g0`… (see `groupParam`); with `joined` they are joined in the statement from `:ranged`, their ids as a JSON
 * array. With `exact`, ranges skip positions of plants that are gone (see metGonePlant).
 */
export function visiblePlantsSql(
  limit: number,
  groups: number | 'joined',
  { exact = false, tagged = false, withIds = false } = {},
): string {
  // Joined rather than `WHERE id IN (…)`, which builds a temporary index of the page's ids first.
  return pageRows(`(${visiblePositionsSql(limit, groups, exact, tagged)}) page`, withIds);
}

/** The positions of that page, one column in catalogue order (see visiblePlantsSql). */
export function visiblePositionsSql(limit: number, groups: number | 'joined', exact = false, tagged = false): string {
  const p = PARAMS;
  const tag = tagged ? ':tag' : undefined;
  // A UNION of ordered ranges drops repeated positions as it merges them: no range needs DISTINCT of its own.
  const branches = viewerRanges(p.user, exact, tag).map(({ column, from }) => `SELECT ${column} FROM ${from} AND ${column} > ${p.after}`);
  for (const { table, position: column, key } of GROUP_PATHS) {
    if (groups === 'joined') {
      branches.push(
        `SELECT * FROM (SELECT gg.${column} FROM (SELECT value AS id FROM json_each(:ranged)) g JOIN ${table} gg ` +
          `ON gg.${key} = g.id${tagCondition(tag, 'gg')} AND gg.${column} > ${p.after}${existing('gg', column, exact)} AND gg.${column} <= coalesce((SELECT x.${column} FROM ${table} x ` +
          `WHERE x.${key} = g.id${tagCondition(tag, 'x')} AND x.${column} > ${p.after}${existing('x', column, exact)} ORDER BY x.${column} LIMIT 1 OFFSET ${limit - 1}), 9223372036854775807))`,
      );
    } else {
      for (let i = 0; i < groups; i++)
        branches.push(
          `SELECT ${column} FROM ${table} WHERE ${key} = :${groupParam(i)}${tagCondition(tag)} AND ${column} > ${p.after}${existing(table, column, exact)}`,
        );
    }
  }
  return `${branches.join(' UNION ')} ORDER BY 1 LIMIT ${limit}`;
}

/**
 * For `:user` (and `:claims`), read in the page's snapshot, one row of two JSON arrays: the ids of the groups a
 * page counts, and of those it reads range by range (ranged or claimed, see `rangedGroups`). One value each for a
 * user in hundreds of groups, where a row each would cost more than the page.
 */
export function viewerGroupsSql(withClaims: boolean): string {
  const byRange = (ids: string) => `(SELECT json_group_array(id) FROM (${ids}))`;
  return `SELECT (SELECT json_group_array(id) FROM (${viewerGroups(PARAMS, withClaims)})), ${byRange(rangedGroups(PARAMS, withClaims))}`;
}

/** One page of every plant (what an admin sees): rows (id, name, tag) in id order after `:after`, at most `limit`. */
export const allPlantsSql = (limit: number): string => `SELECT id, name, tag FROM plants WHERE id > :after ORDER BY id LIMIT ${limit}`;
