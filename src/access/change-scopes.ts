import { EVERY_SCOPE } from '../cache/scoped-cache.js';
import type { Change } from '../store/change-log.js';

/**
 * What a cached answer depends on, and what a change can affect, named the same way: the access rule of
 * viewer.ts read backwards. A user sees a plant when the user is an admin, owns it, it is public, it is granted
 * to the user, or to a group the user belongs to. So a page of user U depends on U (U's grants, memberships and
 * owned plants all name U), on each group it counted for U (that group's grants), on the group names a JWT
 * claimed (a group of that name may be created or renamed), and on every public plant; an admin's page
 * depends on every plant. A token check depends on the token and its user's own row (the admin flag, the user
 * being there at all), not on the user's plants, grants or memberships; a JWT's user on that row alone.
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
  everything: EVERY_SCOPE,
} as const;

/** The scopes of the cached answers `change` can make wrong. */
export function scopesOf(change: Change): string[] {
  const { userId, groupId } = change;
  switch (change.table) {
    case 'users':
      // The admin flag decides the user's pages and credentials alike.
      return userId === null ? [scope.everything] : [scope.user(userId), scope.account(userId)];
    case 'group_members':
    case 'plant_user_grants':
      // Memberships and direct grants decide only that user's pages.
      return userId === null ? [scope.everything] : [scope.user(userId)];
    case 'groups':
      return groupId === null
        ? [scope.everything]
        : [scope.group(groupId), ...(change.name === null ? [] : [scope.groupName(change.name)])];
    case 'plant_group_grants':
      return groupId === null ? [scope.everything] : [scope.group(groupId)];
    case 'plants':
      // Its grantees are logged as grant rows of their own; a public plant is in every page.
      if (change.isPublic) return [scope.allPages];
      return userId === null ? [scope.everything] : [scope.user(userId), scope.admins];
    case 'tokens':
      return change.tokenId === null ? [scope.everything] : [scope.token(change.tokenId)];
    default:
      return [scope.everything];
  }
}
