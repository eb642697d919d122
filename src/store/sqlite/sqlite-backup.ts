import { closeSync, existsSync, fchmodSync, fsyncSync, linkSync, openSync, rmSync, statSync } from 'node:fs';
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
  const [partial] = partialBackupFiles(file) as [string];
  try {
    // Made first, with the database's own permissions: the copy holds its token hashes and webhook secrets, and
    // the process's umask would make it readable by every user.
    const made = openSync(partial, 'wx', 0o600);
    try {
      fchmodSync(made, statSync(db.name).mode & 0o777);
    } finally {
      closeSync(made);
    }
    await db.backup(partial, { progress: () => ALL_PAGES });
    linkSync(partial, file);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'EEXIST') throw invalidInput(`${file} already exists: give the backup a new name, or remove the file first`);
    if (code === 'EACCES' || code === 'EPERM' || code === 'SQLITE_CANTOPEN') throw invalidInput(`cannot write ${file}: permission denied`);
    // The copy failed, not the database: named as such, not as a write of the database (sqlite-errors.ts).
    if (typeof code === 'string' && code.startsWith('SQLITE_'))
      throw new Error(`cannot write ${file}: ${(err as Error).message} (${code})`);
    throw err;
  } finally {
    for (const path of partialBackupFiles(file)) rmSync(path, { force: true });
  }
  // The copy's pages are on disk (SQLite synced them); its name is once the folder is.
  const handle = openSync(folder, 'r');
  try {
    fsyncSync(handle);
  } finally {
    closeSync(handle);
  }
}

/**
 * The files of a backup to `file` under way, which a failed or stopped one leaves none of: the copy under its
 * hidden name, and the rollback journal SQLite keeps beside it while writing it.
 */
export function partialBackupFiles(file: string): string[] {
  const partial = join(dirname(file), `.${basename(file)}.partial-${process.pid}`);
  return [partial, `${partial}-journal`];
}
