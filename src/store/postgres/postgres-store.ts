import { Kysely, sql, type Transaction } from 'kysely';
import pg from 'pg';
import Cursor from 'pg-cursor';
import type { CatalogueRecord } from '../../import-format/records.js';
import { notFound, unavailable } from '../../domain-errors.js';
import { importCatalogue } from '../catalogue-import.js';
import { exportCatalogue } from '../catalogue-export.js';
import { CHANGE_LOG_PRUNE_EVERY_MS, CHANGE_LOG_RETENTION_MS } from '../change-log.js';
import { StoreBase } from '../store-base.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { allPlantsSql, pageFromColumns, postgresVisiblePlantsSql } from '../visible-plants-sql.js';
import { lsnValue, PostgresChangeFeed, PRUNE_SQL } from './postgres-change-feed.js';
import { OwnSchemaPostgresDialect } from './own-schema-dialect.js';
import { PostgresImport } from './postgres-import.js';
import { createPool, isConnectionError, type PostgresOptions } from './postgres-pool.js';
import type {
  HotQuery,
  ImportProgress,
  ImportSummary,
  NumberedRecord,
  PageRequest,
  PoolStats,
  TokenCredential,
  UserCredential,
  VisiblePage,
} from '../store.js';

export type { PostgresOptions };

/** Users whose latest write a replica may not show yet, at most (see PostgresStore.wrote). */
const RECENT_WRITERS = 10_000;

/** The one row of a listing query: page columns (see pageColumnsSql), the groups the page counted and the standby's replay position. */
type PageRow = { ids: string; plants: string; groups: Array<number | string> | null; replayed: string | null };

// The listing queries, one prepared statement each (the limit is a parameter on PostgreSQL).
const VISIBLE_PLANTS = postgresVisiblePlantsSql(false);
const VISIBLE_PLANTS_WITH_CLAIMS = postgresVisiblePlantsSql(true);
const ALL_PLANTS = allPlantsSql('postgres', 0);

/** The rows of `text`, read through a cursor a thousand at a time, so memory stays flat. */
async function* cursorRows<R extends pg.QueryResultRow>(client: pg.PoolClient, text: string): AsyncGenerator<R> {
  const cursor = client.query(new Cursor<R>(text));
  try {
    for (;;) {
      const rows = await cursor.read(1_000);
      if (rows.length === 0) return;
      yield* rows;
    }
  } finally {
    await cursor.close();
  }
}

/** The server backend: many stateless instances on one PostgreSQL database. */
export class PostgresStore extends StoreBase {
  readonly backend = 'postgres' as const;
  /** With a replica: where the primary's WAL was after each user's latest write, until the replica has replayed it. */
  private readonly recentWriters = new Map<number, bigint>();
  private closed = false;

