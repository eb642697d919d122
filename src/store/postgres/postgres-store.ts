import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Kysely, sql, type Transaction } from 'kysely';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import Cursor from 'pg-cursor';
import { exportRecord, parseSharedWith, unknownName } from '../../catalogue/record-fields.js';
import { nameKey } from '../../catalogue/names.js';
import type { CatalogueRecord } from '../../catalogue/records.js';
import { invalidInput, notFound, unavailable } from '../../errors.js';
import { CHANGE_LOG_PRUNE_EVERY_MS, CHANGE_LOG_RETENTION_MS, EVERYTHING } from '../change-log.js';
import { KyselyStore } from '../kysely-store.js';
import { BULK_LOAD_SETTING } from '../migrations/0003-change-log.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { allPlantsSql, postgresVisiblePlantsSql } from '../visible-plants-sql.js';
import { lsnValue, PostgresChangeFeed, PRUNE_SQL } from './postgres-change-feed.js';
import { OwnSchemaPostgresDialect } from './own-schema-dialect.js';
import type {
  HotQuery,
  ImportProgress,
  ImportSummary,
  ListedPlant,
  NumberedRecord,
  PageRequest,
  PoolStats,
  TokenCredential,
  UserCredential,
  VisiblePage,
} from '../store.js';

export interface PostgresOptions {
  /** postgres://user@host:port/database; an optional `schema=NAME` query parameter selects (and creates) a schema. */
  url: string;
  /** A read replica for the listings; token checks and all writes stay on the primary. */
  readUrl?: string;
  poolSize?: number;
  statementTimeoutMs?: number;
  /** Create the `?schema=` when it is not there; otherwise its absence is an error. Default true. */
  create?: boolean;
}

/** A row of a listing query: a plant, or (last, id null) what the page counted and the standby's replay position. */
type PageRow = { id: number; name: string; tag: string | null; groups?: Array<number | string> | null; replayed: string | null };

// The listing queries, one prepared statement each (the limit is a parameter on PostgreSQL).
const VISIBLE_PLANTS = postgresVisiblePlantsSql(false);
const VISIBLE_PLANTS_WITH_CLAIMS = postgresVisiblePlantsSql(true);
const ALL_PLANTS = allPlantsSql('postgres', 0);

/** Rows an import statement writes at most: plants a batch, users or groups an upsert (far from the statement timeout). */
const IMPORT_BATCH = 20_000;

/** A value in COPY's text format: backslash, tab, newline and carriage return escaped (NUL is refused earlier). */
function copyText(value: string): string {
  return /[\\\t\n\r]/.test(value) ? value.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c]!) : value;
}
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/**
 * Reserves plant ids (one nextval each, as inserts by others take theirs meanwhile) and returns them as runs
 * of consecutive values, usually one run rather than a row per id; the sequence is looked up once.
 */
const RESERVE_PLANT_IDS = `
  WITH s AS MATERIALIZED (SELECT pg_get_serial_sequence('plants', 'id')::regclass AS seq)
  SELECT min(id) AS first, max(id) AS last FROM (
    SELECT id, id - row_number() OVER (ORDER BY id) AS run FROM (SELECT nextval(seq) AS id FROM s, generate_series(1, $1)) ids
  ) reserved GROUP BY run ORDER BY first`;
type Range = { first: number; last: number };

/**
 * A batch's COPY rows of plants, all but the ids (reserved when the batch is written), kept in a Buffer: held
 * as strings until then, they survived every young-generation GC and were copied each time.
 */
class PlantRows {
  private bytes = Buffer.allocUnsafe(1 << 16);
  private readonly ends: number[] = [];

  get count(): number {
    return this.ends.length;
  }

  add(row: string): void {
    const start = this.ends.at(-1) ?? 0;
    if (start + 3 * row.length > this.bytes.length) {
      const bigger = Buffer.allocUnsafe(2 * (start + 3 * row.length));
      this.bytes.copy(bigger, 0, 0, start);
      this.bytes = bigger;
    }
    this.ends.push(start + this.bytes.write(row, start));
  }

