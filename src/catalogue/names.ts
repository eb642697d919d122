import { remove as withoutConfusables } from 'confusables';
import { conflict, invalidInput } from './errors.js';
import { PLANT_FIELDS, type PlantChange, type PlantFields } from './plant-fields.js';

/** Longest user, group, plant name or tag accepted, in characters (code points, as JSON Schema's maxLength counts). */
export const MAX_NAME_LENGTH = 1024;
/**
 * Longest tag, user or group name, and user name's key (nameKey), in bytes of UTF-8: each is a key of a database
 * index, and PostgreSQL refuses an index entry longer than 2704 bytes, the entry's other columns included. 1024
 * characters of a script outside Latin take up to 4096.
 */
export const MAX_KEY_BYTES = 2048;
/**
 * Control characters (Unicode's Cc): C0, DEL and C1. C1's CSI (U+009B) starts an escape sequence on terminals
 * that take 8-bit controls, as ESC [ does.
 */
export const CONTROL_CHARACTERS = /[\u0000-\u001f\u007f-\u009f]/;
/** Invisible formatting characters (zero-width spaces and joiners, direction marks): a name that looks like another. */
const FORMAT = /\p{Cf}/u;

/** Names and tags are stored and returned byte-exact, so only what cannot round-trip is refused. */
function checkText(what: string, value: string, indexed = false): void {
  if (value.length === 0) throw invalidInput(`${what} must not be empty`);
  // A string's UTF-16 length bounds its characters from above and its UTF-8 bytes to a third: most need no count.
  if (value.length > MAX_NAME_LENGTH && characters(value) > MAX_NAME_LENGTH) {
    throw invalidInput(`${what} is longer than ${MAX_NAME_LENGTH} characters`);
  }
  if (indexed) checkKeyBytes(what, value);
  if (!value.isWellFormed()) throw invalidInput(`${what} contains a lone surrogate and cannot be stored as UTF-8`);
  // PostgreSQL text cannot hold NUL; refusing it everywhere keeps both backends byte-for-byte alike.
  if (value.includes('\u0000')) throw invalidInput(`${what} must not contain the NUL character`);
}

function characters(value: string): number {
  let count = 0;
  for (const _ of value) count++;
  return count;
}

function checkKeyBytes(what: string, value: string, form = ''): void {
  if (value.length * 3 > MAX_KEY_BYTES && Buffer.byteLength(value) > MAX_KEY_BYTES) {
    throw invalidInput(`${what}${form} is longer than ${MAX_KEY_BYTES} bytes of UTF-8`);
  }
}

/**
 * A plant's fields (plant-fields.ts: its name, and its tag when it has one) as a client sends them (`POST /plants`): anything printable
 * (quotes, HTML, any script), but no control characters, which would reach other people's terminals and logs as
 * escape sequences.
 */
export function checkClientPlant(plant: PlantFields): void {
  for (const { name, label, indexed } of PLANT_FIELDS) {
    const value = plant[name];
    if (value !== undefined) checkClientText(label, value, indexed);
  }
}

/**
 * A change of a plant's fields as a client sends it (`PATCH /plants/{id}`): each value given by the rules of
 * checkClientPlant, and no required field removed.
 */
export function checkClientChange(change: PlantChange): void {
  for (const { name, label, required, indexed } of PLANT_FIELDS) {
    const value = change[name];
    if (value === null && required) throw invalidInput(`${label} cannot be removed`);
    if (typeof value === 'string') checkClientText(label, value, indexed);
  }
}

function checkClientText(label: string, value: string, indexed: boolean): void {
  checkText(label, value, indexed);
  if (CONTROL_CHARACTERS.test(value)) throw invalidInput(`${label} must not contain control characters`);
}

/**
 * A plant's fields (its name and tag) as the operator gives them (`plants add`, an import): anything but NUL, control
 * characters included, so that a catalogue exported from any version imports back byte for byte. The CLI shows
 * control characters escaped.
 */
export function checkPlant(plant: PlantFields): void {
  for (const { name, label, indexed } of PLANT_FIELDS) {
    const value = plant[name];
    if (value !== undefined) checkText(label, value, indexed);
  }
}

