import type { ListedPlant, PageRequest, Store } from '../store/store.js';

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
 * The store evaluates the non-admin branches; admins skip the access filter entirely.
 */
export async function listVisiblePage(store: Store, viewer: Viewer, page: PageRequest): Promise<ListedPlant[]> {
  if (page.limit === 0) return [];
  return viewer.admin ? store.listAllPlants(page) : store.listPlantsVisibleTo(viewer.userId, page, viewer.groups);
}

/** Cache key of what `viewer` may see: admins all see the same; JWT groups change what a user sees. */
export function viewerKey(viewer: Viewer): string {
  if (viewer.admin) return 'admin';
  return viewer.groups && viewer.groups.length > 0 ? `${viewer.userId}|${[...viewer.groups].sort().join('\u0000')}` : String(viewer.userId);
}
