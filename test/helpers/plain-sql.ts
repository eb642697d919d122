import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';

/** A psql-like session on the PostgreSQL database `db` (a `--db` value), in the schema it names. */
export async function connectPostgres(db: string): Promise<pg.Client> {
  const url = new URL(db);
  const schema = url.searchParams.get('schema')!;
  url.searchParams.delete('schema');
  const client = new pg.Client({ connectionString: url.toString(), options: `-c search_path=${schema}` });
  await client.connect();
  return client;
}

/** Runs `statement` on the database `db` (a `--db` value) as an operator typing it into sqlite3 or psql would. */
export async function plainSql(db: string, statement: string): Promise<void> {
  await run(db, statement, false);
}

/** The rows of query `statement` on the database `db`, as plain SQL reads them. */
export function plainQuery<R>(db: string, statement: string): Promise<R[]> {
  return run<R>(db, statement, true);
}

async function run<R>(db: string, statement: string, returnsRows: boolean): Promise<R[]> {
  if (!db.startsWith('postgres')) {
    const sqlite = new BetterSqlite3(db, { readonly: returnsRows });
    try {
      if (!returnsRows) {
        sqlite.exec(statement);
        return [];
      }
      return sqlite.prepare(statement).all() as R[];
    } finally {
      sqlite.close();
    }
  }
  const client = await connectPostgres(db);
  try {
    return (await client.query(statement)).rows as R[];
  } finally {
    await client.end();
  }
}

/**
 * Gathers the statistics of the store's tables on `db`, as an operator's ANALYZE would: on PostgreSQL those of its
 * schema alone (a bare ANALYZE would lock every table of every schema of the database).
 */
export async function analyze(db: string): Promise<void> {
  if (!db.startsWith('postgres')) return plainSql(db, 'ANALYZE');
  const tables = await plainQuery<{ name: string }>(db, 'SELECT tablename AS name FROM pg_tables WHERE schemaname = current_schema()');
  await plainSql(db, `ANALYZE ${tables.map((table) => `"${table.name}"`).join(', ')}`);
}

/**
 * Lowers the bounds past which a group is ranged (migration 0014) on `db`, a migrated database whose groups are
 * within the new bounds (they count from the next change of each group): at 3 plants and 2
 * members, groups of a few users and plants go ranged and back all through a test, so that both ways of reading
 * group access, and the moves between them, meet every write.
 */
export function lowerGroupBounds(db: string): Promise<void> {
  return plainSql(db, 'UPDATE group_access_bounds SET plants = 3, members = 2');
}

/**
 * Member grants and group counts against the memberships and group grants: member grants of ranged groups or that
 * no pair accounts for, pairs of small groups without one, and groups whose counts or kind do not match their rows;
 * and grants whose tag is not their plant's (migration 0018).
 */
export const DERIVED_DIFFERENCE = `SELECT 'stray' AS kind, mg.user_id, mg.plant_id, mg.group_id FROM plant_member_grants mg
  WHERE NOT EXISTS (SELECT 1 FROM group_members m JOIN plant_group_grants g ON g.group_id = m.group_id
    JOIN group_sizes s ON s.group_id = g.group_id AND s.ranged = 0
    WHERE m.user_id = mg.user_id AND g.plant_id = mg.plant_id AND g.group_id = mg.group_id)
  UNION ALL SELECT 'missing', m.user_id, g.plant_id, g.group_id FROM group_members m JOIN plant_group_grants g ON g.group_id = m.group_id
  WHERE NOT EXISTS (SELECT 1 FROM group_sizes s WHERE s.group_id = g.group_id AND s.ranged = 1)
    AND NOT EXISTS (SELECT 1 FROM plant_member_grants mg WHERE mg.user_id = m.user_id AND mg.plant_id = g.plant_id AND mg.group_id = g.group_id)
  UNION ALL SELECT 'size', gr.id, s.plants, s.members FROM groups gr CROSS JOIN group_access_bounds b
  LEFT JOIN group_sizes s ON s.group_id = gr.id
  WHERE coalesce(s.plants, 0) <> (SELECT count(*) FROM plant_group_grants WHERE group_id = gr.id)
     OR coalesce(s.members, 0) <> (SELECT count(*) FROM group_members WHERE group_id = gr.id)
     OR (s.ranged = 1 AND s.plants <= b.plants / 2 AND s.members <= b.members / 2)
     OR (coalesce(s.ranged, 0) = 0 AND (s.plants > b.plants OR s.members > b.members))
  UNION ALL SELECT 'user grant tag', ug.user_id, ug.plant_id, NULL FROM plant_user_grants ug JOIN plants p ON p.id = ug.plant_id
  WHERE ug.tag IS DISTINCT FROM p.tag
  UNION ALL SELECT 'group grant tag', gg.group_id, gg.plant_id, NULL FROM plant_group_grants gg JOIN plants p ON p.id = gg.plant_id
  WHERE gg.tag IS DISTINCT FROM p.tag
  UNION ALL SELECT 'member grant tag', mg.user_id, mg.plant_id, mg.group_id FROM plant_member_grants mg JOIN plants p ON p.id = mg.plant_id
  WHERE mg.tag IS DISTINCT FROM p.tag`;
