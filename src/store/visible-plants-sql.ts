import type { Dialect } from './schema.js';

/**
 * The access rule as SQL, written once for both backends: one page of what a user may see, in one statement.
 *
 * A user sees a plant that is public, that the user owns, that is granted to the user, or that is granted to
 * a group of the user (stored memberships, plus the groups a JWT's groups claim names). Each branch is an
 * index range read in id order from `after`, cut at `limit`; the union is cut again, and only then joined to
 * `plants`. A page costs about (3 + groups) x `limit` index entries whatever the size of the catalogue.
 *
 * The dialects differ only where the engines do: PostgreSQL reads each group's grants with a LATERAL join;
 * SQLite has none, so each group's range is bounded above by its `limit`-th grant, found by a correlated
 * `OFFSET limit - 1` lookup (same cost: two short index reads per group). SQLite also gets the limit as a
 * literal: a bound `LIMIT ?` costs it about 3.5 µs more per statement (measured on 3.53), so its statements
 * are prepared per limit; PostgreSQL takes it as a parameter.
 *
 * Parameters: user id, `after`, and with claims the claimed group names (SQLite: a JSON array, PostgreSQL: text[]).
 */

interface Params {
  user: string;
  after: string;
  claims: string;
  limit: (n: number) => string;
}

const PARAMS: Record<Dialect, Params> = {
  sqlite: { user: ':user', after: ':after', claims: '(SELECT value FROM json_each(:claims))', limit: (n) => String(n) },
  postgres: { user: '$1', after: '$2', claims: '(SELECT unnest($4::text[]))', limit: () => '$3' },
};

/** The ids of the user's groups: stored memberships, and with `withClaims` the stored groups the claim names. */
function viewerGroups(dialect: Dialect, withClaims: boolean): string {
  const p = PARAMS[dialect];
  const claimed = withClaims ? ` UNION SELECT id FROM groups WHERE name IN ${p.claims}` : '';
  return `SELECT group_id AS id FROM group_members WHERE user_id = ${p.user}${claimed}`;
}

/** Plants granted to any of `viewer_groups`, at most `limit` per group, from `after`. */
function groupGrants(dialect: Dialect, limit: number): string {
  const p = PARAMS[dialect];
  if (dialect === 'postgres') {
    return (
      `SELECT gg.plant_id FROM viewer_groups g CROSS JOIN LATERAL (SELECT plant_id FROM plant_group_grants ` +
      `WHERE group_id = g.id AND plant_id > ${p.after} ORDER BY plant_id LIMIT ${p.limit(limit)}) gg`
    );
  }
  return (
    `SELECT gg.plant_id FROM viewer_groups g JOIN plant_group_grants gg ON gg.group_id = g.id AND gg.plant_id > ${p.after} ` +
    `AND gg.plant_id <= coalesce((SELECT x.plant_id FROM plant_group_grants x WHERE x.group_id = g.id AND x.plant_id > ${p.after} ` +
    `ORDER BY x.plant_id LIMIT 1 OFFSET ${limit - 1}), 9223372036854775807)`
  );
}

/** One branch of the rule: an index range in id order, cut at `limit` (SQLite wants it wrapped to keep its own LIMIT in a union). */
function branch(dialect: Dialect, column: string, from: string, limit: number): string {
  const p = PARAMS[dialect];
  const range = `SELECT ${column} FROM ${from} AND ${column} > ${p.after} ORDER BY ${column} LIMIT ${p.limit(limit)}`;
  return dialect === 'sqlite' ? `SELECT ${column} FROM (${range})` : `(${range})`;
}

/**
 * One page of the plants user `user` may see: rows (id, name, tag) in id order. On PostgreSQL one more row
 * follows them, with a null id and the ids of the groups the page was computed with in a fourth column
 * (`groups`), so that a cache knows what the page depends on without a second round trip; SQLite reads those
 * with `viewerGroupsSql` in the same snapshot instead.
 */
export function visiblePlantsSql(dialect: Dialect, limit: number, withClaims: boolean): string {
  const p = PARAMS[dialect];
  const page =
    `WITH viewer_groups AS (${viewerGroups(dialect, withClaims)}), page AS (` +
    [
      branch(dialect, 'id', `plants WHERE is_public = 1`, limit),
      branch(dialect, 'id', `plants WHERE owner_id = ${p.user}`, limit),
      branch(dialect, 'plant_id', `plant_user_grants WHERE user_id = ${p.user}`, limit),
      groupGrants(dialect, limit),
    ].join(' UNION ') +
    ` ORDER BY 1 LIMIT ${p.limit(limit)}) `;
  if (dialect === 'sqlite') return `${page}SELECT p.id, p.name, p.tag FROM page JOIN plants p ON p.id = page.id ORDER BY p.id`;
  return (
    `${page}SELECT p.id, p.name, p.tag, NULL::bigint[] AS groups FROM page JOIN plants p ON p.id = page.id ` +
    `UNION ALL SELECT NULL, NULL, NULL, ARRAY(SELECT id FROM viewer_groups) ORDER BY 1`
  );
}

/** The ids of the groups a page of `visiblePlantsSql` counts for the user (SQLite; PostgreSQL returns them with the page). */
export function viewerGroupsSql(dialect: Dialect, withClaims: boolean): string {
  return viewerGroups(dialect, withClaims);
}

/** One page of every plant (what an admin sees): rows (id, name, tag) in id order. Parameters: `after` (and the limit on PostgreSQL). */
export function allPlantsSql(dialect: Dialect, limit: number): string {
  const p = dialect === 'sqlite' ? { after: ':after', limit: String(limit) } : { after: '$1', limit: '$2' };
  return `SELECT id, name, tag FROM plants WHERE id > ${p.after} ORDER BY id LIMIT ${p.limit}`;
}
