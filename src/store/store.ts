import type { Actor, PlantDraft, Viewer } from '../catalogue/access-rule.js';
import type { AccessChange, Grantee, PlantAccess } from '../catalogue/plant-access.js';
import type { PlantId, Position } from '../catalogue/plant-ids.js';
import type { TokenLifetime } from '../catalogue/tokens.js';
import type { CatalogueRecord, NumberedRecord } from '../import-format/records.js';
import type { Awaitable } from '../awaitable.js';
import type { ChangeFeed } from './change-log.js';
import type { WebhookOutbox } from './webhook-outbox.js';
import type { Backend } from './schema.js';

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

export interface PlantInfo {
  id: PlantId;
  name: string;
  tag?: string;
  owner: string;
  public: boolean;
  createdAt: Date;
}

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

/** What the hot path needs to know about a user named by a JWT. */
export interface UserCredential {
  userId: number;
  admin: boolean;
}

export interface NewToken {
  user: string;
  hash: Buffer;
  label?: string;
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

/** How many rows the catalogue holds; `grants` counts user and group grants together. */
export interface CatalogueCounts {
  users: number;
  groups: number;
  plants: number;
  grants: number;
  tokens: number;
}

/** The hot-path queries whose durations a store reports (see `Store.timeQueries`). */
export type HotQuery = 'ping' | 'find_token' | 'find_user' | 'visible_plants' | 'all_plants';

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

/** Who a presented token or a JWT's user claim names: the authenticator's whole view of the store. */
export interface CredentialStore {
  // SQLite answers synchronously, PostgreSQL with a promise.
  findToken(hash: Buffer): Awaitable<TokenCredential | undefined>;
  /** The user a JWT names, by user name. */
  findUser(name: string): Awaitable<UserCredential | undefined>;
  /** Finds the user or creates it as an ordinary user (concurrent calls for one name create one user). */
  provisionUser(name: string): Promise<UserCredential>;
}

/** Pages of the listing: what `GET /plants` reads. */
export interface ListingStore {
  /**
   * One page of the plants `viewer` may see (catalogue/access-rule.ts), in catalogue order: those after position
   * `page.after`, at most `page.limit`, and whether more follow. A JWT's claimed groups count like stored
   * memberships; names of no stored group grant nothing. Cost grows with `limit` and the viewer's group count, not
   * the catalogue. The page also says which groups it counted: what a cached copy of it depends on.
   */
  listVisiblePlants(viewer: Viewer, page: PageRequest): Awaitable<VisiblePage>;
}

/** A created plant's id; `existing` when the same plant (same id, owner, name and tag) was there already (a retry). */
export interface CreatedPlant {
  outcome: 'created' | 'existing';
  id: PlantId;
}

/**
 * Plants created and deleted, with the actor's rights (catalogue/access-rule.ts): a user over HTTP, or the
 * operator (the CLI). One create and one delete, whoever asks.
 */
export interface PlantWriteStore {
  /**
   * Creates a plant: a user's own and private, or the operator's with the owner and flag it names. Without an id
   * it gets the next automatic one. The same plant (id, owner, name and tag) already there is `existing` (a
   * retried create); an id taken by another plant is a conflict.
   */
  createPlant(actor: Actor, draft: PlantDraft): Promise<CreatedPlant>;
  /**
   * Deletes the plant with public id `id` when `actor` may change it: 'hidden' when there is no such plant or the
   * actor may not see it, 'forbidden' when the actor sees it but may not change it.
   */
  deletePlant(actor: Actor, id: PlantId): Promise<'deleted' | 'hidden' | 'forbidden'>;
}

/** A plant's access as its owner or an admin reads it, or why the actor may not ('hidden', 'forbidden': see deletePlant). */
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

/**
 * Who has access to a plant, read and changed with the actor's rights (catalogue/access-rule.ts): its owner or an
 * admin over HTTP, or the operator (the CLI). One path whoever asks.
 */
export interface PlantAccessStore {
  readAccess(actor: Actor, id: PlantId): Promise<AccessRead>;
  /**
   * Applies `change` to the access of the plant with public id `id`, when `actor` may change it and, with
   * `ifVersion`, only while the access is at one of those versions (catalogue/plant-access.ts, accessVersion).
   */
  changeAccess(actor: Actor, id: PlantId, change: AccessChange, ifVersion?: readonly string[]): Promise<AccessWrite>;
}

/** The request path: credentials, listings, the plant writes and access, and the change feed its caches follow. */
export interface RequestStore extends CredentialStore, ListingStore, PlantWriteStore, PlantAccessStore {
  /**
   * Every committed change, from any writer, as the change log records it: what the caches follow. Started by
   * its first `sync()`, so CLI commands never follow it.
   */
  readonly changes: ChangeFeed;
}

/** Health checks and observability (metrics); the metrics cost nothing while unused. */
export interface HealthStore {
  readonly backend: Backend;
  /** Resolves when the database answers a trivial query; rejects otherwise. */
  ping(): Promise<void>;
  /**
   * Embedded backends only: check every `intervalMs` that the database file is still the one open. When it is
   * removed or replaced, reads answer "unavailable" until the file at the path is reopened.
   */
  followFile?(intervalMs: number, onEvent: (event: 'gone' | 'reopened' | 'reopen_failed', detail: string) => void): void;
  /** Reports every hot-path query's duration to `timer` from now on; undefined stops it. */
  timeQueries(timer: QueryTimer | undefined): void;
  /** The connection pools' current sizes (none for SQLite, which has one connection). */
  poolStats(): PoolStats[];
}

/** Administration: users, groups, plants, grants and tokens one at a time (the CLI). */
export interface AdminStore extends PlantWriteStore, PlantAccessStore {
  // Users.
  addUser(name: string, admin: boolean): Promise<UserInfo>;
  /** Resolves to false when the user already had that flag. */
  setAdmin(name: string, admin: boolean): Promise<boolean>;
  removeUser(name: string, opts: { withPlants: boolean }): Promise<void>;
  listUsers(): Promise<UserInfo[]>;

