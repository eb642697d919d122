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
