import { conflict, invalidInput } from './errors.js';

/**
 * A plant has two numbers, which never mix: its public id (`PlantId`: what the API, the CLI, imports and webhooks
 * show, chosen by whoever adds the plant) and its catalogue position (`Position`: the order plants were added,
 * which only grows; what listings and cursors follow, shown to nobody). Branded, so that passing one where the
 * other is meant does not compile.
 */
declare const brand: unique symbol;
export type PlantId = number & { readonly [brand]: 'PlantId' };
export type Position = number & { readonly [brand]: 'Position' };

/**
 * The largest public id. The original document says int64, but a JSON number holds whole numbers exactly only up
 * to 2^53 - 1, and most clients read ids as JSON numbers: larger ones are refused everywhere.
 */
export const MAX_PLANT_ID = Number.MAX_SAFE_INTEGER;

export const isPlantId = (value: unknown): value is PlantId =>
  typeof value === 'number' && Number.isSafeInteger(value) && value >= 1 && value <= MAX_PLANT_ID;

/** `value` as a public id, or a refusal that names `what` and the range. */
export function plantId(value: number, what = 'plant id'): PlantId {
  if (!isPlantId(value)) throw invalidInput(`invalid ${what} ${value}: expected a whole number from 1 to ${MAX_PLANT_ID}`);
  return value;
}

/** An id typed by a person (a CLI argument): plain decimal digits, from 1 to MAX_PLANT_ID. */
export function parseId(what: string, text: string): number {
  if (!/^[1-9][0-9]{0,15}$/.test(text) || !Number.isSafeInteger(Number(text))) {
    throw invalidInput(`invalid ${what} "${text}": expected a whole number from 1 to ${MAX_PLANT_ID}`);
  }
  return Number(text);
}

/** A plant id typed by a person (see parseId). */
export const parsePlantId = (text: string): PlantId => parseId('plant id', text) as PlantId;

/** A catalogue position read from the database (or a cursor the service issued). */
export const position = (value: number): Position => value as Position;

/**
 * The automatic id of a plant added without one (`plants add` without `--id`, an import record without `id`,
 * plain SQL without `api_id`): one more than the largest id the catalogue has ever used, counting deleted plants,
 * so that an id is never handed out twice and a stale `DELETE` cannot remove a newer plant. `largestUsed` is that
 * largest id (0 for none). Once a plant holds MAX_PLANT_ID, there is no automatic id left: the plant is refused
 * and must be given an id of its own.
 */
export function nextAutomaticId(largestUsed: number): PlantId {
  if (largestUsed >= MAX_PLANT_ID) {
    throw conflict(`no automatic plant id is left (ids up to ${MAX_PLANT_ID} have been used): give the plant an id of its own`);
  }
  return (largestUsed + 1) as PlantId;
}
