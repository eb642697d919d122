import type pg from 'pg';
import { invalidInput } from '../../catalogue/errors.js';

/** PostgreSQL's own tool makes the copy (see sqlite-backup.ts for SQLite's): the error says which, with the store's schema. */
export async function backupPostgres(pool: pg.Pool): Promise<never> {
  const { rows } = await pool.query<{ schema: string }>('SELECT current_schema() AS schema');
  throw invalidInput(
    `backup copies a SQLite database; for PostgreSQL use pg_dump, which copies one snapshot while writers go on: ` +
      `pg_dump --format=custom --schema=${rows[0]!.schema} --file=FILE DATABASE_URL (restore with pg_restore --dbname=DATABASE_URL FILE), ` +
      `where DATABASE_URL is the database's URL without Plant Store's ?schema= parameter, which PostgreSQL's tools refuse`,
  );
}
