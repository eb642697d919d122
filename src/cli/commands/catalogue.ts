import { closeSync, existsSync, fsyncSync, openSync, realpathSync, rmSync, statSync } from 'node:fs';
import { open, rename, type FileHandle } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { once } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import type { Command } from 'commander';
import { invalidInput } from '../../catalogue/errors.js';
import { configFrom, withStore } from '../context.js';
import { databaseFiles } from '../../store/open-store.js';
import { otherProcessesHolding } from '../../store/sqlite/file-holders.js';
import { partialBackupFiles } from '../../store/sqlite/sqlite-backup.js';
import { examples } from '../help.js';
import type { Progress } from '../progress.js';

// The record validator and the progress bar load only when an import or export runs (quick --help).
const loadReader = () => import('../../import-format/ndjson.js');
const loadProgress = () => import('../progress.js');

/** Opens the file first, so a missing or unreadable file is one clear error before anything starts. */
async function openForReading(file: string): Promise<Readable> {
  let handle: FileHandle;
  try {
    handle = await open(file, 'r');
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why =
      code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : String(code);
    throw invalidInput(`cannot read ${file}: ${why}`);
  }
  // Linux opens a directory for reading; only the first read fails (EISDIR), once the import has begun.
  if ((await handle.stat()).isDirectory()) {
    await handle.close();
    throw invalidInput(`cannot read ${file}: is a directory`);
  }
  return handle.createReadStream();
}

/** Writes one line, waiting when the destination is full so memory stays flat on big exports. */
async function writeLine(out: Writable, line: string): Promise<void> {
  if (!out.write(line)) await once(out, 'drain');
}

export function registerCatalogueCommands(program: Command): void {
  program
    .command('import <file>')
    .description('import users, groups and plants from newline-delimited JSON ("-" for stdin); all or nothing')
    .addHelpText(
      'after',
      `
One JSON record a line:
  {"type":"user","name":"alice","admin":false}
  {"type":"group","name":"gardeners","members":["alice","bob"]}
  {"type":"plant","id":1,"name":"Monstera deliciosa","tag":"tropical","owner":"alice","public":false,"sharedWith":["bob","group:gardeners"]}

Examples:
  plantstore import catalogue.ndjson
  plantstore export | plantstore --db other.db import -

A progress bar shows on a terminal; a summary line (counts, seconds, records/s) always ends on stderr.
`,
    )
    .action(importCatalogue);

  program
    .command('export')
    .description('write the whole catalogue as newline-delimited JSON, in the format import reads')
    .option('-o, --output <file>', 'write to a file instead of stdout (`-`: stdout)')
    .addHelpText(
      'after',
      examples('plantstore export -o catalogue.ndjson', 'plantstore export | gzip > catalogue.ndjson.gz') +
        '\nA progress bar shows on a terminal (stderr); a summary line (counts, seconds, records/s) always ends on stderr.\n' +
        'An export is the catalogue, not a backup: tokens and webhook endpoints stay out ("plantstore backup" copies all).\n',
    )
    .action(exportCatalogue);

  program
    .command('backup <file>')
    .description('copy the whole SQLite database (tokens, webhook endpoints and secrets included) to a new file, while it serves')
    .addHelpText(
      'after',
      examples('plantstore backup /var/backups/plants-$(date +%F).db', 'plantstore --db /var/backups/plants-2026-11-27.db users list') +
        `
The copy is the database as it was at one commit, and writers go on meanwhile. <file> must not exist yet.
Restore by serving the copy (--db FILE), or move it into the database's place (see docs/deployment.md).
\`export\` writes users, groups, plants and grants only: no tokens, webhook endpoints, secrets or deliveries.
On PostgreSQL, use pg_dump: the command's error says how.
`,
    )
    .action(backupDatabase);
}

