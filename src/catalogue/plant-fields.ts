import { createHash } from 'node:crypto';
import { invalidInput } from './errors.js';

/**
 * What a plant says of itself, beyond its id, owner and public flag: its name and its tag. Each field is a text
 * column of `plants` with the same name (null when absent), and goes everywhere a plant goes (created, listed for
 * the operator, checked, imported and exported) by this one list. A field added here is a column added in a
 * migration, in the schema's types, in the import format's record and in the CLI's flags; nothing else.
 */
export const PLANT_FIELDS = [
  { name: 'name', label: 'plant name', required: true, indexed: false },
  // A tag keys the indexes that pages of one tag are read by, which bound its size (names.ts, MAX_KEY_BYTES).
  { name: 'tag', label: 'tag', required: false, indexed: true },
] as const;

type Field = (typeof PLANT_FIELDS)[number];
type Required = Extract<Field, { required: true }>['name'];
type Optional = Extract<Field, { required: false }>['name'];

/** A plant's fields as values: the required ones always, the optional ones when the plant has them. */
export type PlantFields = { [F in Required]: string } & { [F in Optional]?: string };

/** The fields' columns of a plant's row: null for an optional field the plant does not have. */
export type FieldColumns = { [F in Required]: string } & { [F in Optional]: string | null };

/** The fields' column names, in PLANT_FIELDS' order. */
export const FIELD_NAMES: ReadonlyArray<Field['name']> = PLANT_FIELDS.map(({ name }) => name);

/** The fields' columns, with their table's alias: what a query selects. */
export const fieldSelection = <A extends string>(alias: A): Array<`${A}.${Field['name']}`> =>
  FIELD_NAMES.map((name) => `${alias}.${name}` as const);

/** A plant's fields as the columns of its row, in PLANT_FIELDS' order. */
export function fieldColumns(plant: PlantFields): FieldColumns {
  const columns: Record<string, string | null> = {};
  for (const name of FIELD_NAMES) columns[name] = plant[name] ?? null;
  return columns as FieldColumns;
}

/** A plant's fields as its row's values, in PLANT_FIELDS' order: what the import writers write. */
export const fieldValues = (plant: PlantFields): Array<string | null> => FIELD_NAMES.map((name) => plant[name] ?? null);

/** A plant's fields from its row: an optional field is left out when its column is null. */
export function fieldsOfRow(row: FieldColumns): PlantFields {
  const fields: Record<string, string> = {};
  for (const name of FIELD_NAMES) {
    const value = row[name];
    if (value !== null) fields[name] = value;
  }
  return fields as PlantFields;
}

/** Whether two plants' fields are the same: a retried create. */
export const sameFields = (a: PlantFields, b: PlantFields): boolean => FIELD_NAMES.every((name) => a[name] === b[name]);

/**
 * A change of a plant's fields as JSON Merge Patch (RFC 7396) gives it: a field absent is kept, a value replaces
 * it, and null removes an optional field (a required one cannot be removed: see changedFields).
 */
export type PlantChange = { [F in Required]?: string } & { [F in Optional]?: string | null };

/** The fields after `change`; a required field set to null is refused like any value the rules refuse. */
export function changedFields(current: PlantFields, change: PlantChange): PlantFields {
  const next: Record<string, string> = {};
  for (const { name, label, required } of PLANT_FIELDS) {
    const asked = (change as Record<string, string | null | undefined>)[name];
    const value = asked === undefined ? current[name] : asked;
    if (value === null || value === undefined) {
      if (required) throw invalidInput(`${label} cannot be removed`);
      continue;
    }
    next[name] = value;
  }
  return next as PlantFields;
}

/**
 * A plant's version, as its ETag carries it: a digest of what `GET /plants/{id}` shows (its id and fields), so
 * that every process and instance gives one plant the same tag without storing one.
 */
export function plantVersion(id: number, fields: PlantFields): string {
  return createHash('sha256')
    .update(JSON.stringify([id, ...fieldValues(fields)]))
    .digest('base64url')
    .slice(0, 27);
}
