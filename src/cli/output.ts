import { fstatSync, statSync } from 'node:fs';
import stringWidth from 'string-width';
import { invalidInput } from '../catalogue/errors.js';

export interface Column<T> {
  header: string;
  value: (row: T) => string;
}

export type OutputFormat = 'json' | 'table' | 'tsv';

/** `--json` wins; otherwise a table for people at a terminal and tab-separated lines for pipes and scripts. */
export function outputFormat(json: boolean, stream: { isTTY?: boolean } = process.stdout): OutputFormat {
  return json ? 'json' : stream.isTTY ? 'table' : 'tsv';
}

const CONTROL_CHARACTER = /[\u0000-\u001f\u007f-\u009f]/g;
const NAMED_ESCAPES: Record<string, string> = { '\t': '\\t', '\n': '\\n', '\r': '\\r' };
/** A control character as PostgreSQL's COPY text format escapes it: by name, else its UTF-8 bytes (`\x1b`, `\xc2\x9b`). */
const escaped = (c: string): string =>
  NAMED_ESCAPES[c] ?? [...Buffer.from(c)].map((byte) => `\\x${byte.toString(16).padStart(2, '0')}`).join('');

// Control characters could move the cursor or recolour the terminal; a name is shown, never interpreted, and
// shown whole: ESC as `\x1b`, not lost.
export const forTerminal = (text: string): string => text.replace(CONTROL_CHARACTER, escaped);

// PostgreSQL COPY text escaping: every row stays one line and every value one field, whatever the names hold, and
// COPY FROM (or any reader of the format) gives back the exact text. Tables show values so too: with the backslash
// left as it is, a name holding a tab and one holding a backslash and a `t` would look the same.
const forTsv = (text: string): string => text.replace(/\\/g, '\\\\').replace(CONTROL_CHARACTER, escaped);

/** Aligned columns under an upper-case header; widths count what the terminal shows (wide and combining characters). */
export function formatTable<T>(rows: T[], columns: Column<T>[]): string {
  const header = columns.map((c) => c.header.toUpperCase());
  const cells = rows.map((row) => columns.map((c) => forTsv(c.value(row))));
  const widths = columns.map((_, i) => Math.max(stringWidth(header[i]!), ...cells.map((r) => stringWidth(r[i]!))));
  const line = (values: string[]) =>
    values
      .map((v, i) => v + ' '.repeat(widths[i]! - stringWidth(v)))
      .join('  ')
      .trimEnd();
  return [header, ...cells].map((values) => `${line(values)}\n`).join('');
}

/** A header line, then one line per row, fields separated by tabs (`cut -f2`, `awk -F'\t'`). */
export function formatTsv<T>(rows: T[], columns: Column<T>[]): string {
  const header = columns.map((c) => c.header.toUpperCase());
  const cells = rows.map((row) => columns.map((c) => forTsv(c.value(row))));
  return [header, ...cells].map((values) => `${values.join('\t')}\n`).join('');
}

/** Prints the rows of a `list` command: JSON array (`--json`), table on a terminal, tab-separated otherwise. */
export function printRows<T extends object>(rows: T[], columns: Column<T>[], json: boolean): void {
  const format = outputFormat(json);
  if (format === 'json') {
    process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
  } else if (format === 'tsv') {
    process.stdout.write(formatTsv(rows, columns));
  } else if (rows.length === 0) {
    process.stderr.write('(none)\n');
  } else {
    process.stdout.write(formatTable(rows, columns));
  }
}

/**
 * Prints one record (`plants show`, the plant a change left): a JSON object (`--json`), else as a list of one row,
 * so that a script reads it as it reads the list.
 */
export function printRecord<T extends object>(row: T, columns: Column<T>[], json: boolean): void {
  if (outputFormat(json) === 'json') process.stdout.write(`${JSON.stringify(row, null, 2)}\n`);
  else printRows([row], columns, false);
}

export const isoDate = (d: Date | undefined): string => (d ? d.toISOString().replace(/\.\d{3}Z$/, 'Z') : '-');

/**
 * An optional text as a column shows it: `-` when there is none, and a text that could be read as that (`-`
 * itself) or as quoted (starting with `"`) as a JSON string, so that no two values look the same.
 */
export const optionalText = (text: string | undefined): string =>
  text === undefined ? '-' : text === '-' || text.startsWith('"') ? JSON.stringify(text) : text;

/**
 * What a command did (or found already done), one line on stderr: stdout carries only data. The names it echoes
 * are shown with their control characters neutralised, as in a table.
 */
export function say(line: string): void {
  process.stderr.write(`${forTerminal(line)}\n`);
}

/**
 * Writes a secret shown only this once (a token, a webhook secret) alone on stdout; rejects when it cannot be
 * written (a full disk, a reader gone). The program's stdout listener (main.ts) would end the process before the
 * caller could undo anything, so it is set aside meanwhile; after a failure the stream is done, and its 'error'
 * event, which follows the callback, only repeats it.
 */
function writeSecret(secret: string): Promise<void> {
  const out = process.stdout;
  const listeners = out.listeners('error') as Array<(err: Error) => void>;
  const repeated = (): void => {};
  out.removeAllListeners('error');
  out.on('error', repeated);
  return new Promise((resolve, reject) => {
    out.write(`${secret}\n`, (err) => {
      if (err) return reject(err);
      out.off('error', repeated);
      for (const listener of listeners) out.on('error', listener);
      resolve();
    });
  });
}

const messageOf = (err: unknown): string => (err instanceof Error ? err.message : String(err));

/**
 * Refuses, before anything is made, to print a new `what` (a token, a webhook secret) that nobody would see: stdout
 * goes to /dev/null, where Node also points a stdout the command was started with closed. Writes there succeed, so
 * showSecretOrUndo could not tell.
 */
export function refuseSecretToNowhere(what: string): void {
  let out, nowhere;
  try {
    out = fstatSync(1);
    nowhere = statSync('/dev/null');
  } catch {
    return;
  }
  if (out.isCharacterDevice() && out.rdev === nowhere.rdev) {
    throw invalidInput(
      `stdout goes to /dev/null (or was closed), so the new ${what} would be shown to nobody; send stdout to a terminal, a file or a variable`,
    );
  }
}

/**
 * Prints `secret`, the only way to use what was just created; when it cannot be printed, nobody will ever have it,
 * so what it opens is undone and the command fails, saying so in its one line (or, if undoing fails too, what to
 * do by hand).
 */
export async function showSecretOrUndo(
  secret: string,
  what: string,
  undo: { run: () => Promise<unknown>; done: string; byHand: string },
): Promise<void> {
  try {
    await writeSecret(secret);
  } catch (err) {
    const failed = `could not write the ${what} to stdout (${messageOf(err)})`;
    try {
      await undo.run();
    } catch (undoErr) {
      throw new Error(`${failed}, nor undo it (${messageOf(undoErr)}): ${undo.byHand}`, { cause: err });
    }
    throw new Error(`${failed}; ${undo.done}`, { cause: err });
  }
}

/**
 * Prints `secret` and only then stores it with `keep`, for a secret that replaces one in use: undoing the
 * replacement would have to bring back what it replaced, so a secret that cannot be printed is never stored, and
 * the command fails, saying that the old one is still in use (`unchanged`).
 */
export async function showSecretThenKeep(secret: string, what: string, keep: () => Promise<unknown>, unchanged: string): Promise<void> {
  try {
    await writeSecret(secret);
  } catch (err) {
    throw new Error(`could not write the ${what} to stdout (${messageOf(err)}); ${unchanged}`, { cause: err });
  }
  await keep();
}
