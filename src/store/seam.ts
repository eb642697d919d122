import type { Kysely, Transaction } from 'kysely';
import type { Awaitable } from '../awaitable.js';
import type { Change, ChangeFeed } from './change-log.js';
import type { ExportSnapshot } from './catalogue-export.js';
import type { ImportTarget } from './catalogue-import.js';
import type { Backend, Database } from './schema.js';
import type {
  ListingRequest,
  PageRequest,
  PlantRow,
  PoolStats,
  TokenCredential,
  TokenPageRequest,
  TokenWithPage,
  UserCredential,
  VisiblePage,
} from './records.js';
import type { DeliveryClaims } from './webhook-outbox.js';

/**
 * What a database error means to Plant Store: another writer took the key, a row referred to was removed by
 * another writer, two writers waited for each other (one was rolled back and may run again), or the database
 * cannot be reached.
 */
export type ErrorKind = 'unique_violation' | 'foreign_key_violation' | 'deadlock' | 'unavailable';

/**
 * The reads of the request path, each one statement on a connection the backend keeps for them. SQLite answers
 * synchronously, PostgreSQL with a promise: `Awaitable` carries either, so a SQLite request makes no promise.
 */
export interface RequestReads {
  ping(): Awaitable<void>;
  findToken(hash: Buffer): Awaitable<TokenCredential | undefined>;
  /**
   * The token and, read with it, the page of what its user may see when it is active at `now` (epoch ms) and its
   * user no admin (of one tag when the request names one). On PostgreSQL (listings on the primary) in one round trip;
   * on SQLite with the other requests of the event loop's turn, statement by statement (SqliteTokenPages).
   */
  findTokenWithPage?(hash: Buffer, page: TokenPageRequest, now: number): Promise<TokenWithPage>;
  /** The user a JWT names, by user name. */
  findUser(name: string): Awaitable<UserCredential | undefined>;
  /**
   * A page of what user `userId` may see, counting `claims` (group names) like stored memberships: with `tag`, only
   * the plants with that tag; with `withIds`, each plant with its id.
   */
  visiblePlants(userId: number, page: ListingRequest, claims: readonly string[]): Awaitable<VisiblePage>;
  /** A page of every plant; `readerId` is the admin who asks (see `rememberWriter`). */
  allPlants(page: PageRequest, readerId: number): Awaitable<VisiblePage>;
  /** Every plant (with tag `tag` when given) after position `after`, at most `limit`, in catalogue order: an admin's page of one tag, or with ids. */
  allRows(after: number, limit: number, tag: string | undefined): Awaitable<PlantRow[]>;
  /**
   * Called once user `userId`'s own write is committed and taken in: a backend that reads listings from a replica
   * makes sure that user's next listing shows it.
   */
  rememberWriter(userId: number): Promise<void>;
}

/** What a database tells of its own health (health.ts adds the checks common to both). */
export interface SeamHealth {
  /**
   * Embedded backends only: check every `intervalMs` that the database file is still the one open. When it is
   * removed or replaced, reads answer "unavailable" until the file at the path is reopened.
   */
  readonly followFile?: (intervalMs: number, onEvent: (event: 'gone' | 'reopened' | 'reopen_failed', detail: string) => void) => void;
  /** The connection pools' current sizes (none for SQLite, which has one connection). */
  readonly poolStats: () => PoolStats[];
}

/** Import and export of the whole catalogue (the flows are shared: catalogue-import.ts, catalogue-export.ts). */
export interface BulkSeam {
  /** Runs an import on a connection of its own, in one transaction. */
  importing<T>(run: (target: ImportTarget) => Promise<T>): Promise<T>;
  /** A consistent snapshot to export from. */
  exportSnapshot(): Awaitable<ExportSnapshot>;
  /** Writes a copy of the whole database to a new file (see bulk.ts, backup). */
  backup(file: string): Promise<void>;
}

/** What one writing statement changed, and the transaction it ran in (as its `tx` column returned it). */
export interface OwnChanges {
  transaction: string | null | undefined;
  changes: readonly Change[];
  /**
   * False when the statement changed rows beyond `changes` that this process's caches depend on (a cascade's): the
   * write then resolves once the feed has read the log through it, as a write without `changed` does.
   */
  complete?: boolean;
}

