import { mkdirSync, statSync, type Stats } from 'node:fs';
import { invalidInput } from '../../catalogue/errors.js';
import { dirname } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { Kysely } from 'kysely';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { openConnection } from './sqlite-connection.js';
import { WritingTransactionsDialect } from './writing-transactions.js';

// The SQLite file itself: opening it as Plant Store wants it.

/**
 * Why the file at `path` cannot be opened, with its path, where SQLite says only `unable to open database file`
 * or `file is not a database`, and a folder that cannot be made says `EACCES` with the system's call.
 */
function cannotOpen(path: string, err: unknown): unknown {
  const code = (err as { code?: string }).code;
  if (code === 'SQLITE_NOTADB') return invalidInput(`cannot open the database ${path}: the file is not a SQLite database`);
  const notFolder = code === 'ENOTDIR' || code === 'EEXIST';
  if (code !== 'SQLITE_CANTOPEN' && code !== 'EACCES' && code !== 'EPERM' && !notFolder) return err;
  let found: Stats | undefined;
  try {
    found = statSync(path, { throwIfNoEntry: false });
  } catch {
    // A file where a folder of the path should be: notFolder says so.
  }
  const why = found?.isDirectory()
    ? 'it is a directory, not a database file'
    : notFolder
      ? 'a part of its path is a file, not a folder'
      : code === 'SQLITE_CANTOPEN'
        ? `SQLite cannot open it: ${found ? 'the file' : 'its folder'} must be readable and writable by this user`
        : `permission denied (${(err as Error).message})`;
  return invalidInput(`cannot open the database ${path}: ${why}`);
}

/** Opens the file (creating it unless `mustExist`), sets the pragmas and brings the schema up to date. */
export async function openDatabase(path: string, mustExist: boolean): Promise<{ sqlite: BetterSqlite3.Database; db: Kysely<Database> }> {
  let sqlite: BetterSqlite3.Database;
  try {
    if (path !== ':memory:' && !mustExist) mkdirSync(dirname(path), { recursive: true });
    sqlite = openConnection(path, { mustExist });
  } catch (err) {
    throw cannotOpen(path, err);
  }
  try {
    const db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(sqlite) });
    await migrateToLatest(db, 'sqlite');
    return { sqlite, db };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}
