import { CompiledQuery, Kysely, type Transaction } from 'kysely';
import pg from 'pg';
import { notFound, unavailable } from '../../catalogue/errors.js';
import { CHANGE_LOG_PRUNE_EVERY_MS, CHANGE_LOG_RETENTION_MS } from '../change-log.js';
import { createStore } from '../create-store.js';
import type { BulkSeam, SeamHealth, ErrorKind, OwnChanges, DatabaseSeam, WritingStatements } from '../seam.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import type { PoolStats } from '../records.js';
import type { Store } from '../store.js';
import { backupPostgres } from './postgres-backup.js';
import { claimDeliveriesPostgres, pruneEventsPostgres, recordOutcomesPostgres } from './postgres-claims.js';
import { exportSnapshot } from './postgres-export.js';
import { ChangeAnnouncer, PostgresChangeFeed, PRUNE_SQL } from './postgres-change-feed.js';
import { advisoryLockSql, classifyPostgresError, isConnectionError } from './postgres-errors.js';
import { PostgresImport } from './postgres-import.js';
import { checkOut, createPool, type PostgresOptions } from './postgres-connection.js';
import { PostgresReads } from './postgres-reads.js';
import { OwnSchemaPostgresDialect } from './own-schema-dialect.js';
import { PreparedStatements } from './prepared-statements.js';

/** Runs of a unit of work that PostgreSQL rolled back to break a deadlock, at most (see untilNoDeadlock). */
const DEADLOCK_ATTEMPTS = 5;

export type { PostgresOptions };

/** The server backend: many stateless instances on one PostgreSQL database. */
export async function openPostgresStore(options: PostgresOptions): Promise<Store> {
  const { pool, schema } = createPool(options.url, options);
  // Listings on a pool of their own, on the replica when there is one.
  const readPool = createPool(options.readUrl ?? options.url, options, 'listings').pool;
  try {
    if (schema && options.create === false) {
      const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
      if (rows.length === 0)
        throw notFound(`no schema "${schema}" in that database: check --db (or PLANTSTORE_DB), or create it with "plantstore migrate"`);
    }
    if (options.create === false) {
      // A command that only reads (users list) on a database Plant Store never used says so, instead of creating
      // the tables there (a --db naming the wrong database).
      const { rows } = await pool.query<{ found: boolean }>("SELECT to_regclass('kysely_migration') IS NOT NULL AS found");
      if (!rows[0]!.found) {
        throw notFound(
          `no Plant Store tables in ${schema ? `schema "${schema}" of ` : ''}that database: check --db (or PLANTSTORE_DB), or create them with "plantstore migrate"`,
        );
      }
    }
    const prepared = new PreparedStatements();
    const db = new Kysely<Database>({ dialect: new OwnSchemaPostgresDialect({ pool: prepared.pool(pool) }) });
    const migrated = await migrateWithoutTimeout(options, schema);
    return createStore(new PostgresSeam(pool, readPool, options.readUrl !== undefined, db, prepared), migrated);
  } catch (err) {
    await pool.end();
    await readPool.end();
    if ((err as { code?: string }).code === '3D000') {
      const database = decodeURIComponent(new URL(options.url).pathname.slice(1)) || '(default)';
      throw notFound(`PostgreSQL has no database "${database}" at ${new URL(options.url).host}: create it (createdb), or check --db`);
    }
    if (isConnectionError(err)) throw unavailable(`cannot reach PostgreSQL: ${(err as Error).message}`);
    throw err;
  }
}

/**
 * Migrations on a session of their own without the statement timeout: it bounds requests, and a migration that
 * builds an index or fills a table on a large catalogue (or a slow machine creating the schema) takes longer.
 */
async function migrateWithoutTimeout(options: PostgresOptions, schema: string | undefined): Promise<string[]> {
  const { pool } = createPool(options.url, { ...options, poolSize: 1, statementTimeoutMs: 0 });
  const db = new Kysely<Database>({ dialect: new OwnSchemaPostgresDialect({ pool }) });
  try {
    if (schema) await createSchema(pool, schema);
    return await migrateToLatest(db, 'postgres', schema);
  } finally {
    await db.destroy();
    if (!pool.ending) await pool.end();
  }
}

/**
 * Creates the schema unless it is there. Two sessions creating it at once both pass IF NOT EXISTS, and the one
 * that commits second fails on the catalogue's unique index; the schema is then there, made by the other, as
 * Kysely allows for its own tables.
 */
async function createSchema(pool: pg.Pool, schema: string): Promise<void> {
  try {
    await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
  } catch (err) {
    const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
    if (rows.length === 0) throw err;
  }
}

/**
 * PostgreSQL's side of the store (see seam.ts): Kysely and the request path on one pool of the primary, listings
 * on a pool of their own (the replica's when there is one), and the change feed on a connection of its own.
 */
