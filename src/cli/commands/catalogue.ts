import { createWriteStream, statSync } from 'node:fs';
import { open } from 'node:fs/promises';
import { once } from 'node:events';
import type { Readable, Writable } from 'node:stream';
import type { Command } from 'commander';
import cliProgress from 'cli-progress';
import { readRecords } from '../../catalogue/ndjson.js';
import { invalidInput } from '../../errors.js';
import { withStore } from '../context.js';

/** A progress bar on stderr when it is a terminal; silent otherwise (pipes, CI, tests). */
function progressFor(input: Readable, totalBytes: number | undefined): { update: (records: number) => void; stop: () => void } {
  if (!process.stderr.isTTY) return { update: () => {}, stop: () => {} };
  let bytes = 0;
  input.on('data', (chunk: Buffer) => (bytes += chunk.length));
  const bar = new cliProgress.SingleBar(
    {
      format: totalBytes ? 'importing |{bar}| {percentage}% | {records} records' : 'importing {records} records',
      stream: process.stderr,
      hideCursor: true,
    },
    cliProgress.Presets.shades_classic,
  );
  bar.start(totalBytes ?? 1, 0, { records: 0 });
  return {
    update: (records) => bar.update(totalBytes ? bytes : 0, { records }),
    stop: () => bar.stop(),
  };
}

/** Opens the file first, so a missing or unreadable file is one clear error before anything starts. */
async function openForReading(file: string): Promise<Readable> {
  try {
    const handle = await open(file, 'r');
    return handle.createReadStream();
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    const why = code === 'ENOENT' ? 'no such file' : code === 'EACCES' ? 'permission denied' : code === 'EISDIR' ? 'is a directory' : String(code);
    throw invalidInput(`cannot read ${file}: ${why}`);
  }
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
  {"type":"plant","name":"Monstera deliciosa","tag":"tropical","owner":"alice","public":false,"sharedWith":["bob","group:gardeners"]}

Examples:
  plantstore import catalogue.ndjson
  plantstore export | plantstore --db other.db import -`,
    )
    .action(async (file: string, _opts: unknown, cmd: Command) => {
      const input = file === '-' ? process.stdin : await openForReading(file);
      const size = file === '-' ? undefined : statSync(file).size;
      const progress = progressFor(input, size);
      const started = Date.now();
      try {
        const summary = await withStore(cmd, (store) => store.importRecords(readRecords(input), progress.update));
        progress.stop();
        const seconds = (Date.now() - started) / 1000;
        process.stderr.write(
          `imported ${summary.users} users, ${summary.groups} groups, ${summary.plants} plants, ${summary.grants} grants in ${seconds.toFixed(1)} s\n`,
        );
      } finally {
        progress.stop();
        input.destroy();
      }
    });

  program
    .command('export')
    .description('write the whole catalogue as newline-delimited JSON, in the format import reads')
    .option('-o, --output <file>', 'write to a file instead of stdout')
    .addHelpText('after', '\nExample:\n  plantstore export -o backup.ndjson')
    .action(async (opts: { output?: string }, cmd: Command) => {
      const out: Writable = opts.output === undefined ? process.stdout : createWriteStream(opts.output);
      await withStore(cmd, async (store) => {
        for await (const record of store.exportRecords()) await writeLine(out, `${JSON.stringify(record)}\n`);
      });
      if (out !== process.stdout) {
        out.end();
        await once(out, 'finish');
      }
    });
}
