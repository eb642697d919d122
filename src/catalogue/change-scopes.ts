import { ACCESS_PATH_LIST, seesEverything, type AccessPath, type Viewer } from './access-rule.js';

/**
 * What a cached answer depends on, and what a change can affect, named the same way: the access rule
 * (access-rule.ts) read backwards. A page of user U depends on U (U's own rows in every path keyed by the user,
 * and U's memberships), on each group it counted for U, on the group names a JWT claimed (a group of that name may
 * be created or renamed), and on every public plant; an admin's page depends on every plant. A token check depends
 * on the token and its user's own row (the admin flag, the user being there at all), not on the user's plants,
 * grants or memberships; a JWT's user on that row alone.
 */
export const scope = {
  user: (id: number): string => `user:${id}`,
  /** A user's own row: what a token check or a JWT's user depends on. */
  account: (id: number): string => `account:${id}`,
  group: (id: number): string => `group:${id}`,
  groupName: (name: string): string => `group-name:${name}`,
  token: (id: number): string => `token:${id}`,
  /** Pages of admins, who see every plant. */
  admins: 'admins',
  /** Every page of every viewer: a public plant changed. */
  allPages: 'all-pages',
  /** Anything may have changed: every cache is emptied. */
  everything: '*',
} as const;

/** A committed change as the change log records it (see store/change-log.ts): a table and the keys it names. */
export interface ChangedRow {
  table: string;
  userId: number | null;
  groupId: number | null;
  tokenId: number | null;
  /** The plant's catalogue position, for a row of a plant or of its grants. */
  plantId: number | null;
  name: string | null;
  isPublic: boolean;
}

/** The scope of the viewers one path gives a changed row of its table to, or undefined when the row names none. */
function pathScope(path: AccessPath, change: ChangedRow): string | undefined {
  switch (path.by) {
    case 'public':
      return change.isPublic ? scope.allPages : undefined;
    case 'user':
      return change.userId === null ? scope.everything : scope.user(change.userId);
    case 'group':
      return change.groupId === null ? scope.everything : scope.group(change.groupId);
    default:
      return path.by satisfies never;
  }
}

/** The scopes of the cached answers `change` can make wrong. */
export function scopesOf(change: ChangedRow): string[] {
  const { userId, groupId } = change;
  switch (change.table) {
    case 'users':
      // The admin flag decides the user's pages and credentials alike.
      return userId === null ? [scope.everything] : [scope.user(userId), scope.account(userId)];
    case 'group_members':
      // A membership decides only that user's pages.
      return userId === null ? [scope.everything] : [scope.user(userId)];
    case 'groups':
      return groupId === null
        ? [scope.everything]
        : [scope.group(groupId), ...(change.name === null ? [] : [scope.groupName(change.name)])];
    case 'tokens':
      return change.tokenId === null ? [scope.everything] : [scope.token(change.tokenId)];
  }
  const paths = ACCESS_PATH_LIST.filter((path) => path.table === change.table);
  if (paths.length === 0) return [scope.everything];
  const scopes = new Set<string>();
  // Grantees of a plant are logged as grant rows of their own, so a plant's row names only its own keys.
  for (const path of paths) {
    const named = pathScope(path, change);
    if (named !== undefined) scopes.add(named);
  }
  // Admins see every plant: a plant row that no narrower scope covers reaches their pages.
  if (change.table === 'plants' && !scopes.has(scope.allPages)) scopes.add(scope.admins);
  return [...scopes];
}

/**
 * The one catalogue position whose plant `change` is about, when the access rule makes nothing else depend on it:
 * a row of a plant, or of one of its grants (a path of the rule). A page that ends before that position, or whose
 * next plant comes before it, is the same after the change (plant-listing.ts). Undefined for any other row (a
 * membership, a user's admin flag, a group's name), which can change what a viewer sees anywhere in the catalogue.
 */
export function confinedTo(change: ChangedRow): number | undefined {
  if (change.plantId === null) return undefined;
  return ACCESS_PATH_LIST.some((path) => path.table === change.table) ? change.plantId : undefined;
}

/**
 * Cache key of what `viewer` may see: admins all see the same; a JWT's groups change what a user sees. The
 * claimed names are written as JSON, so no two lists of names give the same key.
 */
export function viewerKey(viewer: Viewer): string {
  if (seesEverything(viewer)) return 'admin';
  return viewer.groups && viewer.groups.length > 0
    ? `${viewer.userId} ${JSON.stringify([...viewer.groups].sort())}`
    : String(viewer.userId);
}

/** What a page of `viewer`'s listing depends on, given the groups it counted. */
export function pageScopes(viewer: Viewer, groupIds: readonly number[]): string[] {
  if (seesEverything(viewer)) return [scope.admins];
  return [scope.user(viewer.userId), ...groupIds.map(scope.group), ...(viewer.groups ?? []).map(scope.groupName)];
}
