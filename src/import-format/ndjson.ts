import type { Readable } from 'node:stream';
import { Compile } from 'typebox/schema';
import { invalidInput } from '../catalogue/errors.js';
import type { NumberedRecord } from './records.js';
import { GroupRecord, PlantRecord, UserRecord, type CatalogueRecord } from './records.js';
import { checkGroupName, checkPlant, checkUserName } from '../catalogue/names.js';

const validators = {
  user: Compile(UserRecord),
  group: Compile(GroupRecord),
  plant: Compile(PlantRecord),
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
  if (type !== 'user' && type !== 'group' && type !== 'plant') {
    throw invalidInput(`"type" must be "user", "group" or "plant", not ${JSON.stringify(type) ?? 'missing'}`);
  }
  if (!validators[type].Check(value)) throw invalidInput(describeFirstError(type, value));
  const record = value;
  switch (record.type) {
    case 'user':
      checkUserName(record.name);
      break;
    case 'group':
      checkGroupName(record.name);
      break;
    case 'plant':
      checkPlant(record);
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
  try {
    return toRecord(value);
  } catch (err) {
    throw invalidInput(`line ${line}: ${(err as Error).message}`);
  }
}

/** The longest line read, in UTF-16 code units: far above any record (a group of 10^6 members is about 20 Mi). */
export const MAX_LINE_LENGTH = 64 * 1024 * 1024;

/**
 * Streams records from NDJSON text (LF or CRLF line ends; blank lines are skipped), one batch per chunk read,
 * so the importer loops over a batch synchronously instead of awaiting every record. Errors name the line. A line
 * that spans chunks is kept in pieces and joined once, so a long one costs its length, not its length times its
 * chunks; one longer than MAX_LINE_LENGTH is refused as soon as it is.
 */
export async function* readRecordBatches(input: Readable): AsyncGenerator<NumberedRecord[]> {
  input.setEncoding('utf8');
  let line = 0;
  /** The line read so far, in pieces, and their length. */
  let pieces: string[] = [];
  let pending = 0;
  const take = (raw: string, batch: NumberedRecord[]) => {
    line++;
    const text = raw.endsWith('\r') ? raw.slice(0, -1) : raw;
    if (text.trim() !== '') batch.push({ line, record: parseLine(text, line) });
  };
  const keep = (piece: string) => {
    pending += piece.length;
    if (pending > MAX_LINE_LENGTH) {
      throw invalidInput(`line ${line + 1}: longer than ${MAX_LINE_LENGTH} characters, which no record is; is the file NDJSON?`);
    }
    pieces.push(piece);
  };
  for await (const text of input as AsyncIterable<string>) {
    const batch: NumberedRecord[] = [];
    let start = 0;
    let end = text.indexOf('\n');
    if (end !== -1 && pieces.length > 0) {
      keep(text.slice(0, end));
      take(pieces.join(''), batch);
      pieces = [];
      pending = 0;
      start = end + 1;
      end = text.indexOf('\n', start);
    }
    for (; end !== -1; end = text.indexOf('\n', start)) {
      take(text.slice(start, end), batch);
      start = end + 1;
    }
    if (start < text.length) keep(text.slice(start));
    if (batch.length > 0) yield batch;
  }
  const last: NumberedRecord[] = [];
  if (pieces.length > 0) take(pieces.join(''), last);
  if (last.length > 0) yield last;
}
