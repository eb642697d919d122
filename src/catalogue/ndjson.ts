import { createInterface } from 'node:readline';
import type { Readable } from 'node:stream';
import { Compile } from 'typebox/compile';
import { invalidInput } from '../errors.js';
import type { NumberedRecord } from '../store/store.js';
import { GroupRecord, PlantRecord, UserRecord, type CatalogueRecord } from './records.js';
import { checkGroupName, checkPlantName, checkTag, checkUserName } from './names.js';

const validators = {
  user: Compile(UserRecord),
  group: Compile(GroupRecord),
  plant: Compile(PlantRecord),
} as const;

function describeFirstError(type: keyof typeof validators, value: unknown): string {
  const errors = [...validators[type].Errors(value)];
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
  const record = value as CatalogueRecord;
  switch (record.type) {
    case 'user':
      checkUserName(record.name);
      break;
    case 'group':
      checkGroupName(record.name);
      break;
    case 'plant':
      checkPlantName(record.name);
      if (record.tag !== undefined) checkTag(record.tag);
      break;
  }
  return record;
}

/** Streams records from NDJSON text; blank lines are skipped. Errors name the line. */
export async function* readRecords(input: Readable): AsyncGenerator<NumberedRecord> {
  const lines = createInterface({ input, crlfDelay: Infinity });
  let line = 0;
  for await (const text of lines) {
    line++;
    if (text.trim() === '') continue;
    let value: unknown;
    try {
      value = JSON.parse(text);
    } catch (err) {
      throw invalidInput(`line ${line}: not valid JSON (${(err as Error).message})`);
    }
    let record: CatalogueRecord;
    try {
      record = toRecord(value);
    } catch (err) {
      throw invalidInput(`line ${line}: ${(err as Error).message}`);
    }
    yield { line, record };
  }
}

/** The import error for a reference to a user or group that is neither earlier in the file nor stored. */
export function unknownName(what: 'user' | 'group', name: string, line: number): Error {
  return invalidInput(`line ${line}: no ${what} named "${name}" (define it on an earlier line)`);
}
