import { closeSync, existsSync, fsyncSync, linkSync, openSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import type BetterSqlite3 from 'better-sqlite3';
import { invalidInput } from '../../catalogue/errors.js';

/** SQLite's backup steps are a number of pages; this one is every page, in one step. */
const ALL_PAGES = 0x7fffffff;

/**
 * Writes a copy of the whole database (catalogue, tokens, webhook endpoints with their secrets, the outbox)
 * to `file`, a path where there is nothing yet, with SQLite's online backup API.
 *
 * The copy is one step: one read transaction, so the file is the database as it was at one commit, and in WAL
 * mode writers go on meanwhile. In steps, any other process's commit between two of them would restart the
 * copy, and a busy server could keep restarting it for ever. The copy is made under a hidden name beside
 * `file` and linked to it when complete, so `file` is never a partial copy and an existing file is never
 * replaced (a second backup to the same name fails instead).
 */
export async function backupSqlite(db: BetterSqlite3.Database, file: string): Promise<void> {
  if (file === '') throw invalidInput('give the backup a file name: the path is empty');
  const folder = dirname(file);
  if (!existsSync(folder)) throw invalidInput(`cannot write ${file}: no folder ${folder}`);
  if (existsSync(file)) throw invalidInput(`${file} already exists: give the backup a new name, or remove the file first`);
  const partial = join(folder, `.${basename(file)}.partial-${process.pid}`);
  try {
    await db.backup(partial, { progress: () => ALL_PAGES });
    linkSync(partial, file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw invalidInput(`${file} already exists: give the backup a new name, or remove the file first`);
    if (code === 'EACCES' || code === 'EPERM' || code === 'SQLITE_CANTOPEN') throw invalidInput(`cannot write ${file}: permission denied`);
    throw err;
  } finally {
    rmSync(partial, { force: true });
  }
  // The copy's pages are on disk (SQLite synced them); its name is once the folder is.
  const handle = openSync(folder, 'r');
  try {
    fsyncSync(handle);
  } finally {
    closeSync(handle);
  }
}
