import BetterSqlite3 from 'better-sqlite3';
import { ChangeSubscribers, EVERYTHING, type Change, type ChangeBatch, type ChangeFeed, type LoggedTable } from '../change-log.js';
import { metGonePlant, pageFromColumns } from '../listing-sql.js';
import {
  allPlantsSql,
  groupParam,
  pageColumnsSql,
  SQLITE_GROUP_BRANCHES,
  viewerGroupsSql,
  visiblePlantsSql,
} from './sqlite-listing-sql.js';
import type { TokenCredential, UserCredential, VisiblePage } from '../records.js';
import { findTokenSql, findUserSql } from '../credential-sql.js';

/**
 * How old a read snapshot may get before the next read renews it. A change committed by any process is seen
 * by the first read that starts this long after the commit: "the very next request" after a CLI command returns.
 */
const SNAPSHOT_MS = 1;
/** A snapshot nobody renewed for this long is let go, so that checkpoints can move the WAL past it. */
const RELEASE_MS = 2;
/** Listing statements kept prepared, one per limit and shape (see sqlite-listing-sql.ts); the least recently made go first. */
const PREPARED_LISTINGS = 64;

type ChangeRow = [
  seq: number,
  table: string | null,
  userId: number | null,
  groupId: number | null,
  plantId: number | null,
  tokenId: number | null,
  name: string | null,
  isPublic: number | null,
];

type PageColumns = [ids: string, plants: string];

/** The query of a listing's rows (id, name, tag) in id order, at most `limit`; `exact` skips gone plants' positions. */
type Rows = (limit: number, exact?: boolean) => string;

/**
 * Listing statements made on first use, by key, the most recent PREPARED_LISTINGS kept. Each reads one row more
 * than the page holds and answers page columns (see pageColumnsSql): better-sqlite3 builds each row through
 * V8's generic property API, which costs more than the whole index work of a page, and the body would then be
 * serialized again; SQLite's JSON functions build it at once.
 */
class PreparedListings {
  private readonly statements = new Map<string, BetterSqlite3.Statement<unknown[]>>();

  constructor(private readonly db: BetterSqlite3.Database) {}

  /**
   * A page of at most `limit` plants that counted `groupIds`. `rows(limit + 1)` is the query of its rows (id,
   * name, tag) in id order, and `key` names it (with its limit).
   */
  page(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[]): VisiblePage {
    const [ids, plants] = this.get(key, () => pageColumnsSql(rows(limit + 1))).get(params) as PageColumns;
    if (metGonePlant(plants)) return this.exactPage(key, limit, rows, params, groupIds);
    const page = pageFromColumns(ids, plants, limit, groupIds, true);
    if (page) return page;
    // SQLite aggregated the rows out of their order (it does not promise to keep it): the sorting statement.
    const sorted = this.get(`${key} ordered`, () => pageColumnsSql(rows(limit + 1), { ordered: true }));
    const [sortedIds, sortedPlants] = sorted.get(params) as PageColumns;
    return pageFromColumns(sortedIds, sortedPlants, limit, groupIds, true)!;
  }

  /** The page again, its ranges skipping positions of plants that are gone (see metGonePlant in listing-sql.ts). */
  private exactPage(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[]): VisiblePage {
    const exact = this.get(`${key} exact`, () => pageColumnsSql(rows(limit + 1, true), { ordered: true }));
    const [ids, plants] = exact.get(params) as PageColumns;
    return pageFromColumns(ids, plants, limit, groupIds, true)!;
  }

  private get(key: string, sql: () => string): BetterSqlite3.Statement<unknown[]> {
    let statement = this.statements.get(key);
    if (statement === undefined) {
      if (this.statements.size >= PREPARED_LISTINGS) this.statements.delete(this.statements.keys().next().value!);
      statement = this.db.prepare(sql()).raw(true);
      this.statements.set(key, statement);
    }
    return statement;
  }
}

