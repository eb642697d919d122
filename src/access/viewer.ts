import type { Plant, Store } from '../store/store.js';

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
 * plant once, in catalogue order, and `limit = k` is exactly the first k plants of the full listing.
 * The store evaluates the non-admin branches in one query; admins skip the access filter entirely.
 */
export async function listVisiblePlants(store: Store, viewer: Viewer, limit: number | undefined): Promise<Plant[]> {
  if (limit === 0) return [];
  return viewer.admin ? store.listAllPlants(limit) : store.listPlantsVisibleTo(viewer.userId, limit, viewer.groups);
}
