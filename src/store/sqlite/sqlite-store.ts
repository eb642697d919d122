import { existsSync, statSync, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, type Transaction } from 'kysely';
import type { CatalogueRecord } from '../../import-format/records.js';
import { notFound, unavailable } from '../../domain-errors.js';
import { importCatalogue } from '../catalogue-import.js';
import { exportCatalogue } from '../catalogue-export.js';
import { CHANGE_LOG_PRUNE_EVERY_MS } from '../change-log.js';
import { StoreBase } from '../store-base.js';
import type { Database } from '../schema.js';
import type {
  HotQuery,
  Store,
  ImportProgress,
  ImportSummary,
  NumberedRecord,
  PageRequest,
  TokenCredential,
  UserCredential,
  VisiblePage,
} from '../store.js';
import { openDatabase, pruneChangeLog } from './sqlite-file.js';
import { SqliteReader } from './sqlite-reader.js';
import { SqliteImport } from './sqlite-import.js';

export interface SqliteOptions {
  /** A file path, or `:memory:` for a private in-memory database. */
  path: string;
  /** Create the file (and its folders) when it is not there; otherwise its absence is an error. Default true. */
  create?: boolean;
}

type FileEventListener = Parameters<NonNullable<Store['followFile']>>[1];

/** What a read answers while the reader's connection is closed (the file is gone, or the store closed). */
const readerClosed = (): never => {
  throw unavailable('database unavailable');
};

const sameFile = (a: Stats, b: Stats) => a.dev === b.dev && a.ino === b.ino;

/** The embedded default backend: one SQLite file in WAL mode, durable on commit. */
export class SqliteStore extends StoreBase {
  readonly backend = 'sqlite' as const;
  private closed = false;

  /** The request path and the change feed, on a read connection of their own (see sqlite-reader.ts). */
  private readonly reader: SqliteReader;
  private pruner: NodeJS.Timeout | undefined;
  /** The file followed (followFile); while it is gone the connections are closed, so every read answers 503. */
  private identity: Stats | undefined;
  private watcher: NodeJS.Timeout | undefined;
  private watching: Promise<void> | undefined;
  private onFileEvent: FileEventListener | undefined;
  private lastReopenFailure: string | undefined;

  private constructor(
    private sqlite: BetterSqlite3.Database,
    db: Kysely<Database>,
    private readonly options: SqliteOptions,
  ) {
    super(db, 'sqlite');
    this.reader = new SqliteReader(options.path === ':memory:' ? sqlite : options.path, () => this.startPruning());
  }

  get changes(): SqliteReader {
    return this.reader;
  }

  /** Checks every `intervalMs` that the file at the path is still the one open (see checkFile). The server calls this. */
  followFile(intervalMs: number, onEvent: FileEventListener): void {
    if (this.options.path === ':memory:' || this.watcher) return;
    this.identity = statSync(this.options.path);
    this.onFileEvent = onEvent;
    this.watcher = setInterval(() => {
      this.watching ??= this.checkFile().finally(() => (this.watching = undefined));
    }, intervalMs);
    this.watcher.unref();
  }

  static async open(options: SqliteOptions): Promise<SqliteStore> {
    if (options.create === false && options.path !== ':memory:' && !existsSync(options.path)) {
      throw notFound(`no database at ${options.path}: check --db (or PLANTSTORE_DB), or create one with "plantstore migrate"`);
    }
    const { sqlite, db } = await openDatabase(options.path, false);
    try {
      return new SqliteStore(sqlite, db, options);
    } catch (err) {
      await db.destroy();
      throw err;
    }
  }