/** `import <file>`: every record in one transaction, with a progress bar by bytes read. */
async function importCatalogue(file: string, _opts: unknown, cmd: Command): Promise<void> {
  const input = file === '-' ? process.stdin : await openForReading(file);
  const [{ readRecordBatches }, { progressBar, summaryLine }] = await Promise.all([loadReader(), loadProgress()]);
  const size = file === '-' ? undefined : statSync(file).size;
  const progress = progressBar('importing', { byRatio: size !== undefined && size > 0 });
  // With a file, the share of bytes read is the honest measure of progress (the record count is unknown).
  // It is read off the stream, not counted with a 'data' listener: that would start the stream flowing
  // while the database opens, and the lines read before the reader attaches would be lost.
  const bytesRead = () => (input as Readable & { bytesRead?: number }).bytesRead ?? 0;
  const started = process.hrtime.bigint();
  // A SQLite file this import creates is removed when it fails: what it leaves then is what was there before.
  const db = configFrom(cmd).store.db;
  const created = db !== ':memory:' && !existsSync(db) ? databaseFiles(db) : [];
  try {
    const summary = await withStore(
      cmd,
      ({ bulk }) =>
        bulk.importRecords(readRecordBatches(input), (records) => progress.update(records, size ? bytesRead() / size : undefined)),
      { create: true },
    ).catch(async (err: unknown) => {
      // Unless another process opened it meanwhile (a server started on the path), whose file it is now too.
      const file = statSync(db, { throwIfNoEntry: false });
      if (file !== undefined && (await otherProcessesHolding(file)).length === 0) for (const path of created) rmSync(path, { force: true });
      throw err;
    });
    progress.stop();
    const records = summary.users + summary.groups + summary.plants;
    const counts = `${summary.users} users, ${summary.groups} groups, ${summary.plants} plants, ${summary.grants} grants`;
    process.stderr.write(`${summaryLine(`imported ${counts}`, records, started)}\n`);
  } finally {
    progress.stop();
    input.destroy();
  }
}

/** Why the export's file could not be written, as the command's one-line error. */
const cannotWrite = (file: string, err: Error) => invalidInput(`cannot write ${file}: ${err.message}`);

/** Whether `file` is one of the database's files (`databaseFiles`), by what they are, not their paths. */
function isDatabaseFile(file: string, db: string): boolean {
  const target = statSync(file, { throwIfNoEntry: false });
  if (target === undefined) return false;
  return databaseFiles(db).some((path) => {
    const part = statSync(path, { throwIfNoEntry: false });
    return part !== undefined && part.dev === target.dev && part.ino === target.ino;
  });
}

/** Where an export writes: the stream, and how it ends once every record is written, or fails. */
interface ExportOutput {
  readonly out: Writable;
  /** Flushes and, for a file written under a hidden name, syncs it and gives it its name. */
  complete(): Promise<void>;
  /** Drops what was written under a hidden name; the file named keeps what it held. */
  discard(): void;
}

/**
 * The export's file, opened before the store is: a path it cannot write is the command's one-line error, and the
 * database the export reads is refused, which opening it for writing would empty before a record was read. A
 * regular file is written under a hidden name beside it and renamed over it once complete, as `backup` does, so
 * an export that fails or is killed leaves the earlier file whole rather than a prefix that imports without
 * complaint; a pipe or a device (`-o /dev/stdout`) is written as it is.
 */
async function openOutput(file: string, db: string): Promise<ExportOutput> {
  if (isDatabaseFile(file, db)) throw invalidInput(`cannot write ${file}: it is the database the export reads (--db ${db})`);
  const existing = statSync(file, { throwIfNoEntry: false });
  if (existing?.isDirectory()) throw invalidInput(`cannot write ${file}: EISDIR: it is a directory`);
  const direct = existing !== undefined && !existing.isFile();
  // A link is followed: the file it names is replaced, and the link stays.
  const replaced = existing?.isFile() ? realpathSync(file) : file;
  const written = direct ? file : join(dirname(replaced), `.${basename(replaced)}.partial-${process.pid}`);
  const unhook = direct ? () => {} : removedIfStopped([written]);
  let out: Writable;
  try {
    const handle = await open(written, direct ? 'w' : 'wx');
    // A file replaced keeps its permissions (one an operator made private stays so).
    if (!direct && existing !== undefined) await handle.chmod(existing.mode & 0o7777);
    out = handle.createWriteStream();
  } catch (err) {
    unhook();
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') throw invalidInput(`cannot write ${file}: no folder ${dirname(file)}`);
    throw cannotWrite(file, err as Error);
  }
  return {
    out,
    async complete() {
      out.end();
      await once(out, 'close');
      if (direct) return;
      syncFile(written);
      await rename(written, replaced);
      unhook();
      syncFile(dirname(replaced));
    },
    discard() {
      out.destroy();
      if (!direct) rmSync(written, { force: true });
      unhook();
    },
  };
}