class PostgresSeam implements DatabaseSeam {
  readonly backend = 'postgres' as const;
  readonly statements: WritingStatements;
  readonly changes: PostgresChangeFeed;
  readonly reads: PostgresReads;
  readonly bulk: BulkSeam;
  readonly health: SeamHealth;
  private readonly announcer: ChangeAnnouncer;
  private pruner: NodeJS.Timeout | undefined;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly readPool: pg.Pool,
    /** Whether `readPool` is a replica's (else it is the primary's listing pool). */
    private readonly replica: boolean,
    readonly db: Kysely<Database>,
    prepared: PreparedStatements,
  ) {
    this.statements = {
      transactionIdSql: 'pg_current_xact_id()::text',
      deletedPlantSharedSql: 'plantstore_plant_shared(plants.id)',
      manyRows: true,
      rowLocks: { change: 'FOR UPDATE', keep: 'FOR KEY SHARE' },
      claimDeliveries: claimDeliveriesPostgres,
      claimReturnsSent: true,
      recordOutcomes: recordOutcomesPostgres,
      pruneEvents: pruneEventsPostgres,
      prepare: (text) => prepared.register(text),
    };
    // The log is read on the primary (a replica lags), on a connection of its own that says what it is for.
    const options = (pool as unknown as { options: pg.ClientConfig }).options;
    this.changes = new PostgresChangeFeed({ ...options, application_name: `${options.application_name}-changes` }, replica, () =>
      this.startPruning(),
    );
    this.reads = new PostgresReads(pool, readPool, replica, () => this.changes.walPosition);
    this.announcer = new ChangeAnnouncer(pool);
    this.bulk = {
      importing: (run) => this.importing(run),
      exportSnapshot: () => exportSnapshot(this.pool),
      backup: () => backupPostgres(this.pool),
    };
    this.health = { poolStats: () => this.poolStats() };
  }

  classify(err: unknown): ErrorKind | undefined {
    return classifyPostgresError(err);
  }

  get unfollowedWrites(): Kysely<Database> {
    return this.db;
  }

  async writeTransaction<T>(run: (trx: Transaction<Database>) => Promise<T>): Promise<T> {
    return this.committed(await this.untilNoDeadlock(() => this.db.transaction().execute(run)));
  }

  async writeStatement<T>(run: (db: Kysely<Database>) => Promise<T>, changed?: (result: T) => OwnChanges): Promise<T> {
    const result = await this.untilNoDeadlock(() => run(this.db));
    if (changed === undefined) return this.committed(result);
    this.announcer.announce();
    const own = changed(result);
    this.changes.takeOwn(own.changes, own.transaction ?? undefined);
    if (own.complete === false) await this.changes.catchUp();
    return result;
  }

  /**
   * Runs a unit of work again when PostgreSQL rolled it back to break a deadlock: the member grants' triggers lock
   * the rows of the groups a statement touches one row at a time, so two statements that touch two groups in
   * opposite orders (a user in both removed while a plant shared with both is deleted) may wait for each other.
   * The one rolled back changed nothing, and runs again once the other has committed.
   */
  private async untilNoDeadlock<T>(work: () => Promise<T>): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await work();
      } catch (err) {
        if (attempt >= DEADLOCK_ATTEMPTS || classifyPostgresError(err) !== 'deadlock') throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.random() * 10 * attempt));
      }
    }
  }

  /** After a commit of this process: the other processes are told, and this one's caches take it in. */
  private async committed<T>(result: T): Promise<T> {
    this.announcer.announce();
    await this.changes.catchUp();
    return result;
  }

  async lock(trx: Transaction<Database>, key: string): Promise<void> {
    await trx.executeQuery(CompiledQuery.raw(advisoryLockSql, [key]));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pruner);
    await this.announcer.flush();
    await this.changes.close();
    // Kysely ends the pool only if it ran a statement on it.
    await this.db.destroy();
    if (!this.pool.ending) await this.pool.end();
    await this.readPool.end();
  }

  /** A serving process keeps the change log short; CLI commands never prune it. */
  private startPruning(): void {
    if (this.pruner || this.closed) return;
    this.pruner = setInterval(() => void this.pool.query(PRUNE_SQL, [CHANGE_LOG_RETENTION_MS]).catch(() => {}), CHANGE_LOG_PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  private poolStats(): PoolStats[] {
    const stats = (pool: pg.Pool, name: PoolStats['pool']): PoolStats => ({
      pool: name,
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
    });
    return [stats(this.pool, 'primary'), stats(this.readPool, this.replica ? 'replica' : 'listings')];
  }

  private async importing<T>(run: (target: PostgresImport) => Promise<T>): Promise<T> {
    const { client, release } = await checkOut(this.pool);
    try {
      const result = await run(new PostgresImport(client));
      this.announcer.announce();
      return result;
    } finally {
      release();
    }
  }
}
