import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';

/** Runs `statement` on the database `db` (a `--db` value) as an operator typing it into sqlite3 or psql would. */
export async function plainSql(db: string, statement: string): Promise<void> {
  if (!db.startsWith('postgres')) {
    const sqlite = new BetterSqlite3(db);
    try {
      sqlite.exec(statement);
    } finally {
      sqlite.close();
    }
    return;
  }
  const url = new URL(db);
  const schema = url.searchParams.get('schema')!;
  url.searchParams.delete('schema');
  const client = new pg.Client({ connectionString: url.toString(), options: `-c search_path=${schema}` });
  await client.connect();
  try {
    await client.query(statement);
  } finally {
    await client.end();
  }
}
