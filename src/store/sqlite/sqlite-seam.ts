import { existsSync, statSync, type Stats } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, type Transaction } from 'kysely';
import { notFound, unavailable } from '../../catalogue/errors.js';
import { CHANGE_LOG_PRUNE_EVERY_MS } from '../change-log.js';
import { createStore } from '../create-store.js';
import type { BulkSeam, SeamHealth, ErrorKind, RequestReads, DatabaseSeam, WritingStatements } from '../seam.js';
import type { Database } from '../schema.js';
import type {
  ListingRequest,
  PageRequest,
  TokenCredential,
  TokenPageRequest,
  TokenWithPage,
  UserCredential,
  VisiblePage,
} from '../records.js';
import type { Store } from '../store.js';
import { GroupCommit } from './group-commit.js';
import { GroupCommitDialect } from './group-commit-dialect.js';
import { classifySqliteError } from './sqlite-errors.js';
import { FileFollower } from './file-follower.js';
import { closeDatabase, holdsPlantStore, openDatabase } from './sqlite-file.js';
import { pruneChangeLog } from './change-log-pruning.js';
import { SqliteImport } from './sqlite-import.js';
import { SqliteReadsAndChanges } from './sqlite-reads.js';
import { SqliteTokenPages } from './sqlite-token-pages.js';
import { backupSqlite } from './sqlite-backup.js';
import { otherProcessesHolding } from './file-holders.js';
import { readinessSql } from '../credential-sql.js';
import { claimDeliveriesSqlite, pruneEventsSqlite, recordOutcomesSqlite } from './sqlite-claims.js';
import { exportSnapshot } from './sqlite-export.js';
import { WritingConnection } from './writing-transactions.js';

export interface SqliteOptions {
  /** A file path, or `:memory:` for a private in-memory database. */
  path: string;
  /** Create the file (and its folders) when it is not there; otherwise its absence is an error. Default true. */
  create?: boolean;
  /**
   * Commit the single-statement writes of concurrent requests together, on a thread of their own (group-commit.ts).
   * Default true; a one-shot command has nothing to group and saves the thread. Not for `:memory:`.
   */
  groupCommit?: boolean;
}

/** What a read answers while the reader's connection is closed (the file is gone, or the store closed). */
const readerClosed = (): never => {
  throw unavailable('database unavailable');
};

/** The embedded default backend: one SQLite file in WAL mode, durable on commit. */
export async function openSqliteStore(options: SqliteOptions): Promise<Store> {
  if (options.create === false && options.path !== ':memory:') {
    if (!existsSync(options.path)) {
      throw notFound(`no database at ${options.path}: check --db (or PLANTSTORE_DB), or create one with "plantstore migrate"`);
    }
    if (!holdsPlantStore(options.path)) {
      throw notFound(`no Plant Store tables in ${options.path}: check --db (or PLANTSTORE_DB), or create them with "plantstore migrate"`);
    }
  }
  const { sqlite, db, migrated } = await openDatabase(options.path, false);
  try {
    return createStore(new SqliteSeam(sqlite, db, options.path, options.groupCommit !== false && options.path !== ':memory:'), migrated);
  } catch (err) {
    await db.destroy();
    throw err;
  }
}

/** Whether a plant a delete removes had grants: in the statement, as SQLite's writers run one at a time. */
const PLANT_SHARED_SQL =
  '(EXISTS (SELECT 1 FROM plant_user_grants g WHERE g.plant_id = plants.id) OR EXISTS (SELECT 1 FROM plant_group_grants g WHERE g.plant_id = plants.id))';

/**
 * SQLite's side of the store (see seam.ts): Kysely on one connection; writing transactions (writing-transactions.ts)
 * on a connection of their own, so that one waiting its turn for the write lock holds up no read of a plant; the
 * request path and the change feed read on a third (sqlite-reads.ts), synchronously.
 */
