import type BetterSqlite3 from 'better-sqlite3';
import {
  Kysely,
  SqliteDialect,
  SqliteDriver,
  type DatabaseConnection,
  type Driver,
  type SqliteDatabase,
  type SqliteDialectConfig,
  type Transaction,
} from 'kysely';
import type { Database } from '../schema.js';
import { BUSY_TIMEOUT_MS, keptStatements, openConnection } from './sqlite-connection.js';
import { isBusy } from './sqlite-errors.js';

/**
 * Starts a transaction that writes (BEGIN IMMEDIATE), waiting its turn while another connection writes.
 *
 * A deferred BEGIN that reads and then writes cannot wait: when another connection committed since its read,
 * SQLite refuses the upgrade at once (SQLITE_BUSY) whatever the busy timeout, so `grants add` failed at once
 * while an import ran. Taking the write lock first makes it wait like any write. The wait is asynchronous:
 * better-sqlite3 is synchronous, and SQLite's own busy wait would hold up every request of a serving process.
 */
export async function beginWriting(db: BetterSqlite3.Database, timeoutMs = BUSY_TIMEOUT_MS): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  const busyTimeout = db.pragma('busy_timeout', { simple: true }) as number;
  for (let pause = 1; ; pause = Math.min(2 * pause, 50)) {
    db.pragma('busy_timeout = 0');
    try {
      db.exec('BEGIN IMMEDIATE');
      return;
    } catch (err) {
      if (!isBusy(err) || performance.now() + pause > deadline) throw err;
    } finally {
      db.pragma(`busy_timeout = ${busyTimeout}`);
    }
    await new Promise((resolve) => setTimeout(resolve, pause));
  }
}

/** How long a transaction about to begin may still wait for the write lock, in ms (at most 0: one try). */
export type WriteWait = () => number;

class WritingTransactionsDriver extends SqliteDriver {
  constructor(
    private readonly database: BetterSqlite3.Database,
    config: SqliteDialectConfig,
    private readonly wait: WriteWait,
  ) {
    super(config);
  }

  override async beginTransaction(_connection: DatabaseConnection): Promise<void> {
    await beginWriting(this.database, this.wait());
  }
}

/** Statements kept prepared by text; the least recently made go first. */
const PREPARED = 64;

/**
 * `database` as Kysely sees it, each statement text prepared once: Kysely's driver prepares every query it runs,
 * which costs a serving thread more than running the query (a retried create's read of the plant that holds its
 * id). A kept statement still being iterated (a stream) is not handed out again: that query gets one of its own.
 */
function preparedOnce(database: BetterSqlite3.Database): SqliteDatabase {
  const statement = keptStatements(database, PREPARED);
  return {
    close: () => database.close(),
    prepare(sql: string) {
      const kept = statement(sql);
      return kept.busy ? database.prepare(sql) : kept;
    },
  };
}

/**
 * Kysely's SQLite dialect, whose transactions start as writers (see `beginWriting`), each waiting for the write lock
 * as long as `wait` says (by default the busy timeout), and whose statements are prepared once.
 */
export class WritingTransactionsDialect extends SqliteDialect {
  private readonly database: BetterSqlite3.Database;
  private readonly config: SqliteDialectConfig;

  constructor(
    database: BetterSqlite3.Database,
    private readonly wait: WriteWait = () => BUSY_TIMEOUT_MS,
  ) {
    const config = { database: preparedOnce(database) };
    super(config);
    this.database = database;
    this.config = config;
  }

  override createDriver(): Driver {
    return new WritingTransactionsDriver(this.database, this.config, this.wait);
  }
}

/**
 * A store's writing transactions on a connection of their own. Kysely holds a connection for the whole of a
 * transaction, the wait for the write lock included (up to 5 s while another process writes), and every query on
 * that connection waits behind it: on the store's own, every read of a plant did. They run one at a time, in the
 * order asked, each waiting for the lock until 5 s after it was asked: the wait of one queued behind others is
 * bounded from then, not from when those before it gave up.
 */
export class WritingConnection {
  private turn: Promise<unknown> = Promise.resolve();
  private deadline = 0;
  readonly sqlite: BetterSqlite3.Database;
  readonly db: Kysely<Database>;

  constructor(path: string) {
    this.sqlite = openConnection(path, { mustExist: true });
    this.db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(this.sqlite, () => this.deadline - performance.now()) });
  }

  transaction<T>(run: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    const deadline = performance.now() + BUSY_TIMEOUT_MS;
    const turn = this.turn.then(() => {
      this.deadline = deadline;
      return this.db.transaction().execute(run);
    });
    this.turn = turn.catch(() => {});
    return turn;
  }
}
