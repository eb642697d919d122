import { ACCESS_PATH_LIST, type AccessPath } from '../catalogue/access-rule.js';
import type { Position } from '../catalogue/plant-ids.js';
import type { Backend } from './schema.js';
import { GROUP_SIZES, MEMBER_GRANTS } from './schema-names.js';
import type { VisiblePage } from './records.js';

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
 * The dialects differ only where the engines do:
 * - PostgreSQL cuts each branch at `limit` and reads each ranged or claimed group's grants with a LATERAL join,
 *   in one prepared statement with the limit as a parameter.
 * - SQLite merges branches that are plain index ranges lazily (its UNION of ordered ranges under `ORDER BY 1
 *   LIMIT n` reads only what the page needs), so each ranged or claimed group is a branch of its own, its id a
 *   parameter, read beforehand in the same snapshot (`viewerGroupsSql`). Past SQLITE_GROUP_BRANCHES such groups,
 *   one branch joins them all, each group's range bounded by its `limit`-th grant (a correlated `OFFSET limit - 1`
 *   lookup, since SQLite has no LATERAL). The limit is a literal, so statements are prepared per limit: SQLite
 *   plans a bound `LIMIT ?` less well.
 */

/**
 * A listed plant as the response body shows it, the contract's Plant object: `{"name":…}`, with `"tag":…` only
 * when the plant has one. The database builds each page's body, so a request handles two texts, not a row
 * per plant (SQLite's JSON functions and PostgreSQL's to_json escape any text exactly). Compact, and `name`
 * first in both dialects: `dropLastPlant` relies on it.
 */
const PLANT_JSON: Record<Backend, string> = {
  sqlite: `CASE WHEN tag IS NULL THEN json_object('name', name) ELSE json_object('name', name, 'tag', tag) END`,
  postgres: `'{"name":' || coalesce(to_json(name)::text, 'null') || coalesce(',"tag":' || to_json(tag)::text, '') || '}'`,
};

/** Where each plant of a page's JSON starts after the first: a `{"name":` cannot occur inside a JSON string, whose quotes are escaped. */
const NEXT_PLANT = ',{"name":';

/**
 * A page's columns, `ids` and `plants` (JSON arrays of the catalogue positions and of the Plant objects, in id
 * order), from `sql`, a query of rows (id, name, tag) in id order. SQLite does not promise to aggregate rows in
 * the order they come, so with `ordered` the aggregates sort them themselves (dearer; see SqliteReadsAndChanges). On
 * PostgreSQL the aggregates always sort, and the columns follow from the query's other columns (`extra`).
 */
export function pageColumnsSql(dialect: Backend, sql: string, { ordered = false, extra = '' } = {}): string {
  if (dialect === 'sqlite') {
    const order = ordered ? ' ORDER BY id' : '';
    return `SELECT json_group_array(id${order}) AS ids, json_group_array(${PLANT_JSON.sqlite}${order}) AS plants FROM (${sql})`;
  }
  return (
    `SELECT coalesce(json_agg(id ORDER BY id), '[]')::text AS ids, ` +
    `'[' || coalesce(string_agg(${PLANT_JSON.postgres}, ',' ORDER BY id), '') || ']' AS plants${extra} FROM (${sql}) listed`
  );
}

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
const pageRows = (page: string): string =>
  `SELECT page.id AS id, p.name AS name, p.tag AS tag FROM ${page} LEFT JOIN plants p ON p.id = page.id`;

/** The JSON array of the plants in `plants` (as PLANT_JSON builds them) without its last. */
function dropLastPlant(plants: string): string {
  const last = plants.lastIndexOf(NEXT_PLANT);
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
): VisiblePage | undefined {
  // Read from the database's own JSON: catalogue positions.
  const positions = JSON.parse(ids) as Position[];
  for (let i = 1; i < positions.length; i++) if (positions[i]! <= positions[i - 1]!) return undefined;
  const more = positions.length > limit;
  const next = more ? positions[limit] : undefined;
  if (more) positions.length = limit;
  return { json: more ? dropLastPlant(plants) : plants, ids: positions, more, next, groupIds, cacheable };
}

/** Claimed groups that SQLite reads as branches of their own; more go through one joined branch. */
export const SQLITE_GROUP_BRANCHES = 16;

interface Params {
  user: string;
  after: string;
  claims: string;
}

const PARAMS: Record<Backend, Params> = {
  sqlite: { user: ':user', after: ':after', claims: '(SELECT value FROM json_each(:claims))' },
  postgres: { user: '$1', after: '$2', claims: '(SELECT unnest($4::text[]))' },
};