/**
 * The request path of a SQLite store, on a read connection of its own, and its change feed.
 *
 * Reads share one snapshot (a read transaction) for at most `SNAPSHOT_MS`: starting a read transaction costs
 * SQLite locking (fcntl on the -shm file) comparable to a whole page of one or two statements, which each page
 * would otherwise pay. Every renewal also reads the change log from the last row seen, in the same snapshot, and
 * hands what it finds to the subscribers before any read of that snapshot: what a cache drops and what a read
 * returns always agree. Everything here is synchronous: no promise on the request path.
 */
export class SqliteReadsAndChanges implements ChangeFeed {
  private db!: BetterSqlite3.Database;
  private statements!: ReturnType<SqliteReadsAndChanges['prepare']>;
  /** Holds snapshots on a connection of its own; false for an in-memory database, whose only connection is shared. */
  private ownConnection = true;
  private renewedAt = -Infinity;
  private releaseTimer: NodeJS.Timeout | undefined;
  /** The last change-log row delivered. */
  private seen = 0;
  private readonly subscribers = new ChangeSubscribers();
  private firstSync: (() => void) | undefined;

  /**
   * `source`: the database file, or the one connection of a `:memory:` database (then reads run unwrapped).
   * `onFirstSync` runs once, when a request first asks the feed: only serving processes follow the log.
   */
  constructor(source: string | BetterSqlite3.Database, onFirstSync?: () => void) {
    this.connect(source);
    this.firstSync = onFirstSync;
  }

  /** (Re)opens the connection; subscribers stay. After a reconnect the caller delivers `everything`. */
  connect(source: string | BetterSqlite3.Database): void {
    this.close();
    const ownConnection = typeof source === 'string';
    const db = typeof source === 'string' ? new BetterSqlite3(source, { fileMustExist: true }) : source;
    try {
      if (ownConnection) {
        db.pragma('busy_timeout = 5000');
        // This connection never writes: a mistake here cannot change the catalogue.
        db.pragma('query_only = ON');
      }
      this.db = db;
      this.ownConnection = ownConnection;
      this.statements = this.prepare();
      this.seen = db.prepare('SELECT coalesce(max(seq), 0) FROM change_log').pluck().get() as number;
      this.renewedAt = -Infinity;
    } catch (err) {
      if (ownConnection) db.close();
      throw err;
    }
  }

  private prepare() {
    const db = this.db;
    const raw = (sql: string) => db.prepare(sql).raw(true);
    return {
      findToken: raw(findTokenSql('?')),
      findUser: raw(findUserSql('?')),
      listings: new PreparedListings(db),
      groups: raw(viewerGroupsSql(false)),
      groupsWithClaims: raw(viewerGroupsSql(true)),
      // A row with seq -1 first says the log was pruned past what this process has seen.
      changes: raw(
        `SELECT -1, NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM change_log_state WHERE pruned_through > :seen
         UNION ALL SELECT seq, table_name, user_id, group_id, plant_id, token_id, name, is_public FROM change_log WHERE seq > :seen
         ORDER BY 1`,
      ),
      prunedThrough: db.prepare('SELECT pruned_through FROM change_log_state').pluck(true),
    };
  }

  get open(): boolean {
    return this.db.open;
  }

  // ChangeFeed.

  get position(): number {
    return this.subscribers.position;
  }

  sync(): boolean {
    if (this.firstSync) {
      this.firstSync();
      this.firstSync = undefined;
    }
    if (!this.db.open) return false;
    this.snapshot();
    return true;
  }

  subscribe(listener: (batch: ChangeBatch, position: number) => void): void {
    this.subscribers.subscribe(listener);
  }

  /** After a write of this process: the next read takes a new snapshot, and the log is read at once. */
  async catchUp(): Promise<void> {
    if (!this.db.open) return;
    this.renew(performance.now());
  }

  /** Tells every subscriber that anything may have changed (the database file was replaced). */
  deliverEverything(): void {
    this.subscribers.deliver('everything');
  }

  // Request path.

