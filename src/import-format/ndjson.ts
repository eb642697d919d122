import { isUtf8 } from 'node:buffer';
import { TextDecoder } from 'node:util';
import type { Readable } from 'node:stream';
import { Compile } from 'typebox/schema';
import { invalidInput } from '../catalogue/errors.js';
import { fractionLostInParse } from '../catalogue/plant-ids.js';
import type { NumberedRecord } from './records.js';
import { GroupRecord, PlantRecord, UsedIdsRecord, UserRecord, type CatalogueRecord } from './records.js';
import { checkNewGroupName, checkNewUserName, checkPlant } from '../catalogue/names.js';

const validators = {
  user: Compile(UserRecord),
  group: Compile(GroupRecord),
  plant: Compile(PlantRecord),
  usedIds: Compile(UsedIdsRecord),
} as const;

function describeFirstError(type: keyof typeof validators, value: unknown): string {
  const [, errors] = validators[type].Errors(value);
  // An unknown field is reported twice (as a false schema and as additionalProperties); name it once.
  const first = errors.find((e) => e.keyword === 'additionalProperties') ?? errors[0];
  if (!first) return 'invalid record';
  const where = first.instancePath ? `field ${first.instancePath.slice(1).replaceAll('/', '.')}` : 'record';
  if (first.keyword === 'additionalProperties') {
    const extra = (first.params as { additionalProperties?: string[] }).additionalProperties ?? [];
    return `unknown field ${extra.map((f) => JSON.stringify(f)).join(', ')} in ${type} record`;
  }
  if (first.keyword === 'required') {
    const missing = (first.params as { requiredProperties?: string[] }).requiredProperties ?? [];
    return `${type} record is missing ${missing.map((f) => JSON.stringify(f)).join(', ')}`;
  }
  return `${where} ${first.message}`;
}

/** Validates one parsed JSON value as a catalogue record; the message says what is wrong. */
export function toRecord(value: unknown): CatalogueRecord {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw invalidInput('a record must be a JSON object');
  }
  const type = (value as { type?: unknown }).type;
  if (type !== 'user' && type !== 'group' && type !== 'plant' && type !== 'usedIds') {
    throw invalidInput(`"type" must be "user", "group", "plant" or "usedIds", not ${JSON.stringify(type) ?? 'missing'}`);
  }
  if (!validators[type].Check(value)) throw invalidInput(describeFirstError(type, value));
  const record = value;
  switch (record.type) {
    case 'user':
      checkNewUserName(record.name);
      break;
    case 'group':
      checkNewGroupName(record.name);
      break;
    case 'plant':
      checkPlant(record);
      break;
    case 'usedIds':
      break;
  }
  return record;
}

function parseLine(text: string, line: number): CatalogueRecord {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (err) {
    throw invalidInput(`line ${line}: not valid JSON (${(err as Error).message})`);
  }
  // Only ids are numbers a record takes; a line without one has nothing to lose.
  const numbers = value as { id?: unknown; largest?: unknown } | null;
  const lost = typeof numbers?.id === 'number' || typeof numbers?.largest === 'number' ? fractionLostInParse(text) : undefined;
  if (lost) throw invalidInput(`line ${line}: ${lost}`);
  try {
    return toRecord(value);
  } catch (err) {
    throw invalidInput(`line ${line}: ${(err as Error).message}`);
  }
}

/** The longest line read, in bytes: far above any record (a group of 10^6 members is about 20 MiB). */
export const MAX_LINE_LENGTH = 64 * 1024 * 1024;

const NEWLINE = 0x0a;

/**
 * A blank line: JSON's whitespace only (RFC 8259; LF ends the line). String.trim() strips more (a byte order mark,
 * U+00A0, U+2028, ...), and would skip a line of them, which is no record and not blank, instead of refusing it.
 */
const JSON_BLANK = /^[ \t\r]*$/;

/**
 * Decodes whole lines of UTF-8 (LF never occurs inside a character's bytes). A byte sequence that is not UTF-8 is
 * refused with its line, where a decoder left to replace it would have stored U+FFFD in its place, and made two
 * names that differ by such bytes one.
 */
function decodeLines(decoder: TextDecoder, bytes: Buffer, firstLine: number): string {
  try {
    return decoder.decode(bytes);
  } catch {
    let line = firstLine;
    for (let start = 0; start < bytes.length; line++) {
      const end = bytes.indexOf(NEWLINE, start);
      if (!isUtf8(bytes.subarray(start, end === -1 ? bytes.length : end))) break;
      start = end === -1 ? bytes.length : end + 1;
    }
    throw invalidInput(`line ${line}: not valid UTF-8`);
  }
}

/**
 * Streams records from NDJSON (UTF-8, with or without a byte order mark; LF or CRLF line ends; blank lines are
 * skipped), one batch per chunk read, so the importer loops over a batch synchronously instead of awaiting every
 * record. Errors name the line. Each chunk's whole lines are decoded together; a line that spans chunks is kept in
 * pieces and joined once, so a long one costs its length, not its length times its chunks, and one longer than
 * MAX_LINE_LENGTH is refused as soon as it is.
 */
export async function* readRecordBatches(input: Readable): AsyncGenerator<NumberedRecord[]> {
  const decoder = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });
  let line = 0;
  /** The unfinished line's bytes so far, in pieces, and their length. */
  let pieces: Buffer[] = [];
  let pending = 0;
  const take = (raw: string, batch: NumberedRecord[]) => {
    line++;
    // A byte order mark opening the input (as some Windows editors and tools write UTF-8) is not part of the first
    // record: RFC 8259 lets a parser ignore it.
    const unmarked = line === 1 && raw.startsWith('\uFEFF') ? raw.slice(1) : raw;
    const text = unmarked.endsWith('\r') ? unmarked.slice(0, -1) : unmarked;
    if (!JSON_BLANK.test(text)) batch.push({ line, record: parseLine(text, line) });
  };
  const keep = (piece: Buffer) => {
    pending += piece.length;
    if (pending > MAX_LINE_LENGTH) {
      throw invalidInput(`line ${line + 1}: longer than ${MAX_LINE_LENGTH} bytes, which no record is; is the file NDJSON?`);
    }
    pieces.push(piece);
  };
  const joined = (): Buffer => {
    const bytes = pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces);
    pieces = [];
    pending = 0;
    return bytes;
  };
  for await (const chunk of input as AsyncIterable<Buffer | string>) {
    const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk;
    const firstNewline = bytes.indexOf(NEWLINE);
    if (firstNewline === -1) {
      if (bytes.length > 0) keep(bytes);
      continue;
    }
    keep(bytes.subarray(0, firstNewline));
    const lastNewline = bytes.lastIndexOf(NEWLINE);
    // The chunk's other whole lines, with the newline that ends the first.
    if (lastNewline > firstNewline) pieces.push(bytes.subarray(firstNewline, lastNewline));
    const text = decodeLines(decoder, joined(), line + 1);
    if (lastNewline + 1 < bytes.length) keep(bytes.subarray(lastNewline + 1));
    const batch: NumberedRecord[] = [];
    let start = 0;
    for (let end = text.indexOf('\n'); end !== -1; end = text.indexOf('\n', start)) {
      take(text.slice(start, end), batch);
      start = end + 1;
    }
    take(text.slice(start), batch);
    if (batch.length > 0) yield batch;
  }
  const last: NumberedRecord[] = [];
  if (pieces.length > 0) take(decodeLines(decoder, joined(), line + 1), last);
  if (last.length > 0) yield last;
}
