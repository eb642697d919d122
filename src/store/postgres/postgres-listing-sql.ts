import {
  allRowsSql,
  existing,
  GROUP_PATHS,
  pageRows,
  rangedGroups,
  tagCondition,
  viewerGroups,
  viewerRanges,
  type ListingParams,
} from '../listing-sql.js';
import { findTokenSql } from '../credential-sql.js';
import { activeTokenCondition } from '../../catalogue/tokens.js';

/**
 * PostgreSQL's listing statements, built from the access rule's parts (listing-sql.ts): each branch cut at
 * `limit`, each ranged or claimed group's grants read with a LATERAL join, in one prepared statement with the
 * limit as a parameter.
 */

const PARAMS: ListingParams = { user: '$1', after: '$2', claims: '(SELECT unnest($4::text[]))' };

/** A listed plant as the response body shows it (the contract's Plant object); to_json escapes any text exactly. */
const PLANT_JSON = `'{"name":' || coalesce(to_json(name)::text, 'null') || coalesce(',"tag":' || to_json(tag)::text, '') || '}'`;
/** A listed plant with its id (a NewPlant), from rows that have `api_id` too; a position of no plant stays one (see metGonePlant). */
const PLANT_WITH_ID_JSON = `'{"id":' || coalesce(api_id::text, 'null') || ',' || substr(${PLANT_JSON}, 2)`;

/**
 * On a standby, how far it has replayed the primary's WAL (null on a primary): a listing read from a replica says
 * it, so that a page older than the changes already applied to the caches is not cached.
 */
const REPLAYED = 'pg_last_wal_replay_lsn()::text';

/**
 * A page's columns, `ids` and `plants` (JSON arrays of the catalogue positions and of the Plant objects), from
 * `sql`, a query of rows (id, name, tag) in id order, and the columns of `extra`. Both aggregates take the rows in
 * the one order they come, which a page's plan keeps; with `ordered` they sort them themselves, for the statement a
 * page whose ids came out of order is read again with (two sorts a page, which rows in order do not need).
 */
export function pageColumnsSql(sql: string, extra: string, { withIds = false, ordered = false } = {}): string {
  const order = ordered ? ' ORDER BY id' : '';
  return (
    `SELECT coalesce(json_agg(id${order}), '[]')::text AS ids, ` +
    `'[' || coalesce(string_agg(${withIds ? PLANT_WITH_ID_JSON : PLANT_JSON}, ','${order}), '') || ']' AS plants${extra} FROM (${sql}) listed`
  );
}

/**
 * One page of the plants user $1 may see after $2, at most $3, with the claimed group names in $4 when
 * `withClaims`, and with `tagged` only those with the tag in the next parameter: one row of page columns (see
 * `pageColumnsSql`; with `withIds`, each plant with its id), with the ids of the groups the page counted
 * (`groups`), so that a cache knows what it depends on without a second round trip, and the standby's replay
 * position (`replayed`). With `exact`, ranges skip positions of plants that are gone (see metGonePlant) and the
 * aggregates sort their rows: the statement a page is read again with when its first read met such a position or
 * came out of order.
 */
export function visiblePlantsSql(withClaims: boolean, exact = false, tagged = false, withIds = false): string {
  const tag = tagged ? (withClaims ? '$5' : '$4') : undefined;
  return (
    `WITH page AS (${visiblePositions(withClaims, exact, PARAMS, '$3', tag)}) ` +
    pageColumnsSql(pageRows('page', withIds), `, ARRAY(${viewerGroups(PARAMS, withClaims)}) AS groups, ${REPLAYED} AS replayed`, {
      withIds,
      ordered: exact,
    })
  );
}

/**
 * The positions user $1 (or `p.user`) may see after $2, at most $3 (claims in $4), with tag `tag` when given: the
 * union of the viewer's ranges, each cut at $3.
 */
