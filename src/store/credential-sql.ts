/**
 * The request path's credential reads, one text for both databases (each reader prepares it its own way): `param`
 * is the database's placeholder, `?` or `$1`. Columns in this order: SQLite reads rows as arrays.
 */
export const findTokenSql = (param: string, moreColumns = ''): string =>
  `SELECT t.id AS token_id, t.user_id, u.is_admin, t.expires_at, t.revoked_at${moreColumns} FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ${param}`;

export const findUserSql = (param: string): string => `SELECT id, is_admin FROM users WHERE name = ${param}`;

/**
 * What readiness asks (`/readyz`): a read of the table every request reads first, so that a database whose tables
 * are gone (a PostgreSQL schema dropped under a running instance) is not ready, as it cannot serve.
 */
export const readinessSql = 'SELECT 1 FROM tokens LIMIT 1';