/** How a database's writing statements are best built and run: what the shared repositories ask before they write. */
export interface WritingStatements extends DeliveryClaims {
  /**
   * SQL a writing statement returns (RETURNING … AS tx) to name its own transaction as the change log records it
   * (see DatabaseSeam.writeStatement's `changed`): `pg_current_xact_id()` on PostgreSQL, NULL on SQLite.
   */
  readonly transactionIdSql: string;
  /**
   * SQL a delete of plants returns (RETURNING … AS shared) to say whether the plant it removed had grants, whose
   * cascaded rows its writer then reads from the change log: on PostgreSQL read with a snapshot taken after the
   * delete has its row (migration 0023), so that a grant committed while the delete waited counts.
   */
  readonly deletedPlantSharedSql: string;
  /**
   * Whether the writes of one turn of the event loop go faster as one statement of many rows than as a statement
   * each: on PostgreSQL, one round trip instead of many; on SQLite there is no round trip, the group commit puts
   * the statements in one transaction anyway, and a prepared one-row statement run again and again beats a VALUES
   * list of many rows with RETURNING.
   */
  readonly manyRows: boolean;
  /**
   * Marks a statement text that this store runs again and again with new parameters: PostgreSQL then parses and
   * plans it once per connection (a named prepared statement), not at every run.
   */
  prepare(text: string): void;
  /**
   * What a read in a writing transaction ends with to hold the rows it found until the commit, so that a writer
   * beside it waits, and a row another transaction deletes meanwhile is not found: `change` for a row whose
   * dependent rows the transaction will change (PostgreSQL's FOR UPDATE, which also waits for a writer of another
   * tool adding a row that refers to it), `keep` for a row it will refer to (FOR KEY SHARE).
   * Empty on SQLite, whose writing transactions run one at a time.
   */
  readonly rowLocks: { readonly change: string; readonly keep: string };
}

/**
 * Everything that differs between SQLite and PostgreSQL, in one small seam (as Kysely's `Dialect` is): what the
 * shared repositories (repositories/*.ts) run on, how a write is committed, the request path's reads, the change
 * feed, bulk import and export, and the lifetime. create-store.ts composes a Store from it.
 */
export interface DatabaseSeam {
  readonly backend: Backend;
  /** Kysely on the primary database; read anew each time (SQLite reopens a file replaced under it). */
  readonly db: Kysely<Database>;
  /** What `err`, thrown by this database, means; undefined for anything else. */
  classify(err: unknown): ErrorKind | undefined;
  /**
   * Runs `run` in one transaction that writes (SQLite waits its turn for the write lock without blocking the
   * process). Like writeStatement, resolves once the commit is taken in by this process's change feed, so that
   * the next request served here sees it (read-your-writes).
   */
  writeTransaction<T>(run: (trx: Transaction<Database>) => Promise<T>): Promise<T>;
  /**
   * Runs one writing statement as its own unit of work: on PostgreSQL a statement is a transaction, and BEGIN and
   * COMMIT would add two round trips; a serving SQLite store commits the statements of concurrent writes together
   * (group commit). Resolves once committed and taken in by this process's change feed. `changed` says what the
   * statement changed, as the change log records it: a backend whose log is a round trip away takes that in at once,
   * and skips those rows when it reads the log later.
   */
  writeStatement<T>(run: (db: Kysely<Database>) => Promise<T>, changed?: (result: T) => OwnChanges): Promise<T>;
  /**
   * Where writing statements on tables that no cache and no change feed follows (the webhook outbox) run: on a
   * serving SQLite store the group-commit writer, so that their commits share fsyncs with other writes and never
   * block the event loop; elsewhere `db`.
   */
  readonly unfollowedWrites: Kysely<Database>;
  /** How this database's writing statements are best built and run (see WritingStatements). */
  readonly statements: WritingStatements;
  /**
   * Holds, until `trx` ends, every other transaction that locks the same key (PostgreSQL: an advisory lock of this
   * schema; SQLite's writing transactions already run one at a time).
   */
  lock(trx: Transaction<Database>, key: string): Promise<void>;
  readonly reads: RequestReads;
  /** Every committed change, from any writer (see change-log.ts). */
  readonly changes: ChangeFeed;
  readonly bulk: BulkSeam;
  /** Embedded backends follow their file; servers report their pools. */
  readonly health: SeamHealth;
  close(): Promise<void>;
}
