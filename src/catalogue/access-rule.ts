import { invalidInput } from './errors.js';
import type { PlantFields } from './plant-fields.js';

/**
 * The access rule of Plant Store, in one place: who sees a plant and who may change it.
 *
 * A user sees a plant when the user is an admin, owns it, it is public, it is shared with the user, or it is
 * shared with a group the user belongs to (stored memberships, and for one request the groups a JWT's groups
 * claim names). Its owner and admins may delete it; a user who sees it otherwise may not.
 *
 * Everything that applies the rule derives from ACCESS_PATHS: the listing statements of both databases and the
 * delete check (store/listing-sql.ts) and what a change can make stale in a cache (change-scopes.ts). Each of them
 * switches over `AccessPath['by']` exhaustively, so a new kind of path does not compile until each handles it.
 */

/** The authenticated caller, as far as access cares. */
export interface Viewer {
  userId: number;
  admin: boolean;
  /** Group names that count like stored memberships for this request (a JWT's groups claim). */
  groups?: readonly string[];
}

/** The operator at the command line (the CLI, an import): may do anything to any plant. */
export const OPERATOR = Object.freeze({ operator: true } as const);
export type Operator = typeof OPERATOR;

/** Who asks for a change: a user over HTTP, with that user's rights, or the operator. */
export type Actor = Viewer | Operator;

export const isOperator = (actor: Actor): actor is Operator => 'operator' in actor;

/**
 * One way a user who is not an admin sees a plant, as the index range the catalogue keeps for it: the rows of
 * `table` whose `key` column matches the viewer (`by`), in catalogue order (their `position` column), so that a
 * page reads about `limit` entries of each range whatever the size of the catalogue.
 * - `by: 'public'`: the key is 1 for every viewer (a flag of the plant);
 * - `by: 'user'`: the key is the viewer's user id;
 * - `by: 'group'`: the key is one of the viewer's groups.
 */
export interface AccessPath {
  readonly table: 'plants' | 'plant_user_grants' | 'plant_group_grants';
  readonly position: 'id' | 'plant_id';
  readonly key: string;
  readonly by: 'public' | 'user' | 'group';
}

export const ACCESS_PATHS = {
  public: { table: 'plants', position: 'id', key: 'is_public', by: 'public' },
  owner: { table: 'plants', position: 'id', key: 'owner_id', by: 'user' },
  sharedWithUser: { table: 'plant_user_grants', position: 'plant_id', key: 'user_id', by: 'user' },
  sharedWithGroup: { table: 'plant_group_grants', position: 'plant_id', key: 'group_id', by: 'group' },
} as const satisfies Record<string, AccessPath>;

export type AccessPathName = keyof typeof ACCESS_PATHS;

/** The paths in the order the listing statements read them. */
export const ACCESS_PATH_LIST: readonly AccessPath[] = Object.values(ACCESS_PATHS);

/** Admins skip the filter: they see every plant. */
export const seesEverything = (viewer: Viewer): boolean => viewer.admin;

/** Which plants `actor` may change (delete, or later share): every plant (the operator, an admin), or its own. */
export function changeablePlants(actor: Actor): { every: true } | { ownedBy: number } {
  return isOperator(actor) || actor.admin ? { every: true } : { ownedBy: actor.userId };
}

/** Whether `actor` may change the plant owned by `ownerId` (see changeablePlants). */
export function mayChangePlant(actor: Actor, ownerId: number): boolean {
  const changeable = changeablePlants(actor);
  return 'every' in changeable || changeable.ownedBy === ownerId;
}

/** A new plant as an actor asks for it: a user's is the user's own and private; the operator names both. */
export type PlantDraft = PlantFields & {
  /** Its public id; without one, the next automatic id (see plant-ids.ts). */
  id?: number;
  /** The owner's name: given by the operator only (a user's plant is the user's). */
  owner?: string;
  /** Only the operator makes a plant public; a user's is private and shared with nobody. */
  public?: boolean;
};

/**
 * Who owns a new plant, by the actor's rights: a user's plant is the user's own and private; the operator names
 * the owner and may make it public.
 */
export function newPlantOwner(actor: Actor, draft: PlantDraft): { userId: number } | { name: string } {
  if (isOperator(actor)) {
    if (draft.owner === undefined) throw invalidInput('a plant needs an owner');
    return { name: draft.owner };
  }
  if (draft.owner !== undefined || draft.public === true) throw invalidInput("only an operator chooses a plant's owner or makes it public");
  return { userId: actor.userId };
}
