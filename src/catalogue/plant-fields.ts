/**
 * What a plant says of itself, beyond its id, owner and public flag: its name and its tag. Each field is a text
 * column of `plants` with the same name (null when absent), and goes everywhere a plant goes (created, listed for
 * the operator, checked, imported and exported) by this one list. A field added here is a column added in a
 * migration, in the schema's types, in the import format's record and in the CLI's flags; nothing else.
 */
export const PLANT_FIELDS = [
  { name: 'name', label: 'plant name', required: true },
  { name: 'tag', label: 'tag', required: false },
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