/** The SQLite parameter holding the id of the i-th group a JWT claims. */
export const groupParam = (i: number): string => `g${i}`;

/** The ids of the user's groups: stored memberships, and with `withClaims` the stored groups the claim names. */
function viewerGroups(dialect: Backend, withClaims: boolean): string {
  return memberGroups(PARAMS[dialect].user, withClaims ? `SELECT id FROM groups WHERE name IN ${PARAMS[dialect].claims}` : undefined);
}

/**
 * The groups whose grants a page reads range by range: the viewer's ranged groups (those too large for member
 * grants, see migration 0014), and with `withClaims` the stored groups a JWT's claim names.
 */
function rangedGroups(dialect: Backend, withClaims: boolean): string {
  const ranged =
    `SELECT m.group_id AS id FROM group_members m JOIN ${GROUP_SIZES} s ON s.group_id = m.group_id ` +
    `WHERE m.user_id = ${PARAMS[dialect].user} AND s.ranged = 1`;
  return withClaims ? `${ranged} UNION ${claimedGroups(PARAMS[dialect].claims)}` : ranged;
}

function memberGroups(user: string, claimed: string | undefined): string {
  return `SELECT group_id AS id FROM group_members WHERE user_id = ${user}${claimed === undefined ? '' : ` UNION ${claimed}`}`;
}

/**
 * A path's range for one viewer: its table where its key matches, read by its position column. `distinct` when
 * the range may hold a position more than once (a plant shared with two of the viewer's groups).
 */
interface Range {
  column: AccessPath['position'];
  from: string;
  distinct?: boolean;
}

/**
 * With `exact`, a range of a table other than plants skips the positions whose plant is gone (a probe of plants
 * each): for the rare page whose first reading met one (metGonePlant).
 */
function existing(table: string, column: string, exact: boolean): string {
  return exact && table !== 'plants' ? ` AND EXISTS (SELECT 1 FROM plants e WHERE e.id = ${table}.${column})` : '';
}

/**
 * The ranges for the viewer whose id is the SQL expression `user`: one per path, the group path through the
 * viewer's small groups included, read from the member grants the triggers keep (one range per user, however
 * many groups). Ranged groups and those a JWT claims are read once per group (GROUP_PATHS).
 */
