import type { Awaitable } from '../awaitable.js';
import type { ListingStore, PageRequest, VisiblePage } from '../store/store.js';
import { scope } from './change-scopes.js';

/** The authenticated caller, as far as access rules care. */
export interface Viewer {
  userId: number;
  admin: boolean;
  /** Group names that count like stored memberships for this request (a JWT's groups claim). */
  groups?: readonly string[];
}

/**
 * The access rule of Plant Store. A user sees a plant when the user is an admin, owns it, it is public,
 * it is granted to the user, or it is granted to a group the user belongs to. The listing holds each such
 * plant once, in catalogue order, read a page at a time (plants after `page.after`, at most `page.limit`),
 * so that `limit = k` is exactly the first k plants of the full listing and every page costs about the same.
 * The store evaluates the non-admin branches (store/visible-plants-sql.ts); admins skip the access filter.
 * The page says which groups it counted for the viewer (see `pageScopes`).
 */
export function listVisiblePage(store: ListingStore, viewer: Viewer, page: PageRequest): Awaitable<VisiblePage> {
  if (page.limit === 0) return { json: '[]', ids: [], more: false, groupIds: [], cacheable: true };
  if (viewer.admin) return store.listAllPlants(page, viewer.userId);
  return store.listPlantsVisibleTo(viewer.userId, page, viewer.groups);
}

/**
 * Cache key of what `viewer` may see: admins all see the same; a JWT's groups change what a user sees. The
 * claimed names are written as JSON, so no two lists of names give the same key.
 */
export function viewerKey(viewer: Viewer): string {
  if (viewer.admin) return 'admin';
  return viewer.groups && viewer.groups.length > 0
    ? `${viewer.userId} ${JSON.stringify([...viewer.groups].sort())}`
    : String(viewer.userId);
}

/** What a page of `viewer`'s listing depends on (see change-scopes.ts), given the groups it counted. */
export function pageScopes(viewer: Viewer, groupIds: readonly number[]): string[] {
  if (viewer.admin) return [scope.admins];
  return [scope.user(viewer.userId), ...groupIds.map(scope.group), ...(viewer.groups ?? []).map(scope.groupName)];
}