  /** The rows, each with its id in front. */
  withIds(ids: number[]): Buffer {
    // An id below 2^53 has at most 16 digits.
    const out = Buffer.allocUnsafe((this.ends.at(-1) ?? 0) + 16 * this.count);
    let length = 0;
    let start = 0;
    this.ends.forEach((end, i) => {
      length += out.write(String(ids[i]), length, 'latin1');
      length += this.bytes.copy(out, length, start, end);
      start = end;
    });
    return out.subarray(0, length);
  }
}

/** The COPY rows of grants given as (plant index, grantee id) pairs. */
function grantRows(pairs: number[], ids: number[]): string {
  let text = '';
  for (let i = 0; i < pairs.length; i += 2) text += `${pairs[i + 1]}\t${ids[pairs[i]!]}\n`;
  return text;
}

/**
 * The foreign keys of the tables an import fills, as statements that drop them and add them back. Checked row
 * by row, they were most of a first load's time (100,000 plants and 40,000 grants: 0.77 s of COPY with them,
 * 0.25 s without, 0.05 s to add them back, which checks every row in one join per key).
 */
async function importedForeignKeys(client: pg.PoolClient): Promise<{ drop: string[]; add: string[] }> {
  const { rows } = await client.query<{ table: string; name: string; definition: string }>(
    `SELECT conrelid::regclass::text AS table, quote_ident(conname) AS name, pg_get_constraintdef(oid) AS definition
     FROM pg_constraint WHERE contype = 'f' AND conrelid IN ('plants'::regclass, 'plant_user_grants'::regclass, 'plant_group_grants'::regclass)
     ORDER BY conrelid, conname`,
  );
  return {
    drop: rows.map((k) => `ALTER TABLE ${k.table} DROP CONSTRAINT ${k.name}`),
    add: rows.map((k) => `ALTER TABLE ${k.table} ADD CONSTRAINT ${k.name} ${k.definition}`),
  };
}

/** SQLSTATEs of a lock not taken: lock_timeout ran out (55P03), or a reader and the load waited on each other (40P01). */
const LOCK_NOT_TAKEN = new Set(['55P03', '40P01']);

/**
 * A first load (no plant yet) goes without the foreign keys and adds them back before its commit: the ids it
 * writes come from its own lookups and reservations, and adding a key back checks every row anyway. Dropping a
 * key locks its tables (users and groups too) until the commit, so readers wait for the load: with no catalogue
 * to serve yet that costs little, while a load into a live catalogue keeps its keys. When another transaction
 * holds one of those tables for more than a second, the load keeps its keys too, rather than make every reader
 * queue behind its lock request; so it does when a reader that holds one table waits for another it holds.
 */
async function dropKeysForFirstLoad(client: pg.PoolClient): Promise<{ add: string[] }> {
  const none = { add: [] };
  const { rows } = await client.query<{ empty: boolean }>('SELECT NOT EXISTS (SELECT FROM plants) AS empty');
  if (!rows[0]!.empty) return none;
  const keys = await importedForeignKeys(client);
  await client.query('SAVEPOINT drop_keys');
  try {
    await client.query("SET LOCAL lock_timeout = '1s'");
    for (const statement of keys.drop) await client.query(statement);
    await client.query('SET LOCAL lock_timeout = DEFAULT');
    await client.query('RELEASE SAVEPOINT drop_keys');
    return keys;
  } catch (err) {
    if (!LOCK_NOT_TAKEN.has((err as { code?: string }).code ?? '')) throw err;
    await client.query('ROLLBACK TO SAVEPOINT drop_keys');
    return none;
  }
}

/**
 * Runs a `COPY … FROM STDIN` of rows already in COPY text format, handed to the socket in one piece: written
 * in chunks, each waited for the socket to drain, so the next went out only once Node was done with the
 * records at hand, and the database waited meanwhile.
 */