  readonly changes: PostgresChangeFeed;
  private pruner: NodeJS.Timeout | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly readPool: pg.Pool,
    db: Kysely<Database>,
  ) {
    super(db, 'postgres');
    // The log is read on the primary (a replica lags), on a connection of its own that says what it is for.
    const options = (pool as unknown as { options: pg.ClientConfig }).options;
    this.changes = new PostgresChangeFeed({ ...options, application_name: `${options.application_name}-changes` }, () =>
      this.startPruning(),
    );
  }

  /** A serving process keeps the change log short; CLI commands never prune it. */
  private startPruning(): void {
    if (this.pruner || this.closed) return;
    this.pruner = setInterval(() => void this.pool.query(PRUNE_SQL, [CHANGE_LOG_RETENTION_MS]).catch(() => {}), CHANGE_LOG_PRUNE_EVERY_MS);
    this.pruner.unref();
  }

  static async open(options: PostgresOptions): Promise<PostgresStore> {
    const { pool, schema } = createPool(options.url, options);
    const readPool = options.readUrl ? createPool(options.readUrl, options).pool : undefined;
    try {
      if (schema && options.create === false) {
        const { rows } = await pool.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema]);
        if (rows.length === 0)
          throw notFound(`no schema "${schema}" in that database: check --db (or PLANTSTORE_DB), or create it with "plantstore migrate"`);
      }
      if (schema) await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      const db = new Kysely<Database>({ dialect: new OwnSchemaPostgresDialect({ pool }) });
      await migrateToLatest(db, 'postgres', schema);
      return new PostgresStore(pool, readPool ?? pool, db);
    } catch (err) {
      await pool.end();
      await readPool?.end();
      if ((err as { code?: string }).code === '3D000') {
        const database = decodeURIComponent(new URL(options.url).pathname.slice(1)) || '(default)';
        throw notFound(`PostgreSQL has no database "${database}" at ${new URL(options.url).host}: create it (createdb), or check --db`);
      }
      if (isConnectionError(err)) throw unavailable(`cannot reach PostgreSQL: ${(err as Error).message}`);
      throw err;
    }
  }

  /**
   * Runs a hot-path query as a named prepared statement; connection failures become "unavailable" (503).
   * When timed, the duration includes any wait for a free connection: that is what a request waits.
   */
  private query<R extends pg.QueryResultRow>(
    name: HotQuery,
    text: string,
    values: unknown[],
    pool = this.pool,
    statement: string = name,
  ): Promise<R[]> {
    return this.hotQuery(name, async () => (await pool.query<R>({ name: statement, text, values })).rows);
  }

  override poolStats(): PoolStats[] {
    const stats = (pool: pg.Pool, name: PoolStats['pool']): PoolStats => ({
      pool: name,
      total: pool.totalCount,
      idle: pool.idleCount,
      waiting: pool.waitingCount,
    });
    return this.readPool === this.pool ? [stats(this.pool, 'primary')] : [stats(this.pool, 'primary'), stats(this.readPool, 'replica')];
  }

  async ping(): Promise<void> {
    await this.query('ping', 'SELECT 1', []);
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.pruner);
    await this.changes.close();
    await this.db.destroy();
    if (this.readPool !== this.pool) await this.readPool.end();
  }

  protected isUnavailable(err: unknown): boolean {
    return isConnectionError(err);
  }

  protected async lockNameKey(trx: Transaction<Database>, key: string): Promise<void> {
    await sql`SELECT pg_advisory_xact_lock(hashtext(${`plantstore name ${key}`}))`.execute(trx);
  }

  protected writeStatement<T>(run: (db: Kysely<Database>) => Promise<T>): Promise<T> {
    return run(this.db);
  }

  protected isUniqueViolation(err: unknown): boolean {
    return (err as { code?: string }).code === '23505';
  }

  async findToken(hash: Buffer): Promise<TokenCredential | undefined> {
    const [row] = await this.query<{
      token_id: number;
      user_id: number;
      is_admin: number;
      expires_at: number | null;
      revoked_at: number | null;
    }>(
      'find_token',
      `SELECT t.id AS token_id, t.user_id, u.is_admin, t.expires_at, t.revoked_at
       FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = $1`,
      [hash],
    );
    if (!row) return undefined;
    return { tokenId: row.token_id, userId: row.user_id, admin: row.is_admin === 1, expiresAt: row.expires_at, revokedAt: row.revoked_at };
  }

  async findUser(name: string): Promise<UserCredential | undefined> {
    const [row] = await this.query<{ id: number; is_admin: number }>('find_user', 'SELECT id, is_admin FROM users WHERE name = $1', [name]);
    return row && { userId: row.id, admin: row.is_admin === 1 };
  }

  listPlantsVisibleTo(userId: number, { after, limit }: PageRequest, extraGroups: readonly string[] = []): Promise<VisiblePage> {
    return extraGroups.length > 0
      ? this.listing(
          userId,
          'visible_plants',
          VISIBLE_PLANTS_WITH_CLAIMS,
          limit,
          [userId, after, limit + 1, extraGroups],
          'visible_plants_claims',
        )
      : this.listing(userId, 'visible_plants', VISIBLE_PLANTS, limit, [userId, after, limit + 1]);
  }

  listAllPlants({ after, limit }: PageRequest, readerId?: number): Promise<VisiblePage> {
    return this.listing(readerId, 'all_plants', ALL_PLANTS, limit, [after, limit + 1]);
  }

  /**
   * A listing page of at most `limit` plants (the query reads one more), read on the replica (when there is one),
   * unless `readerId` wrote through this process and the replica has not replayed that write yet: then it is
   * read again on the primary, so the writer sees it.
   */
  private async listing(
    readerId: number | undefined,
    name: HotQuery,
    text: string,
    limit: number,
    values: unknown[],
    statement?: string,
  ): Promise<VisiblePage> {
    // The statement aggregates: it answers exactly one row.
    const read = async (pool: pg.Pool) => (await this.query<PageRow>(name, text, values, pool, statement))[0]!;
    const row = await read(this.readPool);
    const wrote = readerId === undefined ? undefined : this.recentWriters.get(readerId);
    if (wrote !== undefined) {
      if (row.replayed !== null && lsnValue(row.replayed) < wrote) return this.page(await read(this.pool), limit);
      this.recentWriters.delete(readerId!);
    }
    return this.page(row, limit);
  }

  protected override async wrote(userId: number): Promise<void> {
    if (this.readPool === this.pool) return;
    const { rows } = await this.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    this.recentWriters.delete(userId);
    this.recentWriters.set(userId, lsnValue(rows[0]!.lsn));
    // Bounded: the oldest writer is forgotten (its replica has long caught up, or is far behind for everyone).
    if (this.recentWriters.size > RECENT_WRITERS) this.recentWriters.delete(this.recentWriters.keys().next().value!);
  }

  /**
   * The row of a listing query (see visible-plants-sql.ts). A page read from a standby that has not replayed
   * every change the feed delivered could be older than the caches' view: it is served, not cached.
   */
  private page({ ids, plants, groups, replayed }: PageRow, limit: number): VisiblePage {
    const cacheable = replayed === null || lsnValue(replayed) >= this.changes.walPosition;
    // PostgreSQL's aggregates sort the rows themselves: the ids are in order.
    return pageFromColumns(ids, plants, limit, (groups ?? []).map(Number), cacheable)!;
  }

  async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    const client = await this.pool.connect();
    try {
      const summary = await importCatalogue(batches, new PostgresImport(client), progress);
      await this.changes.catchUp();
      return summary;
    } finally {
      client.release();
    }
  }

  exportRecords(): AsyncGenerator<CatalogueRecord> {
    return exportCatalogue('postgres', async () => {
      const client = await this.pool.connect();
      try {
        await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
        // The statement timeout bounds requests' queries; a cursor read in many fetches is one statement that
        // lasts the whole export (5 s is about 100,000 plants), so an operator's bulk command goes without it.
        await client.query('SET LOCAL statement_timeout = 0');
      } catch (err) {
        client.release();
        throw err;
      }
      return {
        rows: <R>(text: string) => cursorRows(client, text) as AsyncIterable<R>,
        close: async () => {
          await client.query('ROLLBACK').catch(() => {});
          client.release();
        },
      };
    });
  }
}
