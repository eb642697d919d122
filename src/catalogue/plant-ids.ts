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

/** A JSON text that may hold a number with a fraction: a decimal point or a negative exponent. */
const MAY_HOLD_FRACTION = /[.]|[eE]-/;
/** A JSON number: its whole digits, its fraction's and its exponent. */
const NUMBER = /-?([0-9]+)(?:\.([0-9]+))?(?:[eE]([+-]?[0-9]+))?/y;

/**
 * What is wrong with the first number of a valid JSON text that is not whole but that a double holds as one, or
 * undefined. Past a double's precision `JSON.parse` drops a fraction (`4503599627370496.5`, `1.0000000000000000001`
 * read as whole numbers), so an id read from it would be one the sender did not write; JSON Schema's `integer` sees
 * only the double. Strings are skipped; a text without a decimal point or a negative exponent is not read at all.
 */
export function fractionLostInParse(json: string): string | undefined {
  const literal = wholeLookingFraction(json);
  if (literal === undefined) return undefined;
  const shown = literal.length > 40 ? `${literal.slice(0, 40)}…` : literal;
  return `the number ${shown} is not a whole number, though JSON parsers read it as ${Number(literal)}: ids are whole numbers from 1 to ${MAX_PLANT_ID}`;
}

function wholeLookingFraction(json: string): string | undefined {
  if (!MAY_HOLD_FRACTION.test(json)) return undefined;
  for (let i = 0; i < json.length; i++) {
    const c = json.charCodeAt(i);
    if (c === 0x22) {
      for (i++; json.charCodeAt(i) !== 0x22; i++) if (json.charCodeAt(i) === 0x5c) i++;
    } else if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      NUMBER.lastIndex = i;
      const [literal, whole, fraction = '', exponent = '0'] = NUMBER.exec(json)!;
      // Whole when no digit but 0 follows the point, moved by the exponent.
      const point = whole!.length + Number(exponent);
      if (!/^0*$/.test((whole! + fraction).slice(Math.max(0, point))) && Number.isInteger(Number(literal))) return literal;
      i += literal.length - 1;
    }
  }
  return undefined;
}