class SqliteSeam implements DatabaseSeam {
  readonly backend = 'sqlite' as const;
  readonly statements: WritingStatements = {
    transactionIdSql: 'NULL',
    deletedPlantSharedSql: PLANT_SHARED_SQL,
    manyRows: false,
    rowLocks: { change: '', keep: '' },
    // Nothing to do: every statement is prepared, and the writer thread keeps its statements by text.
    prepare: () => undefined,
    claimDeliveries: claimDeliveriesSqlite,
    claimReturnsSent: false,
    recordOutcomes: recordOutcomesSqlite,
    pruneEvents: pruneEventsSqlite,
  };
  readonly changes: SqliteReadsAndChanges;
  private readonly follower: FileFollower | undefined;
  private pruner: NodeJS.Timeout | undefined;
  private closed = false;
  /** With group commit: its thread, started by the first write, and Kysely on it. */
  private commits: GroupCommit | undefined;
  private readonly grouped: Kysely<Database> | undefined;
  /** The writing transactions' connection (a file's; `:memory:` has one connection), opened with the others. */
  private writing: WritingConnection | undefined;
  readonly reads: RequestReads;
  readonly bulk: BulkSeam;
  readonly health: SeamHealth;

  constructor(
    // Not readonly: a file replaced under the store is opened again.
    private sqlite: BetterSqlite3.Database,
    private kysely: Kysely<Database>,
    private readonly path: string,
    groupCommit: boolean,
  ) {
    if (groupCommit) {
      const commits = () => (this.commits ??= new GroupCommit(this.path, () => void this.changes.catchUp()));
      this.grouped = new Kysely<Database>({ dialect: new GroupCommitDialect(commits) });
    }
    // First: should it fail, the caller closes the one connection opened before.
    this.writing = path === ':memory:' ? undefined : new WritingConnection(path);
    this.changes = new SqliteReadsAndChanges(path === ':memory:' ? sqlite : path, () => this.startPruning());
    this.reads = this.readsOfReader();
    this.follower = path === ':memory:' ? undefined : new FileFollower(path, this.fileEvents());
    this.bulk = {
      // Holding Kysely's connection: no transaction of its own can be open on it while the import's runs.
      importing: (run) => this.kysely.connection().execute(() => run(new SqliteImport(this.sqlite))),
      exportSnapshot: () => exportSnapshot(this.sqlite),
      backup: (file) => backupSqlite(this.sqlite, file),
    };
    this.health = {
      ...(this.follower ? { followFile: this.follower.follow.bind(this.follower) } : {}),
      poolStats: () => [],
    };
  }

  get db(): Kysely<Database> {
    return this.kysely;
  }

  get unfollowedWrites(): Kysely<Database> {
    // Without group commit, on the writing transactions' connection: a synchronous write on another connection of
    // this thread, made while one of them waits between its statements, would wait for its lock and hold it up.
    return this.grouped ?? this.writing?.db ?? this.kysely;
  }

  /** A closed connection (the file is gone) makes any error "unavailable". */
  classify(err: unknown): ErrorKind | undefined {
    return classifySqliteError(err) ?? (this.sqlite.open ? undefined : 'unavailable');
  }

  async writeTransaction<T>(run: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    // While the store's connections are closed (the file is gone), on the closed one: "unavailable".
    const result = await (this.writing ? this.writing.transaction(run) : this.kysely.transaction().execute(run));
    await this.changes.catchUp();
    return result;
  }

  /**
   * Group-committed when the store groups writes: the reader takes each batch in before it is answered (a read of
   * the log on this machine, exact, so what the statement says it changed is not needed).
   */
  writeStatement<T>(run: (db: Kysely<Database>) => Promise<T>): Promise<T> {
    return this.grouped === undefined ? this.writeTransaction(run) : run(this.grouped);
  }