  findToken(hash: Buffer): TokenCredential | undefined {
    this.snapshot();
    const row = this.statements.findToken.get(hash) as [number, number, number, number | null, number | null] | undefined;
    if (!row) return undefined;
    return { tokenId: row[0], userId: row[1], admin: row[2] === 1, expiresAt: row[3], revokedAt: row[4] };
  }

  findUser(name: string): UserCredential | undefined {
    this.snapshot();
    const row = this.statements.findUser.get(name) as [number, number] | undefined;
    return row && { userId: row[0], admin: row[1] === 1 };
  }

  listPlantsVisibleTo(user: number, after: number, limit: number, claims: readonly string[]): VisiblePage {
    this.snapshot();
    const { listings } = this.statements;
    const claimed = claims.length > 0;
    const viewer = claimed ? { user, claims: JSON.stringify(claims) } : { user };
    const [counted, byRange] = (claimed ? this.statements.groupsWithClaims : this.statements.groups).get(viewer) as [string, string];
    const groupIds = JSON.parse(counted) as number[];
    // Small groups' memberships are one range (the member grants); a ranged or claimed group is read range by range.
    const rangedIds = byRange === '[]' ? [] : (JSON.parse(byRange) as number[]);
    if (rangedIds.length <= SQLITE_GROUP_BRANCHES) {
      const params: Record<string, number> = { user, after };
      for (const [i, id] of rangedIds.entries()) params[groupParam(i)] = id;
      const rows: Rows = (n, exact) => visiblePlantsSql(n, rangedIds.length, exact);
      return listings.page(`${limit} ${rangedIds.length}`, limit, rows, params, groupIds);
    }
    const rows: Rows = (n, exact) => visiblePlantsSql(n, 'joined', exact);
    return listings.page(`${limit} joined`, limit, rows, { user, after, ranged: byRange }, groupIds);
  }

  listAllPlants(after: number, limit: number): VisiblePage {
    this.snapshot();
    return this.statements.listings.page(`${limit} all`, limit, (n) => allPlantsSql(n), { after }, []);
  }

  close(): void {
    clearTimeout(this.releaseTimer);
    this.releaseTimer = undefined;
    if (this.db === undefined || !this.db.open) return;
    // A shared connection (:memory:) belongs to the store, which closes it.
    if (this.ownConnection) this.db.close();
  }

  // The snapshot.

  private snapshot(): void {
    const now = performance.now();
    if (now - this.renewedAt >= SNAPSHOT_MS) this.renew(now);
  }

  private renew(now: number): void {
    if (this.ownConnection) {
      if (this.db.inTransaction) this.db.exec('COMMIT');
      this.db.exec('BEGIN');
    }
    this.renewedAt = now;
    // The first read of the transaction fixes its snapshot: the log is read in the snapshot the requests will read.
    const rows = this.statements.changes.all({ seen: this.seen }) as ChangeRow[];
    if (rows.length > 0) {
      if (rows[0]![0] === -1) {
        this.seen = Math.max(this.statements.prunedThrough.get() as number, rows.at(-1)![0]);
        this.subscribers.deliver('everything');
      } else {
        this.seen = rows.at(-1)![0];
        this.subscribers.deliver(rows.map(toChange));
      }
    }
    if (this.ownConnection) this.releaseTimer ??= setTimeout(() => this.release(), RELEASE_MS).unref();
  }

  private release(): void {
    this.releaseTimer = undefined;
    if (!this.db.open || !this.db.inTransaction) return;
    if (performance.now() - this.renewedAt < SNAPSHOT_MS) {
      this.releaseTimer = setTimeout(() => this.release(), RELEASE_MS).unref();
      return;
    }
    this.db.exec('COMMIT');
    this.renewedAt = -Infinity;
  }
}

function toChange([, table, userId, groupId, plantId, tokenId, name, isPublic]: ChangeRow): Change {
  return {
    table: (table ?? EVERYTHING) as LoggedTable | typeof EVERYTHING,
    userId,
    groupId,
    plantId,
    tokenId,
    name,
    isPublic: isPublic === 1,
  };
}
