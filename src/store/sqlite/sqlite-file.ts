import { mkdirSync, statSync, type Stats } from 'node:fs';
import { invalidInput } from '../../catalogue/errors.js';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { DEFAULT_MIGRATION_TABLE, Kysely } from 'kysely';
import { knownMigrationNames, migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { openConnection } from './sqlite-connection.js';
import { beginWriting, WritingTransactionsDialect } from './writing-transactions.js';

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

/**
 * Whether the file at `path` holds Plant Store's tables, read without changing it: opening it as Plant Store does
 * would switch it to WAL and migrate it, which a command that only reads must not do to another program's file
 * (a mistyped --db). A file that cannot be read here is left to openDatabase, which says why.
 */
export function holdsPlantStore(path: string): boolean {
  let sqlite: BetterSqlite3.Database;
  try {
    sqlite = new BetterSqlite3(path, { readonly: true, fileMustExist: true });
  } catch {
    return true;
  }
  try {
    return hasMigrationsTable(sqlite);
  } catch {
    return true;
  } finally {
    sqlite.close();
  }
}

/**
 * Opens the file (creating it unless `mustExist`), sets the pragmas and brings the schema up to date: `migrated`
 * names the migrations this opening applied.
 */
export async function openDatabase(
  path: string,
  mustExist: boolean,
): Promise<{ sqlite: BetterSqlite3.Database; db: Kysely<Database>; migrated: string[] }> {
  let sqlite: BetterSqlite3.Database;
  try {
    if (path !== ':memory:' && !mustExist) mkdirSync(dirname(path), { recursive: true });
    sqlite = openConnection(path, { mustExist });
  } catch (err) {
    throw cannotOpen(path, err);
  }
  try {
    const db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(sqlite) });
    return { sqlite, db, migrated: await migrateAlone(sqlite, db) };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}

/**
 * Closes what openDatabase opened. The connection is closed here, not left to Kysely, which closes it only if it ever
 * used it, and opening a file already up to date does not.
 */
export async function closeDatabase({ sqlite, db }: { sqlite: BetterSqlite3.Database; db: Kysely<Database> }): Promise<void> {
  sqlite.close();
  await db.destroy();
}

/** How long a process waits for another's migrations before it gives up (an index built on a large file). */
const MIGRATIONS_WAIT_MS = 60_000;

/**
 * Brings the schema up to date in one transaction that holds the write lock. Kysely runs SQLite's migrations
 * without a transaction or a lock, so processes opening a new file at once each ran them: most failed (`table
 * "users" already exists`), and one that was behind could create again a trigger that another had already
 * replaced, leaving an old trigger under a complete list of migrations. Under the lock the next process finds them
 * applied, and a migration that fails leaves none of its statements. A file already up to date takes no lock.
 */
async function migrateAlone(sqlite: BetterSqlite3.Database, db: Kysely<Database>): Promise<string[]> {
  if (upToDate(sqlite)) return [];
  await beginWriting(sqlite, MIGRATIONS_WAIT_MS);
  try {
    const migrated = await migrateToLatest(db, 'sqlite');
    sqlite.exec('COMMIT');
    return migrated;
  } catch (err) {
    if (sqlite.inTransaction) sqlite.exec('ROLLBACK');
    throw err;
  }
}

/** Whether the file has exactly the migrations this version knows. */
function upToDate(sqlite: BetterSqlite3.Database): boolean {
  const known = knownMigrationNames();
  if (!hasMigrationsTable(sqlite)) return false;
  const applied = sqlite.prepare(`SELECT name FROM ${DEFAULT_MIGRATION_TABLE} ORDER BY name`).pluck().all() as string[];
  return applied.length === known.length && applied.every((name, i) => name === known[i]);
}

/** Whether Kysely's table of applied migrations exists: the mark of a file Plant Store has opened. */
function hasMigrationsTable(sqlite: BetterSqlite3.Database): boolean {
  return sqlite.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(DEFAULT_MIGRATION_TABLE) !== undefined;
}