function visiblePositions(withClaims: boolean, exact: boolean, p: ListingParams = PARAMS, limit = '$3', tag?: string): string {
  const branches = viewerRanges(p.user, exact, tag).map(
    ({ column, from, distinct }) =>
      `(SELECT ${distinct ? 'DISTINCT ' : ''}${column} FROM ${from} AND ${column} > ${p.after} ORDER BY ${column} LIMIT ${limit})`,
  );
  for (const { table, position: column, key } of GROUP_PATHS) {
    branches.push(
      `SELECT gg.${column} FROM (${rangedGroups(p, withClaims)}) g CROSS JOIN LATERAL (SELECT ${column} FROM ${table} ` +
        `WHERE ${key} = g.id${tagCondition(tag)} AND ${column} > ${p.after}${existing(table, column, exact)} ORDER BY ${column} LIMIT ${limit}) gg`,
    );
  }
  return `${branches.join(' UNION ')} ORDER BY 1 LIMIT ${limit}`;
}

/**
 * Bearer tokens' credentials, for the requests in the arrays `columns` name (the first the tokens' hashes, then what
 * each request's page needs), one row a known token: findTokenSql's columns, `asked` its request's place in the
 * arrays (from 1), the request's columns, and `reads_page`: whether the token is active at `now` (epoch ms) and its
 * user no admin, the only tokens whose pages are read.
 */
function bearersSql(columns: ReadonlyArray<readonly [name: string, type: string]>, now: string): string {
  const readsPage = `, ${activeTokenCondition(now, 't')} AND u.is_admin = 0 AS reads_page`;
  const arrays = columns.map(([, type], i) => `$${i + 1}::${type}[]`).join(', ');
  const names = columns.map(([name]) => name);
  const requested = names
    .slice(1)
    .map((name) => `a.${name}`)
    .join(', ');
  // OFFSET 0 keeps each token's read apart: one probe of the tokens' unique index a token, not a join of every token.
  return (
    `SELECT a.asked, ${requested}, token.* ` +
    `FROM unnest(${arrays}) WITH ORDINALITY AS a(${names.join(', ')}, asked) ` +
    `CROSS JOIN LATERAL (${findTokenSql('a.hash', readsPage)} OFFSET 0) token`
  );
}

/** A bearer's page is read as its user's (see bearersSql): from its request's place, of its request's size. */
const BEARER_PARAMS: ListingParams = { ...PARAMS, user: 'bearer.user_id', after: 'bearer.after' };

/**
 * Bearer tokens' credentials and, in the same statement, the page each one's user asks for: one round trip for
 * the tokens the caches do not hold, however many requests ask at once. The tokens with the hashes in $1 (see
 * bearersSql; none for an unknown hash), active at the time after the arrays; for those that read a page, the
 * plants their user sees after the place in $2, at most the count in $3, with `tagged` only those with the tag in
 * $4, as visiblePlantsSql reads them: page columns and `groups`.
 */
export function tokenPagesSql(tagged = false): string {
  const columns: Array<[string, string]> = [
    ['hash', 'bytea'],
    ['after', 'bigint'],
    ['wanted', 'bigint'],
    ...(tagged ? ([['tag', 'text']] as Array<[string, string]>) : []),
  ];
  const bearers = bearersSql(columns, `$${columns.length + 1}`);
  // The page's ranges run only for a token that may read it (a filter on the outer row alone, checked first).
  const ranges = visiblePositions(false, false, BEARER_PARAMS, 'bearer.wanted', tagged ? 'bearer.tag' : undefined);
  const positions = `SELECT id FROM (${ranges}) positions WHERE bearer.reads_page`;
  const page = pageColumnsSql(pageRows('page'), `, ARRAY(${viewerGroups(BEARER_PARAMS, false)}) AS groups`);
  return `WITH bearer AS MATERIALIZED (${bearers}) SELECT bearer.*, listed.* FROM bearer CROSS JOIN LATERAL (WITH page AS (${positions}) ${page}) listed`;
}

/** Every plant after $1, at most $2, with tag $3 when `tagged`: rows (id, api_id, name, tag). */
export const allRowsSqlOf = (tagged: boolean): string => allRowsSql({ after: '$1', limit: '$2', ...(tagged ? { tag: '$3' } : {}) });

/** One page of every plant (what an admin sees) after $1, at most $2: one row of page columns, with `replayed`. */
export const ALL_PLANTS_SQL = pageColumnsSql(
  'SELECT id, name, tag FROM plants WHERE id > $1 ORDER BY id LIMIT $2',
  `, NULL::bigint[] AS groups, ${REPLAYED} AS replayed`,
  { ordered: true },
);