/** A tag to list by (`plants list --tag`): one a plant can have; an empty one could match nothing, and is a mistake. */
export function checkTagFilter(tag: string): void {
  checkText('tag', tag, true);
}

/**
 * User and group names are identifiers typed by operators: no control characters, no surrounding
 * spaces, and a user name cannot start with `group:`, which marks a group in `sharedWith`.
 */
function checkIdentifier(what: string, name: string): void {
  checkText(what, name, true);
  if (CONTROL_CHARACTERS.test(name)) throw invalidInput(`${what} must not contain control characters`);
  if (FORMAT.test(name)) throw invalidInput(`${what} must not contain invisible formatting characters`);
  if (name.trim() !== name) throw invalidInput(`${what} must not start or end with white space`);
}

/** How an import's `sharedWith` and the CLI mark a grantee's kind: `group:NAME`, and `user:NAME` or a bare name. */
const GROUP_MARK = 'group:';
const USER_MARK = 'user:';

/** A grantee written as `sharedWith` and the CLI write one. */
export function granteeFromText(text: string): { user: string } | { group: string } {
  if (text.startsWith(GROUP_MARK)) return { group: text.slice(GROUP_MARK.length) };
  return { user: text.startsWith(USER_MARK) ? text.slice(USER_MARK.length) : text };
}

/** A grantee as text: `group:NAME`, and a user's bare name, or `user:NAME` when `marked`. */
export function granteeText(grantee: { user: string } | { group: string }, { marked = false } = {}): string {
  if ('group' in grantee) return `${GROUP_MARK}${grantee.group}`;
  return marked ? `${USER_MARK}${grantee.user}` : grantee.user;
}

export function checkUserName(name: string): void {
  checkIdentifier('user name', name);
  if (name.startsWith(GROUP_MARK) || name.startsWith(USER_MARK)) {
    throw invalidInput(`user name must not start with "${GROUP_MARK}" or "${USER_MARK}" (they mark grantees in sharedWith)`);
  }
  // Its key is indexed too, and folding can lengthen a character many times (U+FDFA's 3 bytes become 27).
  checkKeyBytes('user name', nameKey(name), ' as its look-alike key');
}

export function checkGroupName(name: string): void {
  checkIdentifier('group name', name);
}

/**
 * `.` and `..`, escaped (`%2E`) or not, are dot segments: a URL parser (WHATWG's, in fetch and browsers) removes them
 * from `/plants/{id}/access/users/{name}` before the request is sent, so no standard client can share a plant with
 * such a user or group. A new user or group is refused them; one stored before is still found by name (in a body,
 * by the CLI, in a path sent as it is).
 */
function checkNotDotSegment(what: string, name: string): void {
  if (name === '.' || name === '..') {
    throw invalidInput(`${what} must not be "${name}": a URL path cannot carry it (clients remove "." and ".." segments)`);
  }
}

/** A user name for a new user (`users add`, an import, a JWT's provisioned user): checkUserName's rules, and no dot segment. */
export function checkNewUserName(name: string): void {
  checkUserName(name);
  checkNotDotSegment('user name', name);
}

/** A group name for a new group (`groups add`, an import): checkGroupName's rules, and no dot segment. */
export function checkNewGroupName(name: string): void {
  checkGroupName(name);
  checkNotDotSegment('group name', name);
}

/**
 * What a name looks like to a person: compatibility forms folded (NFKC: fullwidth letters, ligatures), look-alike
 * letters of other scripts mapped to the Latin ones they imitate (Unicode's confusables: Cyrillic "а" is "a"),
 * invisible characters dropped, and case ignored. Two names with the same key are told apart by no reader;
 * a user name from an identity provider is refused when its key is that of another user (see provisionUser).
 */
export function nameKey(name: string): string {
  return withoutConfusables(name.normalize('NFKC')).normalize('NFKC').toLowerCase();
}

/** The refusal of a user name that looks like another's: the same words on every path that adds users. */
export const lookalikeName = (name: string, other: string) =>
  conflict(`user name "${name}" looks like that of the user "${other}"; choose a name that does not`);
