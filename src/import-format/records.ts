import type { XStatic } from 'typebox/schema';
import { MAX_PLANT_ID } from '../catalogue/plant-ids.js';

/**
 * The newline-delimited JSON catalogue format read by `plantstore import` and written by `export`.
 * One record a line; a record may refer to users and groups defined on earlier lines or already stored.
 *
 * Plain JSON Schema rather than the TypeBox builder: `import` then loads only TypeBox's schema compiler,
 * which starts faster than the builder and its compiler together.
 */
export const UserRecord = {
  type: 'object',
  properties: {
    type: { const: 'user' },
    name: { type: 'string' },
    admin: { type: 'boolean' },
  },
  required: ['type', 'name'],
  additionalProperties: false,
} as const;

export const GroupRecord = {
  type: 'object',
  properties: {
    type: { const: 'group' },
    name: { type: 'string' },
    members: { type: 'array', items: { type: 'string' } },
  },
  required: ['type', 'name'],
  additionalProperties: false,
} as const;

export const PlantRecord = {
  type: 'object',
  properties: {
    type: { const: 'plant' },
    /** The plant's public id (as in the API); without it, the next automatic id (catalogue/plant-ids.ts). */
    id: { type: 'integer', minimum: 1, maximum: MAX_PLANT_ID },
    name: { type: 'string' },
    tag: { type: 'string' },
    owner: { type: 'string' },
    public: { type: 'boolean' },
    /** User names, or `group:NAME` for a group (`user:NAME` is accepted too). */
    sharedWith: { type: 'array', items: { type: 'string' } },
  },
  required: ['type', 'name', 'owner'],
  additionalProperties: false,
} as const;

/**
 * The largest plant id the catalogue has used, deleted plants' included: automatic ids, for id-less plants after it in
 * the file and for plants added once the import is done, come after it. `export` writes it when a deleted plant's id
 * is larger than every plant's, so that a copy never hands out the id of a plant deleted before the export.
 */
export const UsedIdsRecord = {
  type: 'object',
  properties: {
    type: { const: 'usedIds' },
    largest: { type: 'integer', minimum: 1, maximum: MAX_PLANT_ID },
  },
  required: ['type', 'largest'],
  additionalProperties: false,
} as const;

export type UserRecord = XStatic<typeof UserRecord>;
export type GroupRecord = XStatic<typeof GroupRecord>;
export type PlantRecord = XStatic<typeof PlantRecord>;
export type UsedIdsRecord = XStatic<typeof UsedIdsRecord>;
export type CatalogueRecord = UserRecord | GroupRecord | PlantRecord | UsedIdsRecord;

/** One numbered record of an import stream; `line` is used in error messages. */
export interface NumberedRecord {
  line: number;
  record: CatalogueRecord;
}

/** Records held in memory (the demo, tests) as one import batch, numbered like the lines of a file. */
export async function* recordBatch(records: readonly CatalogueRecord[]): AsyncGenerator<NumberedRecord[]> {
  yield records.map((record, i) => ({ line: i + 1, record }));
}
