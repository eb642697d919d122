/**
 * What a request's preconditions ask of the version of what it reads or changes (a plant, or its access), as
 * If-Match and If-None-Match carry them (RFC 9110 §13.1.1, §13.1.2): `match`, that it is one of these versions
 * (compared strongly: a weak tag matches nothing); `noneMatch`, that it is none of these (compared weakly), or with
 * `'*'` that there is none, which a thing that exists never meets. A write checks them in the transaction that
 * holds what it changes, so no other write comes between the check and the change.
 */
export interface VersionCondition {
  readonly match?: readonly string[];
  readonly noneMatch?: readonly string[] | '*';
}

/** Which of the two a version fails, If-Match's being evaluated first (RFC 9110 §13.2.2); undefined when it meets both. */
export function failedCondition(condition: VersionCondition | undefined, version: string): 'match' | 'noneMatch' | undefined {
  if (condition === undefined) return undefined;
  if (condition.match !== undefined && !condition.match.includes(version)) return 'match';
  if (condition.noneMatch === '*' || condition.noneMatch?.includes(version)) return 'noneMatch';
  return undefined;
}

/** Whether a version meets the condition (see failedCondition). */
export const conditionHolds = (condition: VersionCondition | undefined, version: string): boolean =>
  failedCondition(condition, version) === undefined;

/**
 * Which of the two fails for a thing that exists and has no version (the plant list, which a create adds to):
 * If-Match naming any tags (only `*` is met), If-None-Match `*`; undefined when neither does.
 */
export function failedWithoutVersion(condition: VersionCondition | undefined): 'match' | 'noneMatch' | undefined {
  if (condition?.match !== undefined) return 'match';
  if (condition?.noneMatch === '*') return 'noneMatch';
  return undefined;
}
