import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { fail, ok, reason, schemaChecks, skip, warn, type Check } from './check.js';

function canAccess(path: string, mode: number): boolean {
  try {
    accessSync(path, mode);
    return true;
  } catch {
    return false;
  }
}

/** File, permissions, journal mode, integrity, schema and counts of a SQLite database, without changing it. */
export async function sqliteChecks(path: string, webhookAllowPrivate: boolean): Promise<Check[]> {
  if (path === ':memory:') {
    return [warn('database', 'SQLite in memory: everything is lost when the process exits', 'give --db a file path for data that lasts')];
  }
  const file = resolve(path);
  if (!existsSync(file)) return missingFileChecks(file);
  const stats = statSync(file);
  if (!stats.isFile()) return [fail('database', `${file} is not a file`, 'point --db / PLANTSTORE_DB at the SQLite database file')];
  const mode = (stats.mode & 0o777).toString(8).padStart(4, '0');
  if (!canAccess(file, constants.R_OK | constants.W_OK)) {
    return [
      fail(
        'permissions',
        `${file} (mode ${mode}, owner uid ${stats.uid}) is not readable and writable by this user`,
        'run as the owner of the file, or chmod u+rw it',
      ),
    ];
  }
  const permissions = [permissionCheck(file, stats.mode, mode, stats.size)];
  let sqlite: BetterSqlite3.Database;
  try {
    sqlite = new BetterSqlite3(file, { fileMustExist: true });
    sqlite.pragma('busy_timeout = 5000');
  } catch (err) {
    return [
      ...permissions,
      fail('database', `cannot open ${file}: ${reason(err)}`, 'check the path and the permissions of the file and its directory'),
    ];
  }
  try {
    return [...permissions, ...(await openDatabaseChecks(sqlite, file, webhookAllowPrivate))];
  } catch (err) {
    return [
      ...permissions,
      fail('database', `${file}: ${reason(err)}`, 'check that no other program holds a long write lock, then run doctor again'),
    ];
  } finally {
    sqlite.close();
  }
}

/** A database file that is not there yet: fine if it can be created. */
function missingFileChecks(file: string): Check[] {
  let parent = dirname(file);
  while (!existsSync(parent)) parent = dirname(parent);
  // The nearest part of the path that exists is where migrate would make the folders: a file there fails it.
  if (!statSync(parent).isDirectory()) {
    return [
      fail(
        'database',
        `cannot create ${file}: a part of its path is a file, not a folder (${parent})`,
        'point --db / PLANTSTORE_DB at a path whose folders are folders',
      ),
    ];
  }
  if (!canAccess(parent, constants.W_OK)) {
    return [
      fail(
        'database',
        `${file} does not exist and ${parent} is not writable`,
        `create it as a user who may write to ${parent}, or choose another --db`,
      ),
    ];
  }
  return [
    warn(
      'database',
      `${file} does not exist yet`,
      'run "plantstore migrate" to create it (serve also does), or check --db / PLANTSTORE_DB',
    ),
    skip('schema', 'no database file'),
  ];
}

/**
 * The directory and the file's mode, for a file this user can read and write. WAL keeps two files beside the
 * database (-wal, -shm) that every process must be able to create and write.
 */
function permissionCheck(file: string, mode: number, shown: string, size: number): Check {
  const dir = dirname(file);
  if (!canAccess(dir, constants.W_OK)) {
    return fail(
      'permissions',
      `directory ${dir} is not writable, so SQLite cannot create the -wal and -shm files`,
      `make ${dir} writable by this user`,
    );
  }
  if (mode & 0o002) return warn('permissions', `${file} is writable by every user (mode ${shown})`, `chmod o-w ${file}`);
  return ok('permissions', `${file}: mode ${shown}, ${size} bytes, readable and writable`);
}

/** Journal mode, integrity and schema of an open database. */
async function openDatabaseChecks(sqlite: BetterSqlite3.Database, file: string, webhookAllowPrivate: boolean): Promise<Check[]> {
  let journal: string;
  try {
    journal = String(sqlite.pragma('journal_mode', { simple: true }));
  } catch (err) {
    // The first read is where a file that is not a database (or is encrypted) shows itself.
    return [fail('database', `${file}: ${reason(err)}`, 'point --db / PLANTSTORE_DB at a Plant Store SQLite database')];
  }
  const messages = (sqlite.pragma('quick_check(5)', { simple: false }) as { quick_check: string }[]).map((row) => row.quick_check);
  return [
    ok('database', `SQLite ${String(sqlite.prepare('SELECT sqlite_version()').pluck().get())}, ${file}`),
    journal === 'wal'
      ? ok('journal', 'WAL: the server reads while the CLI writes')
      : warn('journal', `journal mode is ${journal}, not WAL`, 'run "plantstore migrate" once, which switches the file to WAL'),
    messages.length === 1 && messages[0] === 'ok'
      ? ok('integrity', 'quick_check found no problems')
      : fail(
          'integrity',
          `quick_check: ${messages.join('; ')}`,
          'stop the service and restore from a backup (or export what can be read and import it into a new file)',
        ),
    ...(await schemaChecks(
      {
        backend: 'sqlite',
        tableExists: async (name) =>
          sqlite.prepare("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?").get(name) !== undefined,
        rows: async (sql) => sqlite.prepare(sql).raw().all() as unknown[][],
      },
      webhookAllowPrivate,
    )),
  ];
}
