import {
  allRowsSql,
  commonTagSql,
  existing,
  firstVisibleRowsSql,
  GROUP_PATHS,
  pageRows,
  rangedGroups,
  rareTagRowsSql,
  smallGroupsSql,
  taggedRowsSql as taggedRowsOf,
  visibleRowsSql as visibleRowsOf,
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
/** A listed plant with its id (a NewPlant), from rows that have `api_id` too. */
const PLANT_WITH_ID_JSON = `'{"id":' || api_id::text || ',' || substr(${PLANT_JSON}, 2)`;

/**
 * On a standby, how far it has replayed the primary's WAL (null on a primary): a listing read from a replica says
 * it, so that a page older than the changes already applied to the caches is not cached.
 */
const REPLAYED = 'pg_last_wal_replay_lsn()::text';

/**
 * A page's columns, `ids` and `plants` (JSON arrays of the catalogue positions and of the Plant objects, in id
 * order), from `sql`, a query of rows (id, name, tag) in id order; the aggregates sort them, and the columns
 * follow from the query's other columns (`extra`).
 */
export function pageColumnsSql(sql: string, extra: string, withIds = false): string {
  return (
    `SELECT coalesce(json_agg(id ORDER BY id), '[]')::text AS ids, ` +
    `'[' || coalesce(string_agg(${withIds ? PLANT_WITH_ID_JSON : PLANT_JSON}, ',' ORDER BY id), '') || ']' AS plants${extra} FROM (${sql}) listed`
  );
}

/**
 * One page of the plants user $1 may see after $2, at most $3, with the claimed group names in $4 when
 * `withClaims`: one row of page columns (see `pageColumnsSql`), with the ids of the groups the page counted
 * (`groups`), so that a cache knows what it depends on without a second round trip, and the standby's replay
 * position (`replayed`). With `exact`, ranges skip positions of plants that are gone (see metGonePlant).
 */
export function visiblePlantsSql(withClaims: boolean, exact = false): string {
  return (
    `WITH page AS (${visiblePositions(withClaims, exact)}) ` +
    pageColumnsSql(pageRows('page'), `, ARRAY(${viewerGroups(PARAMS, withClaims)}) AS groups, ${REPLAYED} AS replayed`)
  );
}

/**
 * The positions user $1 (or `p.user`) may see after $2, at most $3 (claims in $4): the union of the viewer's ranges,
 * each cut at $3.
 */
function visiblePositions(withClaims: boolean, exact: boolean, p: ListingParams = PARAMS, limit = '$3'): string {
  const branches = viewerRanges(p.user, exact).map(
    ({ column, from, distinct }) =>
      `(SELECT ${distinct ? 'DISTINCT ' : ''}${column} FROM ${from} AND ${column} > ${p.after} ORDER BY ${column} LIMIT ${limit})`,
  );
  for (const { table, position: column, key } of GROUP_PATHS) {
    branches.push(
      `SELECT gg.${column} FROM (${rangedGroups(p, withClaims)}) g CROSS JOIN LATERAL (SELECT ${column} FROM ${table} ` +
        `WHERE ${key} = g.id AND ${column} > ${p.after}${existing(table, column, exact)} ORDER BY ${column} LIMIT ${limit}) gg`,
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
 * bearersSql; none for an unknown hash), active at $4; for those that read a page, the plants their user sees
 * after the place in $2, at most the count in $3, as visiblePlantsSql reads them: page columns and `groups`.
 */
export function tokenPagesSql(): string {
  const bearers = bearersSql(
    [
      ['hash', 'bytea'],
      ['after', 'bigint'],
      ['wanted', 'bigint'],
    ],
    '$4',
  );
  // The page's ranges run only for a token that may read it (a filter on the outer row alone, checked first).
  const positions = `SELECT id FROM (${visiblePositions(false, false, BEARER_PARAMS, 'bearer.wanted')}) positions WHERE bearer.reads_page`;
  const page = pageColumnsSql(pageRows('page'), `, ARRAY(${viewerGroups(BEARER_PARAMS, false)}) AS groups`);
  return `WITH bearer AS MATERIALIZED (${bearers}) SELECT bearer.*, listed.* FROM bearer CROSS JOIN LATERAL (WITH page AS (${positions}) ${page}) listed`;
}

/**
 * Bearer tokens' credentials and, in the same statement, the first read of the page of one tag each one's user asks
 * for (RequestReads.firstFilteredPage's, both ways in one): the tokens with the hashes in $1 (see bearersSql),
 * active at $6; for those that read a page, whether at least $8 plants have the tag in $4 after the place in $2
 * (`common`; taken as true, unread, where $5 says the tag was common last time). A rare tag's page is then
 * tagPageSql's rows, the first of them the user sees, at most the count in $3; a common tag's, firstVisiblePageSql's,
 * from the first of the user's positions, as many as that count or $7 if more (`positions_read`: how many those were
 * when the page came out short). Page columns and `groups` either way.
 */
export function tokenTagPagesSql(): string {
  const bearers = bearersSql(
    [
      ['hash', 'bytea'],
      ['after', 'bigint'],
      ['wanted', 'bigint'],
      ['tag', 'text'],
      ['known_common', 'boolean'],
    ],
    '$6',
  );
  const [tag, wanted] = ['bearer.tag', 'bearer.wanted'];
  const common = `(SELECT common FROM tag_size)`;
  const rare = rareTagRowsSql(
    { user: BEARER_PARAMS.user, after: BEARER_PARAMS.after, tag, wanted },
    { small: '(SELECT small FROM ranged)', ranged: 'SELECT unnest(ids) FROM ranged', rangedArray: true },
    { fenced: '$8' },
  );
  const positions = visiblePositions(false, false, BEARER_PARAMS, `greatest($7, ${wanted})`);
  const commonRows = firstVisibleRowsSql(positions, tag, wanted, 'JOIN');
  const counted = `CASE WHEN ${common} AND count(*) < ${wanted} THEN (SELECT count(*) FROM (${positions}) first_positions) END AS positions_read`;
  // Each way runs only on its side of `common` (a one-time filter), and neither for a token that reads no page.
  const page = pageColumnsSql(
    `SELECT * FROM (${rare}) rare_rows WHERE NOT ${common} UNION ALL SELECT * FROM (${commonRows}) common_rows WHERE ${common}`,
    `, ARRAY(${viewerGroups(BEARER_PARAMS, false)}) AS groups, ${common} AS common, ${counted}`,
  );
  return (
    `WITH bearer AS MATERIALIZED (${bearers}) SELECT bearer.*, listed.* FROM bearer CROSS JOIN LATERAL (` +
    `WITH tag_size AS MATERIALIZED (SELECT CASE WHEN NOT bearer.reads_page THEN NULL WHEN bearer.known_common THEN true ` +
    `ELSE ${commonTagSql({ tag, after: BEARER_PARAMS.after, rareBelow: '$8' })} END AS common), ` +
    `ranged AS MATERIALIZED (SELECT ARRAY(${rangedGroups(BEARER_PARAMS, false)}) AS ids, ${smallGroupsSql(BEARER_PARAMS.user)} AS small) ${page}) listed`
  );
}

/**
 * The positions user $1 sees after $2, at most $3 (claims in $4 when `withClaims`), and of them those with the tag
 * in the next parameter when `tagged` (see visibleRowsSql in listing-sql.ts).
 */
export const visibleRowsSql = (withClaims: boolean, tagged: boolean): string =>
  visibleRowsOf(visiblePositions(withClaims, false), tagged ? (withClaims ? '$5' : '$4') : undefined);

/**
 * The plants with tag $4 after $2, at most $3, and of them those user $1 sees, with the claimed group names in $5
 * when `withClaims` (see taggedRowsSql in listing-sql.ts).
 */
export const taggedRowsSql = (withClaims: boolean): string =>
  taggedRowsOf(
    { user: '$1', after: '$2', limit: '$3', tag: '$4' },
    { small: true, ranged: rangedGroups({ ...PARAMS, claims: '(SELECT unnest($5::text[]))' }, withClaims), rangedArray: true },
  );

/** Every plant after $1, at most $2, with tag $3 when `tagged`: rows (id, api_id, name, tag). */
export const allRowsSqlOf = (tagged: boolean): string => allRowsSql({ after: '$1', limit: '$2', ...(tagged ? { tag: '$3' } : {}) });

/**
 * A page of one tag's first read (RequestReads.firstFilteredPage): the ids of the groups user $1's page counts
 * (`groups`, claims in $6 when `withClaims`), whether at least $5 plants have tag $3 after $2 (`common`), and when
 * not, the page (see rareTagRowsSql): the first $4 of them the user sees, as page columns (see pageColumnsSql).
 * The viewer's ranged groups, and whether it is in a small group at all, are read once, for every plant's probe.
 */
export function tagPageSql(withClaims: boolean, withIds: boolean): string {
  const params = { ...PARAMS, claims: '(SELECT unnest($6::text[]))' };
  const rows = rareTagRowsSql(
    { user: PARAMS.user, after: PARAMS.after, tag: '$3', wanted: '$4' },
    { small: '(SELECT small FROM ranged)', ranged: 'SELECT unnest(ids) FROM ranged', rangedArray: true },
    { fenced: '$5' },
  );
  return (
    `WITH tag_size AS MATERIALIZED (SELECT ${commonTagSql({ tag: '$3', after: PARAMS.after, rareBelow: '$5' })} AS common), ` +
    `ranged AS MATERIALIZED (SELECT ARRAY(${rangedGroups(params, withClaims)}) AS ids, ${smallGroupsSql(PARAMS.user)} AS small) ` +
    // The rare read runs only for a rare tag (a one-time filter); a common tag's page is read by firstVisiblePageSql.
    pageColumnsSql(
      `SELECT * FROM (${rows}) rare_rows WHERE NOT (SELECT common FROM tag_size)`,
      `, ARRAY(${viewerGroups(params, withClaims)}) AS groups, (SELECT common FROM tag_size) AS common`,
      withIds,
    )
  );
}

/**
 * The first plants of what user $1 sees after $2, from the first $3 of its positions (claims in $4 when
 * `withClaims`), at most the next parameter (`wanted`), with the tag in the parameter after it when `tagged`
 * (see firstVisibleRowsSql): page columns with the ids of the groups the page counts (`groups`), and when the
 * page came out short, how many those first positions are (`positions_read`: fewer than $3 says they were all).
 * With a tag, the read runs only when at least the last parameter's count of plants have it after $2 (`common`):
 * a rare tag's page is tagPageSql's.
 */
export function firstVisiblePageSql(withClaims: boolean, tagged: boolean, withIds: boolean): string {
  const next = withClaims ? 5 : 4;
  const [wanted, tag, rareBelow] = [`$${next}`, `$${next + 1}`, `$${next + 2}`];
  const positions = visiblePositions(withClaims, false);
  const rows = firstVisibleRowsSql(positions, tagged ? tag : undefined, wanted, 'JOIN');
  const counted = `CASE WHEN count(*) < ${wanted} THEN (SELECT count(*) FROM (${positions}) first_positions) END AS positions_read`;
  const groups = `ARRAY(${viewerGroups(PARAMS, withClaims)}) AS groups`;
  if (!tagged) return pageColumnsSql(rows, `, ${groups}, ${counted}`, withIds);
  return (
    `WITH tag_size AS MATERIALIZED (SELECT ${commonTagSql({ tag, after: PARAMS.after, rareBelow })} AS common) ` +
    pageColumnsSql(
      `SELECT * FROM (${rows}) common_rows WHERE (SELECT common FROM tag_size)`,
      `, ${groups}, (SELECT common FROM tag_size) AS common, ${counted}`,
      withIds,
    )
  );
}

/** One page of every plant (what an admin sees) after $1, at most $2: one row of page columns, with `replayed`. */
export const ALL_PLANTS_SQL = pageColumnsSql(
  'SELECT id, name, tag FROM plants WHERE id > $1 ORDER BY id LIMIT $2',
  `, NULL::bigint[] AS groups, ${REPLAYED} AS replayed`,
);