function viewerRanges(user: string, exact = false): Range[] {
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
const GROUP_PATHS = ACCESS_PATH_LIST.filter((path) => path.by === 'group');

/** The ids of the stored groups a JWT's claim names (`claims`: the SQL of the names). */
const claimedGroups = (claims: string): string => `SELECT id FROM groups WHERE name IN ${claims}`;

/**
 * On a PostgreSQL standby, how far it has replayed the primary's WAL (null on a primary): a listing read from a
 * replica says it, so that a page older than the changes already applied to the caches is not cached.
 */
const REPLAYED = 'pg_last_wal_replay_lsn()::text';

/**
 * PostgreSQL: one page of the plants user $1 may see after $2, at most $3, with the claimed group names in $4
 * when `withClaims`: one row of page columns (see `pageColumnsSql`), with the ids of the groups the page
 * counted (`groups`), so that a cache knows what it depends on without a second round trip, and the standby's
 * replay position (`replayed`). With `exact`, ranges skip positions of plants that are gone (see metGonePlant).
 */
export function postgresVisiblePlantsSql(withClaims: boolean, exact = false): string {
  const p = PARAMS.postgres;
  const branches = viewerRanges(p.user, exact).map(
    ({ column, from, distinct }) =>
      `(SELECT ${distinct ? 'DISTINCT ' : ''}${column} FROM ${from} AND ${column} > ${p.after} ORDER BY ${column} LIMIT $3)`,
  );
  for (const { table, position: column, key } of GROUP_PATHS) {
    branches.push(
      `SELECT gg.${column} FROM (${rangedGroups('postgres', withClaims)}) g CROSS JOIN LATERAL (SELECT ${column} FROM ${table} ` +
        `WHERE ${key} = g.id AND ${column} > ${p.after}${existing(table, column, exact)} ORDER BY ${column} LIMIT $3) gg`,
    );
  }
  const rows = pageRows('page');
  return (
    `WITH page AS (${branches.join(' UNION ')} ORDER BY 1 LIMIT $3) ` +
    pageColumnsSql('postgres', rows, { extra: `, ARRAY(${viewerGroups('postgres', withClaims)}) AS groups, ${REPLAYED} AS replayed` })
  );
}

/**
 * SQLite: one page of the plants user `:user` may see after `:after`, at most `limit`: rows (id, name, tag) in
 * id order. The groups read range by range (the viewer's ranged groups and those a JWT claims, read beforehand
 * by `viewerGroupsSql`) come with `groups` a number as `:g0`… (see `groupParam`); with `joined` they are
 * joined in the statement from `:ranged`, their ids as a JSON array. With `exact`, ranges skip positions of plants
 * that are gone (see metGonePlant).
 */
export function sqliteVisiblePlantsSql(limit: number, groups: number | 'joined', exact = false): string {
  const p = PARAMS.sqlite;
  // A UNION of ordered ranges drops repeated positions as it merges them: no range needs DISTINCT of its own.
  const branches = viewerRanges(p.user, exact).map(({ column, from }) => `SELECT ${column} FROM ${from} AND ${column} > ${p.after}`);
  for (const { table, position: column, key } of GROUP_PATHS) {
    if (groups === 'joined') {
      branches.push(
        `SELECT * FROM (SELECT gg.${column} FROM (SELECT value AS id FROM json_each(:ranged)) g JOIN ${table} gg ` +
          `ON gg.${key} = g.id AND gg.${column} > ${p.after}${existing('gg', column, exact)} AND gg.${column} <= coalesce((SELECT x.${column} FROM ${table} x ` +
          `WHERE x.${key} = g.id AND x.${column} > ${p.after}${existing('x', column, exact)} ORDER BY x.${column} LIMIT 1 OFFSET ${limit - 1}), 9223372036854775807))`,
      );
    } else {
      for (let i = 0; i < groups; i++)
        branches.push(
          `SELECT ${column} FROM ${table} WHERE ${key} = :${groupParam(i)} AND ${column} > ${p.after}${existing(table, column, exact)}`,
        );
    }
  }
  // Joined rather than `WHERE id IN (…)`, which builds a temporary index of the page's ids first.
  return pageRows(`(${branches.join(' UNION ')} ORDER BY 1 LIMIT ${limit}) page`);
}

/**
 * SQLite: for `:user` (and `:claims`), read in the page's snapshot, one row of two JSON arrays: the ids of the
 * groups a page counts, and of those it reads range by range (ranged or claimed, see `rangedGroups`). One value
 * each for a user in hundreds of groups, where a row each would cost more than the page.
 */
export function viewerGroupsSql(withClaims: boolean): string {
  const byRange = (ids: string) => `(SELECT json_group_array(id) FROM (${ids}))`;
  return `SELECT (SELECT json_group_array(id) FROM (${viewerGroups('sqlite', withClaims)})), ${byRange(rangedGroups('sqlite', withClaims))}`;
}

/**
 * One page of every plant (what an admin sees). SQLite: rows (id, name, tag) in id order after `:after`, at most
 * `limit`. PostgreSQL: after $1, at most $2, one row of page columns with the standby's replay position (`replayed`).
 */
export function allPlantsSql(dialect: Backend, limit: number): string {
  if (dialect === 'sqlite') return `SELECT id, name, tag FROM plants WHERE id > :after ORDER BY id LIMIT ${limit}`;
  const rows = 'SELECT id, name, tag FROM plants WHERE id > $1 ORDER BY id LIMIT $2';
  return pageColumnsSql('postgres', rows, { extra: `, NULL::bigint[] AS groups, ${REPLAYED} AS replayed` });
}

/**
 * Whether user `user` may see the plant at catalogue position `plant` (the rule above, for one plant), as a
 * condition both dialects evaluate; `claimedGroupIds` are the stored groups a JWT's groups claim names. Every
 * value is an id the store read itself, never client text, so they are written as literals.
 */
export function plantVisibleSql(plant: Position, user: number, claimedGroupIds: readonly number[]): string {
  for (const id of [plant, user, ...claimedGroupIds]) if (!Number.isSafeInteger(id)) throw new Error(`not an id: ${id}`);
  const claimed = claimedGroupIds.length === 0 ? undefined : `SELECT id FROM groups WHERE id IN (${claimedGroupIds.join(', ')})`;
  const branches = viewerRanges(String(user)).map(({ column, from }) => `EXISTS (SELECT 1 FROM ${from} AND ${column} = ${plant})`);
  for (const { table, position: column, key } of GROUP_PATHS) {
    branches.push(`EXISTS (SELECT 1 FROM ${table} WHERE ${column} = ${plant} AND ${key} IN (${memberGroups(String(user), claimed)}))`);
  }
  return branches.join(' OR ');
}
