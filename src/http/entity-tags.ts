import { failedCondition, type VersionCondition } from '../catalogue/version-conditions.js';
import { ApiError, type ErrorName } from './error-codes.js';

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
function ifMatchVersions(header: string | undefined): string[] | undefined {
  if (header === undefined || header.trim() === '*') return undefined;
  return entityTags(header, 'If-Match')
    .filter((tag) => !tag.weak)
    .map((tag) => tag.opaque);
}

/** The versions an If-None-Match header names, weak ones too (RFC 9110, 13.1.2: `W/"v"` matches `"v"`), or `*`. */
function ifNoneMatchVersions(header: string | undefined): string[] | '*' | undefined {
  if (header === undefined) return undefined;
  if (header.trim() === '*') return '*';
  return entityTags(header, 'If-None-Match').map((tag) => tag.opaque);
}

/**
 * A request's If-Match and If-None-Match as one condition on the version of what it reads or changes
 * (catalogue/version-conditions.ts); undefined with neither, or with `If-Match: *` alone (the thing exists, or the
 * answer is 404). A header that is not `*` or a list of entity tags is a 400 naming it.
 */
export function versionCondition(headers: { 'if-match'?: string; 'if-none-match'?: string }): VersionCondition | undefined {
  const match = ifMatchVersions(headers['if-match']);
  const noneMatch = ifNoneMatchVersions(headers['if-none-match']);
  if (match === undefined && noneMatch === undefined) return undefined;
  return { ...(match === undefined ? {} : { match }), ...(noneMatch === undefined ? {} : { noneMatch }) };
}

/**
 * The 412 (`name`, a code of its own per resource) of a request about `what` (`plant 3`, `the access of plant 3`)
 * whose `version` does not meet `condition` (see failedCondition), with that version as its ETag: with If-Match
 * failed, read it again (at `readAt`) and `then`.
 */
export function preconditionFailed(
  name: ErrorName,
  what: string,
  version: string,
  condition: VersionCondition | undefined,
  { readAt, then }: { readAt: string; then: string },
): ApiError {
  const message =
    failedCondition(condition, version) === 'noneMatch'
      ? `${what} is at a version If-None-Match names (\`*\` names any): nothing was done`
      : `${what} is no longer at the version If-Match names: read it again (GET ${readAt}, or this answer's ETag) and ${then}`;
  return new ApiError(name, message, { etag: etagOf(version) });
}

/** A version as the ETag header carries it. */
export const etagOf = (version: string): string => `"${version}"`;