  async lock(): Promise<void> {
    // Nothing to do: the store's transactions are writing ones (BEGIN IMMEDIATE), one at a time.
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pruner);
    await this.follower?.stop();
    await this.commits?.close();
    this.changes.close();
    if (this.writing) await closeDatabase(this.writing);
    this.writing = undefined;
    await closeDatabase({ sqlite: this.sqlite, db: this.kysely });
  }

  /** The reader's reads, answering "unavailable" while its connection is closed. */
  private readsOfReader(): RequestReads {
    const reader = this.changes;
    const tokenPages = new SqliteTokenPages(() => (reader.open ? reader : readerClosed()));
    return {
      ping: async () => {
        if (!reader.open) readerClosed();
        this.sqlite.prepare(readinessSql).get();
      },
      findToken: (hash: Buffer): TokenCredential | undefined => (reader.open ? reader.findToken(hash) : readerClosed()),
      findTokenWithPage: (hash: Buffer, page: TokenPageRequest, now: number): Promise<TokenWithPage> => tokenPages.read(hash, page, now),
      findUser: (name: string): UserCredential | undefined => (reader.open ? reader.findUser(name) : readerClosed()),
      visiblePlants: (userId: number, page: ListingRequest, claims: readonly string[]): VisiblePage =>
        reader.open ? reader.listings().listPlantsVisibleTo(userId, page, claims) : readerClosed(),
      allPlants: ({ after, limit }: PageRequest): VisiblePage =>
        reader.open ? reader.listings().listAllPlants(after, limit) : readerClosed(),
      allRows: (after, limit, tag) => (reader.open ? reader.listings().allRows(after, limit, tag) : readerClosed()),
      rememberWriter: async () => {},
    };
  }

  /**
   * A serving process keeps the change log short; CLI commands never prune it. Once the store writes, its writer
   * thread runs the passes (GroupCommit.prune).
   */
  private startPruning(): void {
    if (this.pruner || this.closed) return;
    // Each step through Kysely's hold on the writing transactions' connection, so that none of them is open
    // meanwhile, and the next one after the requests that came meanwhile.
    const step = (now: number): void => {
      if (!this.sqlite.open || this.closed) return;
      if (this.commits) {
        this.commits.prune(now);
        return;
      }
      const writing = this.writing ?? { sqlite: this.sqlite, db: this.kysely };
      writing.db
        .connection()
        .execute(async () => pruneChangeLog(writing.sqlite, now))
        .then((more) => void (more && setImmediate(step, now)))
        .catch(() => {});
    };
    this.pruner = setInterval(() => step(Date.now()), CHANGE_LOG_PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  /**
   * When the file is removed or replaced, the open connections are closed at once (another process creating a new
   * file there would otherwise share its -wal and -shm with a connection to the old one), so no read in between
   * serves the old file; when a file is there again (a restored backup, or one the CLI created), it is opened,
   * migrated and served, and nothing cached from the old file survives.
   */
  private fileEvents() {
    return {
      isOpen: () => this.sqlite.open && !this.closed,
      closeAll: async () => {
        await this.commits?.close();
        this.commits = undefined;
        this.changes.close();
        if (this.writing) await closeDatabase(this.writing);
        this.writing = undefined;
        // The old file's log is emptied into the old file, through the last connection open on it: SQLite keeps the
        // log of a file that moved when that connection closes, and the next connection at the path would replay
        // it over whatever file is there now.
        try {
          this.sqlite.pragma('wal_checkpoint(TRUNCATE)');
        } catch {
          // Refused (another process reads the old file): reopen finds the log and refuses it.
        }
        await closeDatabase({ sqlite: this.sqlite, db: this.kysely });
      },
      reopen: async (path: string, previous: Stats | undefined) => {
        const holders = previous === undefined ? [] : await otherProcessesHolding(previous);
        if (holders.length > 0) {
          throw new Error(
            `the file that was at ${path} before is still open in process ${holders.join(', ')}, which would share ${path}-wal and ${path}-shm with this one: the new file is opened once no process has the old one open`,
          );
        }
        const wal = statSync(`${path}-wal`, { throwIfNoEntry: false });
        // A log written since by another process that has the new file open (a worker of this server that opened
        // it first) is the new file's: no process has the old one open any more, and the first to open the new
        // file checked that the log was empty then.
        const current = statSync(path, { throwIfNoEntry: false });
        const writtenForNewFile = current !== undefined && (await otherProcessesHolding(current)).length > 0;
        if (wal !== undefined && wal.size > 0 && !writtenForNewFile) {
          throw new Error(
            `${path}-wal holds the write-ahead log of the file that was there before, which must not be applied to this one: stop every process that has the old file open, then delete ${path}-wal and ${path}-shm`,
          );
        }
        const { sqlite, db } = await openDatabase(path, true);
        if (this.closed) return closeDatabase({ sqlite, db });
        let writing: WritingConnection;
        try {
          writing = new WritingConnection(path);
        } catch (err) {
          // The file went again: nothing switched, the next look tries anew.
          await closeDatabase({ sqlite, db });
          throw err;
        }
        this.changes.connect(path);
        this.sqlite = sqlite;
        this.kysely = db;
        this.writing = writing;
        this.changes.deliverEverything();
      },
    };
  }
}
