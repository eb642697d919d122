import { ApiError } from './error-codes.js';

/**
 * An If-Match or If-None-Match list of entity tags (RFC 9110, 8.8.3): strong or weak, comma-separated, with the
 * empty elements a recipient must ignore (RFC 9110, 5.6.1.2: `"a", , "b",`).
 */
const ENTITY_TAG = '(?:W\\/)?"[\\x21\\x23-\\x7e\\x80-\\xff]*"';
const ENTITY_TAGS = new RegExp(`^(?:[ \\t]*,)*[ \\t]*${ENTITY_TAG}[ \\t]*(?:,[ \\t]*(?:${ENTITY_TAG}[ \\t]*)?)*$`);

/** The entity tags of a list, each with whether it is weak; a list that is not one is a 400 naming `header`. */
function entityTags(header: string, name: string): Array<{ opaque: string; weak: boolean }> {
  if (!ENTITY_TAGS.test(header)) {
    throw new ApiError(
      'bad_request',
      `${name} must be * or entity tags in double quotes, as the ETag header gives them (such as "v1"), not ${JSON.stringify(header.slice(0, 40))}`,
    );
  }
  return [...header.matchAll(/(W\/)?"([^"]*)"/g)].map((m) => ({ opaque: m[2]!, weak: m[1] !== undefined }));
}

/**
 * The versions an If-Match header names: undefined for none or `*` (the resource exists, or the answer is 404),
 * else its strong entity tags. A weak tag never matches (RFC 9110, 13.1.1), so a header of weak tags only leaves
 * an empty list, which nothing matches.
 */
export function ifMatchVersions(header: string | undefined): string[] | undefined {
  if (header === undefined || header.trim() === '*') return undefined;
  return entityTags(header, 'If-Match')
    .filter((tag) => !tag.weak)
    .map((tag) => tag.opaque);
}

/**
 * Whether an If-None-Match header names the current version `version` (or is `*`): a GET then answers 304. The
 * comparison is weak (RFC 9110, 13.1.2): `W/"v"` matches `"v"`.
 */
export function noneMatchHits(header: string | undefined, version: string): boolean {
  if (header === undefined) return false;
  if (header.trim() === '*') return true;
  return entityTags(header, 'If-None-Match').some((tag) => tag.opaque === version);
}

/** A version as the ETag header carries it. */
export const etagOf = (version: string): string => `"${version}"`;