async function copyInto(client: pg.PoolClient, statement: string, rows: string | Buffer): Promise<void> {
  if (rows.length === 0) return;
  await pipeline(Readable.from([rows]), client.query(copyFrom(statement)));
}

/** Errors that mean "the database is not there right now" rather than "this request is wrong". */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e.code && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND|EPIPE|57P0[1-3]|57014|08\w{3}|53300)$/.test(e.code)) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    e.message ?? '',
  );
}

/** The URL's own parameters: `schema` (Plant Store's) and `application_name`, which the change feed's connection extends. */
function splitUrl(url: string): { connectionString: string; schema?: string; applicationName: string } {
  const parsed = new URL(url);
  const schema = parsed.searchParams.get('schema') ?? undefined;
  const applicationName = parsed.searchParams.get('application_name') ?? 'plantstore';
  parsed.searchParams.delete('schema');
  parsed.searchParams.delete('application_name');
  if (schema !== undefined && !/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw invalidInput(`invalid schema "${schema}": use lower-case letters, digits and underscores`);
  }
  return { connectionString: parsed.toString(), applicationName, ...(schema ? { schema } : {}) };
}

function createPool(url: string, options: PostgresOptions): { pool: pg.Pool; schema?: string } {
  const { connectionString, schema, applicationName } = splitUrl(url);
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    statement_timeout: options.statementTimeoutMs ?? 5_000,
    application_name: applicationName,
    ...(schema ? { options: `-c search_path=${schema}` } : {}),
    // bigint ids and epoch-millisecond times fit in a double; parse them as numbers for this pool only.
    types: {
      getTypeParser: ((oid: number, format?: string) =>
        oid === 20 ? Number : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
    },
  });
  // An idle connection dropped by the server (restart, pg_terminate_backend) must not crash the process;
  // the pool discards it and the next query opens a fresh one.
  pool.on('error', () => {});
  return { pool, ...(schema ? { schema } : {}) };
}


/** The server backend: many stateless instances on one PostgreSQL database. */
export class PostgresStore extends KyselyStore {
  readonly backend = 'postgres' as const;
  private closed = false;