/** The signals that stop a command. */
const STOPPING = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/**
 * Until the function it returns is called, a command stopped (Ctrl-C, a service manager) removes `paths`, files of
 * its own not complete yet, and ends by the signal as it would have without a handler.
 */
function removedIfStopped(paths: readonly string[]): () => void {
  const stopped = (signal: NodeJS.Signals) => {
    for (const path of paths) rmSync(path, { force: true });
    process.kill(process.pid, signal);
  };
  STOPPING.forEach((signal) => process.once(signal, stopped));
  return () => STOPPING.forEach((signal) => process.off(signal, stopped));
}

/** Flushes a file's data, or a folder's names, to the disk (an fsync applies to the file, whichever descriptor asks). */
function syncFile(path: string): void {
  const fd = openSync(path, 'r');
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** `export`: every record, streamed to stdout or a file. */
async function exportCatalogue(opts: { output?: string }, cmd: Command): Promise<void> {
  const { progressBar, summaryLine } = await loadProgress();
  // `-` is stdout, as `import -` reads stdin.
  const output = opts.output === undefined || opts.output === '-' ? undefined : await openOutput(opts.output, configFrom(cmd).store.db);
  const out: Writable = output?.out ?? process.stdout;
  // A write that fails later (a full disk) is said as the command's error, not as a stream's unhandled 'error'.
  let failed: Error | undefined;
  if (output)
    out.on('error', (err: NodeJS.ErrnoException) => {
      // A path to a pipe (`-o /dev/stdout | head -1`) whose reader goes away: quietly, as stdout's (cli/main.ts).
      if (err.code === 'EPIPE') process.exit(141);
      failed = err;
    });
  const started = process.hrtime.bigint();
  let records = 0;
  try {
    await withStore(cmd, async ({ bulk }) => {
      // The bar starts once the export's snapshot has counted its records.
      const shown: { progress?: Progress } = {};
      try {
        for await (const record of bulk.exportRecords((total) => (shown.progress = progressBar('exporting', { total })))) {
          if (failed) throw cannotWrite(opts.output!, failed);
          await writeLine(out, `${JSON.stringify(record)}\n`);
          // Redrawing is throttled by the bar, but even its bookkeeping is not needed per record.
          if (++records % 512 === 0) shown.progress?.update(records);
        }
      } finally {
        shown.progress?.stop();
      }
    });
    await output?.complete().catch((err: Error) => {
      throw cannotWrite(opts.output!, err);
    });
  } catch (err) {
    output?.discard();
    throw failed ? cannotWrite(opts.output!, failed) : err;
  }
  process.stderr.write(`${summaryLine(`exported ${records} records`, records, started)}\n`);
}

/** `backup <file>`: SQLite's online backup of the whole database, and a summary line. */
async function backupDatabase(file: string, _opts: unknown, cmd: Command): Promise<void> {
  const started = process.hrtime.bigint();
  const unhook = removedIfStopped(partialBackupFiles(file));
  try {
    await withStore(cmd, ({ bulk }) => bulk.backup(file));
  } finally {
    // A signal that came during the copy's one synchronous step is delivered by the next turn's poll, after this
    // resolves: the handler stays until then, so that the command still ends by it (its copy complete by then).
    setImmediate(unhook);
  }
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  process.stderr.write(`backed up to ${file} (${(statSync(file).size / 1e6).toFixed(1)} MB) in ${seconds.toFixed(1)} s\n`);
}
