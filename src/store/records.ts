import type { Grantee, PlantAccess } from '../catalogue/plant-access.js';
import type { PlantFields } from '../catalogue/plant-fields.js';
import type { PlantId, Position } from '../catalogue/plant-ids.js';
import type { TokenLifetime } from '../catalogue/tokens.js';

// The records the store's roles (store.ts) take and give: plain data, the same on both databases.

export type { Awaitable } from '../awaitable.js';

export interface UserInfo {
  id: number;
  name: string;
  admin: boolean;
  createdAt: Date;
}

export interface GroupInfo {
  id: number;
  name: string;
  members: string[];
  createdAt: Date;
}

export type PlantInfo = PlantFields & {
  id: PlantId;
  owner: string;
  public: boolean;
  createdAt: Date;
};

export type { Grantee } from '../catalogue/plant-access.js';

export interface GrantInfo {
  plantId: PlantId;
  plantName: string;
  grantee: Grantee;
}

export interface TokenInfo {
  id: number;
  user: string;
  label?: string;
  createdAt: Date;
  expiresAt?: Date;
  revokedAt?: Date;
}

/** Keyset paging: plants after catalogue position `after` (0 for the start), at most `limit` of them. */
export interface PageRequest {
  after: number;
  limit: number;
}

/**
 * A page of a listing as a client may narrow and widen it beyond the contract's: only the plants with tag `tag`,
 * and each plant with its public id (`withIds`: `NewPlant` objects instead of `Plant`).
 */
export interface ListingRequest extends PageRequest {
  tag?: string;
  withIds?: boolean;
}

/** A page a token's read may bring along (RequestReads.findTokenWithPage): the contract's page, or one tag's. */
export type TokenPageRequest = Omit<ListingRequest, 'withIds'>;

/** One plant as an admin's filtered page reads it (store/listing.ts): its catalogue position, public id and fields. */
export interface PlantRow {
  position: Position;
  id: number;
  name: string;
  tag: string | null;
}

/** One page of a listing, and what a cached copy of it would depend on. */
export interface VisiblePage {
  /**
   * The plants as the response body lists them: a JSON array of the contract's Plant objects (`name`, and `tag`
   * when the plant has one), in catalogue order, built by the database (see listing-sql.ts).
   */
  json: string;
  /** Their catalogue positions, in the same order: how many there are, and where the next page starts. */
  ids: readonly Position[];
  /** Whether the listing goes on after this page. */
  more: boolean;
  /**
   * When more follow, the position of the first plant after the page (read to know that more follow): the page,
   * and whether more follow, depend on the catalogue up to it and on nothing beyond.
   */
  next: Position | undefined;
  /** The groups the page counted for the user (none for an admin's page). */
  groupIds: readonly number[];
  /**
   * False when the page may predate a change already delivered by the change feed: read from a replica that
   * has not replayed that far yet. It is served (that is replica lag) but never cached.
   */
  cacheable: boolean;
}

/** What the hot path needs to know about a presented token. */
export interface TokenCredential extends TokenLifetime {
  tokenId: number;
  userId: number;
  admin: boolean;
}

/**
 * A stored token and, read with it, the page its user asked for (RequestReads.findTokenWithPage): none for an
 * unknown token, one not active at the time given, an admin's, or one the backend reads apart.
 */
export interface TokenWithPage {
  credential: TokenCredential | undefined;
  page: VisiblePage | undefined;
}

/** What the hot path needs to know about a user named by a JWT. */
export interface UserCredential {
  userId: number;
  admin: boolean;
}

export interface NewToken {
  user: string;
  hash: Buffer;
  label?: string;
  /** When it is made: now when absent; given, so that an expiry reckoned from it is its lifetime exactly. */
  createdAt?: Date;
  expiresAt?: Date;
}

export interface ImportProgress {
  (recordsDone: number): void;
}

export interface ImportSummary {
  users: number;
  groups: number;
  plants: number;
  grants: number;
}

/** The hot-path queries whose durations a store reports (see `Store.timeQueries`). */
export type HotQuery = 'ping' | 'find_token' | 'find_token_with_page' | 'find_user' | 'visible_plants' | 'all_plants' | 'filtered_plants';

/** Receives a hot-path query's duration in seconds, failed queries included. */
export type QueryTimer = (query: HotQuery, seconds: number) => void;

/** A connection pool's size at one moment, for metrics. */
export interface PoolStats {
  /** `primary`; the listings' pool: `replica` for the read replica's, else `listings` (the primary's). */
  pool: 'primary' | 'replica' | 'listings';
  /** Open connections, busy or idle. */
  total: number;
  idle: number;
  /** Queries waiting for a connection. */
  waiting: number;
}

/** A created plant's id; `existing` when the same plant (same id, owner, name and tag) was there already (a retry). */
export interface CreatedPlant {
  outcome: 'created' | 'existing';
  id: PlantId;
}

/** A plant as one who sees it reads it: its public id and its fields. */
export type PlantRecord = PlantFields & { id: PlantId };

/** One plant read with an actor's rights: 'hidden' when there is none or the actor may not see it. */
export type PlantRead = { outcome: 'read'; plant: PlantRecord } | { outcome: 'hidden' };

/**
 * What a change of a plant's fields did: `changed` or `unchanged` (it already was so), with the plant it left;
 * `stale` when the plant was no longer at a version the actor named (with the plant as it stands); `hidden` or
 * `forbidden` as for a delete.
 */
export type PlantWrite = { outcome: 'changed' | 'unchanged' | 'stale'; plant: PlantRecord } | { outcome: 'hidden' | 'forbidden' };

/** What a delete on condition of a version did: as a delete, or `stale` with the plant as it stands, which stays. */
export type PlantDeletion = { outcome: 'deleted' | 'hidden' | 'forbidden' } | { outcome: 'stale'; plant: PlantRecord };

/** A plant's access as its owner or an admin reads it, or why the actor may not ('hidden', 'forbidden': as for a delete, repositories/plants.ts). */
export type AccessRead = { outcome: 'read'; access: PlantAccess } | { outcome: 'hidden' | 'forbidden' };

/**
 * What a change of a plant's access did: `changed` or `unchanged` (it already was so), with the access it left;
 * `hidden` or `forbidden` as for a delete; `stale` when the access was no longer at a version the actor named
 * (with the access as it stands); `unknown` when a name given is of no user or group (nothing changed).
 */
export type AccessWrite =
  | { outcome: 'changed' | 'unchanged' | 'stale'; access: PlantAccess }
  | { outcome: 'hidden' | 'forbidden' }
  | { outcome: 'unknown'; grantees: Grantee[] };
