import BetterSqlite3 from 'better-sqlite3';
import { ChangeSubscribers, EVERYTHING, type Change, type ChangeBatch, type ChangeFeed, type LoggedTable } from '../change-log.js';
import { SqliteListingReads } from './sqlite-listing-reads.js';
import type { TokenCredential, UserCredential } from '../records.js';
import { findTokenSql, findUserSql } from '../credential-sql.js';

/**
 * How old a read snapshot may get before the next read renews it. A change committed by any process is seen
 * by the first read that starts this long after the commit: "the very next request" after a CLI command returns.
 */
const SNAPSHOT_MS = 1;
/** A snapshot nobody renewed for this long is let go, so that checkpoints can move the WAL past it. */
const RELEASE_MS = 2;

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
      listings: new SqliteListingReads(db),
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

  /** The listing reads, in a snapshot at most SNAPSHOT_MS old. */
  listings(): SqliteListingReads {
    this.snapshot();
    return this.statements.listings;
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