  /** A serving process keeps the change log short; CLI commands never prune it. */
  private startPruning(): void {
    if (this.pruner || this.closed) return;
    this.pruner = setInterval(() => {
      if (!this.sqlite.open) return;
      // Through Kysely's hold on the connection, so that no transaction of its own is open meanwhile.
      this.db
        .connection()
        .execute(async () => pruneChangeLog(this.sqlite, Date.now()))
        .catch(() => {});
    }, CHANGE_LOG_PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  /**
   * Follows the file at the path: when it is removed, the open connections are closed (another process creating
   * a new file there would otherwise share its -wal and -shm with a connection to the old one); when a file is
   * there again (a restored backup, or one the CLI created), it is opened, migrated and served.
   */
  private async checkFile(): Promise<void> {
    const { path } = this.options;
    const onFileEvent = this.onFileEvent;
    let current: Stats | undefined;
    try {
      current = await stat(path);
    } catch {
      current = undefined;
    }
    if (this.closed) return;
    if (current && this.identity && sameFile(current, this.identity) && this.sqlite.open) return;
    if (this.sqlite.open) {
      // Closed at once, so no read in between serves the old file; Kysely's destroy then only lets go.
      this.reader.close();
      this.sqlite.close();
      await this.db.destroy();
      onFileEvent?.('gone', current ? `${path} was replaced by another file` : `${path} was removed`);
    }
    if (!current) return;
    try {
      const { sqlite, db } = await openDatabase(path, true);
      if (this.closed) {
        await db.destroy();
        return;
      }
      this.reader.connect(path);
      this.sqlite = sqlite;
      this.db = db;
      this.identity = statSync(path);
      this.lastReopenFailure = undefined;
      // Nothing cached from the old file may survive.
      this.reader.deliverEverything();
      onFileEvent?.('reopened', `${path} reopened`);
    } catch (err) {
      // Said once per distinct reason, not every check.
      const reason = `${path} cannot be opened: ${(err as Error).message}`;
      if (reason !== this.lastReopenFailure) onFileEvent?.('reopen_failed', reason);
      this.lastReopenFailure = reason;
    }
  }

  async ping(): Promise<void> {
    this.read('ping', () => this.sqlite.prepare('SELECT 1').get());
  }

  /** A database that is closed, locked too long, failing I/O, read-only or full is "unavailable" (503). */
  protected isUnavailable(err: unknown): boolean {
    return /^SQLITE_(BUSY|LOCKED|IOERR|CANTOPEN|PROTOCOL|READONLY|FULL)/.test((err as { code?: string }).code ?? '') || !this.sqlite.open;
  }

  /** A hot-path read on the reader's connection (see hotQuery); synchronous. */
  private read<T>(name: HotQuery, query: () => T): T {
    return this.hotQuery(name, this.reader.open ? query : readerClosed);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watcher);
    clearInterval(this.pruner);
    await this.watching;
    this.reader.close();
    if (this.sqlite.open) await this.db.destroy();
  }

  protected async lockNameKey(): Promise<void> {
    // Nothing to do: the store's transactions are writing ones (BEGIN IMMEDIATE), one at a time.
  }

  protected writeStatement<T>(run: (db: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.db.transaction().execute(run);
  }

  protected isUniqueViolation(err: unknown): boolean {
    const code = (err as { code?: string }).code;
    return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
  }

  findToken(hash: Buffer): TokenCredential | undefined {
    return this.read('find_token', () => this.reader.findToken(hash));
  }

  findUser(name: string): UserCredential | undefined {
    return this.read('find_user', () => this.reader.findUser(name));
  }

  listPlantsVisibleTo(userId: number, { after, limit }: PageRequest, extraGroups: readonly string[] = []): VisiblePage {
    return this.read('visible_plants', () => this.reader.listPlantsVisibleTo(userId, after, limit, extraGroups));
  }

  listAllPlants({ after, limit }: PageRequest): VisiblePage {
    return this.read('all_plants', () => this.reader.listAllPlants(after, limit));
  }

  async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    // Holding Kysely's connection: no transaction of its own can be open on it while the import's runs.
    const summary = await this.db.connection().execute(() => importCatalogue(batches, new SqliteImport(this.sqlite), progress));
    await this.changes.catchUp();
    return summary;
  }

  exportRecords(): AsyncGenerator<CatalogueRecord> {
    const db = this.sqlite;
    return exportCatalogue('sqlite', () => {
      // One read transaction: the export is a consistent snapshot even while others write.
      db.exec('BEGIN');
      return {
        rows: <R>(sql: string) => db.prepare(sql).iterate() as Iterable<R>,
        close: () => {
          if (db.inTransaction) db.exec('COMMIT');
        },
      };
    });
  }
}