  // Groups.
  addGroup(name: string): Promise<GroupInfo>;
  removeGroup(name: string): Promise<void>;
  /** Resolves to false when the user was already a member (nothing changed). */
  addMember(group: string, user: string): Promise<boolean>;
  /** Resolves to false when the user was not a member. */
  removeMember(group: string, user: string): Promise<boolean>;
  listGroups(): Promise<GroupInfo[]>;

  // Plants (created and deleted as PlantWriteStore says).
  listPlants(filter: { owner?: string }): Promise<PlantInfo[]>;

  // Grants: the operator's share and unshare of PlantAccessStore, with what is missing as not_found.
  /** Resolves to false when the plant was already shared so. */
  addGrant(plantId: PlantId, grantee: Grantee): Promise<boolean>;
  /** Resolves to false when the plant was not shared so. */
  removeGrant(plantId: PlantId, grantee: Grantee): Promise<boolean>;
  /** Changes a plant's public flag; resolves to false when it already was so. */
  setPublic(plantId: PlantId, isPublic: boolean): Promise<boolean>;
  listGrants(filter: { plantId?: PlantId }): Promise<GrantInfo[]>;

  // Tokens (only hashes are stored).
  addToken(token: NewToken): Promise<TokenInfo>;
  /** Resolves to false when the token was already revoked; an unknown id is not found. */
  revokeToken(id: number): Promise<boolean>;
  listTokens(filter: { user?: string }): Promise<TokenInfo[]>;
}

/** The whole catalogue at once: import, export and counts. */
export interface BulkStore {
  /** All-or-nothing: either every record is written or none is. Records come in batches, in file order. */
  importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary>;
  /** Streams the whole catalogue in import format, in an order that imports back. */
  exportRecords(): AsyncIterable<CatalogueRecord>;
  /** Row counts, for `doctor` and for sizing the export progress bar. */
  counts(): Promise<CatalogueCounts>;
  /**
   * Writes a copy of the whole database, tokens, webhook endpoints and their secrets included, to `file`, where
   * there must be nothing yet: the database as it was at one commit, made while writers go on. SQLite only; on
   * PostgreSQL an invalid_input error says what to use instead.
   */
  backup(file: string): Promise<void>;
}

/** The new-plant webhook's endpoints and outbox: the CLI registers endpoints, serving processes deliver. */
export interface WebhookStore {
  readonly webhooks: WebhookOutbox;
}

/**
 * A backend (SQLite, PostgreSQL): every role above, and its lifetime. Each consumer depends on the role it
 * uses: the authenticator on CredentialStore, the listing on ListingStore, health routes and metrics on
 * HealthStore, the CLI on AdminStore, BulkStore and WebhookStore. Names identify users and groups; a plant has
 * a public id and a catalogue position (catalogue/plant-ids.ts).
 */
export interface Store extends RequestStore, HealthStore, AdminStore, BulkStore, WebhookStore {
  close(): Promise<void>;
}