  readonly changes: PostgresChangeFeed;
  private pruner: NodeJS.Timeout | undefined;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly readPool: pg.Pool,
    db: Kysely<Database>,
  ) {
    super(db);
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
        if (rows.length === 0) throw notFound(`no schema "${schema}" in that database: check --db (or PLANTSTORE_DB), or create it with "plantstore migrate"`);
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
  private async query<R extends pg.QueryResultRow>(name: HotQuery, text: string, values: unknown[], pool = this.pool, statement: string = name): Promise<R[]> {
    const timer = this.queryTimer;
    const started = timer ? performance.now() : 0;
    try {
      return (await pool.query<R>({ name: statement, text, values })).rows;
    } catch (err) {
      if (isConnectionError(err)) throw unavailable('database unavailable');
      throw err;
    } finally {
      timer?.(name, (performance.now() - started) / 1000);
    }
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

  protected isUniqueViolation(err: unknown): boolean {
    return (err as { code?: string }).code === '23505';
  }

  async findToken(hash: Buffer): Promise<TokenCredential | undefined> {
    const [row] = await this.query<{ token_id: number; user_id: number; is_admin: number; expires_at: number | null; revoked_at: number | null }>(
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

  async listPlantsVisibleTo(userId: number, { after, limit }: PageRequest, extraGroups: readonly string[] = []): Promise<VisiblePage> {
    const rows = await (extraGroups.length > 0
      ? this.query<PageRow>('visible_plants', VISIBLE_PLANTS_WITH_CLAIMS, [userId, after, limit, extraGroups], this.readPool, 'visible_plants_claims')
      : this.query<PageRow>('visible_plants', VISIBLE_PLANTS, [userId, after, limit], this.readPool));
    return this.page(rows);
  }

  async listAllPlants({ after, limit }: PageRequest): Promise<VisiblePage> {
    return this.page(await this.query<PageRow>('all_plants', ALL_PLANTS, [after, limit], this.readPool));
  }

  /**
   * The rows of a listing query (see visible-plants-sql.ts). A page read from a standby that has not replayed
   * every change the feed delivered could be older than the caches' view: it is served, not cached.
   */
  private page(rows: PageRow[]): VisiblePage {
    const { groups, replayed } = rows.pop()!;
    const cacheable = replayed === null || lsnValue(replayed) >= this.changes.walPosition;
    return { plants: rows as unknown as ListedPlant[], groupIds: (groups ?? []).map(Number), cacheable };
  }

  async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    const client = await this.pool.connect();
    const now = Date.now();
    const userIds = new Map<string, number>();
    const groupIds = new Map<string, number>();
    const summary: ImportSummary = { users: 0, groups: 0, plants: 0, grants: 0 };

    // A batch of plants is written while the next one is read and parsed (the database and Node each keep
    // a CPU busy); every other statement waits for that write first.
    let writing: Promise<void> = Promise.resolve();
    const run = async <R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<R[]> => {
      await writing;
      return (await client.query<R>(text, values)).rows;
    };
    // Called only on a cache miss: the callers read the caches themselves, so a known name costs no await.
    const lookup = async (what: 'user' | 'group', name: string, line: number): Promise<number> => {
      const [row] = await run<{ id: number }>(`SELECT id FROM ${what === 'user' ? 'users' : 'groups'} WHERE name = $1`, [name]);
      if (row === undefined) throw unknownName(what, name, line);
      (what === 'user' ? userIds : groupIds).set(name, row.id);
      return row.id;
    };

    // Consecutive user records are upserted by one statement, and so are consecutive group records, instead
    // of a round trip each (1,000 users took 0.5 s). A name repeated in a run keeps its first place (the id it
    // would have got) and the last admin flag given, as record-by-record upserts would.
    let users = new Map<string, number | null>();
    const writeUsers = async () => {
      const rows = await run<{ id: number; name: string }>(
        `WITH input AS (SELECT * FROM unnest($1::text[], $2::int[], $4::text[]) WITH ORDINALITY AS u (name, admin, key, n))
         INSERT INTO users (name, is_admin, created_at, name_key) SELECT name, coalesce(admin, 0), $3, key FROM input ORDER BY n
         ON CONFLICT (name) DO UPDATE SET is_admin = coalesce(
           ((SELECT jsonb_object_agg(name, admin) FROM input WHERE admin IS NOT NULL) ->> excluded.name)::int, users.is_admin)
         RETURNING id, name`,
        [[...users.keys()], [...users.values()], now, [...users.keys()].map(nameKey)],
      );
      for (const { id, name } of rows) userIds.set(name, id);
      users = new Map();
    };
    let groups = new Map<string, number[]>();
    let memberCount = 0;
    const writeGroups = async () => {
      const rows = await run<{ id: number; name: string }>(
        `INSERT INTO groups (name, created_at) SELECT name, $2 FROM unnest($1::text[]) WITH ORDINALITY AS g (name, n) ORDER BY n
         ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id, name`,
        [[...groups.keys()], now],
      );
      for (const { id, name } of rows) groupIds.set(name, id);
      if (memberCount > 0) {
        const groupColumn: number[] = [];
        const userColumn: number[] = [];
        for (const [name, memberIds] of groups) {
          const groupId = groupIds.get(name)!;
          for (const userId of memberIds) {
            groupColumn.push(groupId);
            userColumn.push(userId);
          }
        }
        await run(
          'INSERT INTO group_members (group_id, user_id) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING',
          [groupColumn, userColumn],
        );
      }
      groups = new Map();
      memberCount = 0;
    };

    // Plants are buffered and written a batch at a time with ids reserved up front, so grants can refer to
    // them; each batch is three COPY streams (plants, user grants, group grants), far cheaper than INSERTs.
    // A plant's COPY row is built when it is read, all but the id; grants are (plant index, grantee) pairs.
    type Batch = { rows: PlantRows; userGrants: number[]; groupGrants: number[] };
    let plants: Batch = { rows: new PlantRows(), userGrants: [], groupGrants: [] };
    // The first batches are small so the database starts early; then up to IMPORT_BATCH plants a batch.
    let batchSize = 1_000;
    const writePlants = async ({ rows, userGrants, groupGrants }: Batch, reservation: Promise<pg.QueryResult<Range>>, previous: Promise<void>) => {
      let runs: Range[];
      try {
        runs = (await reservation).rows;
      } catch (err) {
        // An earlier batch's failure comes first: it is why the reservation failed, if it did.
        await previous;
        throw err;
      }
      const ids: number[] = [];
      for (const { first, last } of runs) for (let id = first; id <= last; id++) ids.push(id);
      const plantRows = rows.withIds(ids);
      const userGrantText = grantRows(userGrants, ids);
      const groupGrantText = grantRows(groupGrants, ids);
      await previous;
      // COPY writes the reserved ids into the identity column as given (like OVERRIDING SYSTEM VALUE).
      await copyInto(client, 'COPY plants (id, name, tag, owner_id, is_public, created_at) FROM STDIN', plantRows);
      await copyInto(client, 'COPY plant_user_grants (user_id, plant_id) FROM STDIN', userGrantText);
      await copyInto(client, 'COPY plant_group_grants (group_id, plant_id) FROM STDIN', groupGrantText);
    };
    const flushPlants = async () => {
      const batch = plants;
      plants = { rows: new PlantRows(), userGrants: [], groupGrants: [] };
      batchSize = Math.min(2 * batchSize, IMPORT_BATCH);
      // The ids are reserved at once, between the statements of the batch being written, and the rows built
      // meanwhile: the database goes on from one batch to the next without waiting for Node.
      const reservation = client.query<Range>(RESERVE_PLANT_IDS, [batch.rows.count]);
      reservation.catch(() => {});
      const previous = writing;
      writing = writePlants(batch, reservation, previous);
      // Seen by the next statement, or by the catch below if reading fails first.
      writing.catch(() => {});
      // At most one batch is written while the next is read.
      await previous;
    };
    // The plants are new, so a grant can only repeat within its own record: these drop such repeats.
    const grantedUsers = new Set<number>();
    const grantedGroups = new Set<number>();

    let done = 0;
    try {
      await client.query('BEGIN');
      // Like export: a bulk command, whose COPY of a batch or COMMIT may outlast a request's timeout.
      await client.query('SET LOCAL statement_timeout = 0');
      // Row by row, the change log would double what an import writes: it records one broad change instead.
      await client.query(`SET LOCAL ${BULK_LOAD_SETTING} = 'on'`);
      const keys = await dropKeysForFirstLoad(client);
      for await (const records of batches) {
        for (const { line, record } of records) {
          if (users.size > 0 && record.type !== 'user') await writeUsers();
          if (groups.size > 0 && record.type !== 'group') await writeGroups();
          if (plants.rows.count > 0 && record.type !== 'plant') await flushPlants();
          switch (record.type) {
            case 'user': {
              const admin = record.admin === undefined ? null : Number(record.admin);
              users.set(record.name, admin ?? users.get(record.name) ?? null);
              summary.users++;
              if (users.size >= IMPORT_BATCH) await writeUsers();
              break;
            }
            case 'group': {
              const groupMembers = groups.get(record.name) ?? [];
              groups.set(record.name, groupMembers);
              for (const m of record.members ?? []) groupMembers.push(userIds.get(m) ?? (await lookup('user', m, line)));
              memberCount += record.members?.length ?? 0;
              summary.groups++;
              if (groups.size + memberCount >= IMPORT_BATCH) await writeGroups();
              break;
            }
            case 'plant': {
              const owner = userIds.get(record.owner) ?? (await lookup('user', record.owner, line));
              const index = plants.rows.count;
              if (record.sharedWith !== undefined && record.sharedWith.length > 0) {
                grantedUsers.clear();
                grantedGroups.clear();
                for (const entry of record.sharedWith) {
                  const grantee = parseSharedWith(entry);
                  if ('user' in grantee) {
                    const id = userIds.get(grantee.user) ?? (await lookup('user', grantee.user, line));
                    if (!grantedUsers.has(id)) {
                      grantedUsers.add(id);
                      plants.userGrants.push(index, id);
                    }
                  } else {
                    const id = groupIds.get(grantee.group) ?? (await lookup('group', grantee.group, line));
                    if (!grantedGroups.has(id)) {
                      grantedGroups.add(id);
                      plants.groupGrants.push(index, id);
                    }
                  }
                  summary.grants++;
                }
              }
              const tag = record.tag === undefined ? '\\N' : copyText(record.tag);
              plants.rows.add(`\t${copyText(record.name)}\t${tag}\t${owner}\t${record.public ? 1 : 0}\t${now}\n`);
              summary.plants++;
              if (plants.rows.count >= batchSize) await flushPlants();
              break;
            }
          }
        }
        done += records.length;
        progress?.(done);
      }
      if (users.size > 0) await writeUsers();
      if (groups.size > 0) await writeGroups();
      if (plants.rows.count > 0) await flushPlants();
      await writing;
      for (const statement of keys.add) await client.query(statement);
      await client.query('INSERT INTO change_log (table_name) VALUES ($1)', [EVERYTHING]);
      await client.query('COMMIT');
      progress?.(done);
      await this.changes.catchUp();
      return summary;
    } catch (err) {
      // A batch still being written holds earlier lines of the file than the reader's error: report its error.
      const earlier = await writing.then(
        () => undefined,
        (e: unknown) => e,
      );
      await client.query('ROLLBACK').catch(() => {});
      throw earlier ?? err;
    } finally {
      client.release();
    }
  }

  async *exportRecords(): AsyncGenerator<CatalogueRecord> {
    const client = await this.pool.connect();
    // One snapshot for the whole export; rows are read through a cursor so memory stays flat.
    async function* rowsOf<R extends pg.QueryResultRow>(text: string): AsyncGenerator<R> {
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
    try {
      await client.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
      // The statement timeout bounds requests' queries; a cursor read in many fetches is one statement that
      // lasts the whole export (5 s is about 100,000 plants), so an operator's bulk command goes without it.
      await client.query('SET LOCAL statement_timeout = 0');
      for await (const u of rowsOf<{ name: string; is_admin: number }>('SELECT name, is_admin FROM users ORDER BY id')) {
        yield exportRecord.user(u.name, u.is_admin === 1);
      }
      for await (const g of rowsOf<{ name: string; members: string[] }>(
        `SELECT g.name, ARRAY(SELECT u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE m.group_id = g.id ORDER BY u.id) AS members
         FROM groups g ORDER BY g.id`,
      )) {
        yield exportRecord.group(g.name, g.members);
      }
      for await (const p of rowsOf<{ name: string; tag: string | null; owner: string; is_public: number; users: string[]; groups: string[] }>(
        `SELECT p.name, p.tag, u.name AS owner, p.is_public,
           ARRAY(SELECT gu.name FROM plant_user_grants g JOIN users gu ON gu.id = g.user_id WHERE g.plant_id = p.id ORDER BY gu.id) AS users,
           ARRAY(SELECT gr.name FROM plant_group_grants g JOIN groups gr ON gr.id = g.group_id WHERE g.plant_id = p.id ORDER BY gr.id) AS groups
         FROM plants p JOIN users u ON u.id = p.owner_id ORDER BY p.id`,
      )) {
        yield exportRecord.plant(p.name, p.tag, p.owner, p.is_public === 1, p.users, p.groups);
      }
      await client.query('COMMIT');
    } finally {
      await client.query('ROLLBACK').catch(() => {});
      client.release();
    }
  }
}
