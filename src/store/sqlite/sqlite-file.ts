import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { Kysely } from 'kysely';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { openConnection } from './sqlite-connection.js';
import { WritingTransactionsDialect } from './writing-transactions.js';

// The SQLite file itself: opening it as Plant Store wants it.

/** Opens the file (creating it unless `mustExist`), sets the pragmas and brings the schema up to date. */
export async function openDatabase(path: string, mustExist: boolean): Promise<{ sqlite: BetterSqlite3.Database; db: Kysely<Database> }> {
  if (path !== ':memory:' && !mustExist) mkdirSync(dirname(path), { recursive: true });
  const sqlite = openConnection(path, { mustExist });
  try {
    const db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(sqlite) });
    await migrateToLatest(db, 'sqlite');
    return { sqlite, db };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}
