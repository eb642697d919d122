import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { Kysely } from 'kysely';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import Cursor from 'pg-cursor';
import { exportRecord, parseSharedWith, unknownName } from '../../catalogue/record-fields.js';
import type { CatalogueRecord } from '../../catalogue/records.js';
import { invalidInput, unavailable } from '../../errors.js';
import { KyselyStore } from '../kysely-store.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { ChangeListener } from './change-listener.js';
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
} from '../store.js';

export interface PostgresOptions {
  /** postgres://user@host:port/database; an optional `schema=NAME` query parameter selects (and creates) a schema. */
  url: string;
  /** A read replica for the listings; token checks and all writes stay on the primary. */
  readUrl?: string;
  poolSize?: number;
  statementTimeoutMs?: number;
}

/**
 * One page of a user's listing in one round trip: each access branch is an index range read from $2 in id
 * order cut at $3, one per group of the user (LATERAL), merged, cut again, and only then joined to plants.
 * $4 holds the group names a JWT's groups claim adds to the stored memberships.
 */
const VISIBLE_PLANTS_SQL = `
  WITH my_groups AS (
    SELECT group_id AS id FROM group_members WHERE user_id = $1
    UNION SELECT id FROM groups WHERE name = ANY($4::text[])
  ), page AS (
    (SELECT id FROM plants WHERE is_public = 1 AND id > $2 ORDER BY id LIMIT $3)
    UNION
    (SELECT id FROM plants WHERE owner_id = $1 AND id > $2 ORDER BY id LIMIT $3)
    UNION
    (SELECT plant_id FROM plant_user_grants WHERE user_id = $1 AND plant_id > $2 ORDER BY plant_id LIMIT $3)
    UNION
    (SELECT gg.plant_id FROM my_groups g CROSS JOIN LATERAL (
       SELECT plant_id FROM plant_group_grants WHERE group_id = g.id AND plant_id > $2 ORDER BY plant_id LIMIT $3) gg)
    ORDER BY 1 LIMIT $3
  )
  SELECT p.id, p.name, p.tag FROM page JOIN plants p ON p.id = page.id ORDER BY p.id`;

const IMPORT_BATCH = 20_000;

/** A value in COPY's text format: backslash, tab, newline and carriage return escaped (NUL is refused earlier). */
function copyText(value: string): string {
  return /[\\\t\n\r]/.test(value) ? value.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c]!) : value;
}
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/** Streams rows (already in COPY text format, one a line) into a `COPY … FROM STDIN`. */
async function copyInto(client: pg.PoolClient, statement: string, lines: string[]): Promise<void> {
  if (lines.length === 0) return;
  const CHUNK = 1_000;
  await pipeline(
    Readable.from(
      (function* () {
        for (let i = 0; i < lines.length; i += CHUNK) yield lines.slice(i, i + CHUNK).join('');
      })(),
    ),
    client.query(copyFrom(statement)),
  );
}

/** Errors that mean "the database is not there right now" rather than "this request is wrong". */
export function isConnectionError(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  if (e.code && /^(ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENOTFOUND|EPIPE|57P0[1-3]|57014|08\w{3}|53300)$/.test(e.code)) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i.test(
    e.message ?? '',
  );
}

function splitSchema(url: string): { connectionString: string; schema?: string } {
  const parsed = new URL(url);
  const schema = parsed.searchParams.get('schema') ?? undefined;
  parsed.searchParams.delete('schema');
  if (schema !== undefined && !/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw invalidInput(`invalid schema "${schema}": use lower-case letters, digits and underscores`);
  }
  return { connectionString: parsed.toString(), ...(schema ? { schema } : {}) };
}

function createPool(url: string, options: PostgresOptions): { pool: pg.Pool; schema?: string } {
  const { connectionString, schema } = splitSchema(url);
  const pool = new pg.Pool({
    connectionString,
    max: options.poolSize ?? 10,
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    statement_timeout: options.statementTimeoutMs ?? 5_000,
    ...(new URL(url).searchParams.has('application_name') ? {} : { application_name: 'plantstore' }),
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

  private readonly changes: ChangeListener;

  private constructor(
    private readonly pool: pg.Pool,
    private readonly readPool: pg.Pool,
    db: Kysely<Database>,
  ) {
    super(db);
    // Notifications come from the primary (a replica does not relay them), on a connection of its own.
    this.changes = new ChangeListener((pool as unknown as { options: pg.ClientConfig }).options);
  }

  static async open(options: PostgresOptions): Promise<PostgresStore> {
    const { pool, schema } = createPool(options.url, options);
    const readPool = options.readUrl ? createPool(options.readUrl, options).pool : undefined;
    try {
      if (schema) await pool.query(`CREATE SCHEMA IF NOT EXISTS ${schema}`);
      const db = new Kysely<Database>({ dialect: new OwnSchemaPostgresDialect({ pool }) });
      await migrateToLatest(db, 'postgres', schema);
      return new PostgresStore(pool, readPool ?? pool, db);
    } catch (err) {
      await pool.end();
      await readPool?.end();
      if (isConnectionError(err)) throw unavailable(`cannot reach PostgreSQL: ${(err as Error).message}`);
      throw err;
    }
  }

  /**
   * Runs a hot-path query as a named prepared statement; connection failures become "unavailable" (503).
   * When timed, the duration includes any wait for a free connection: that is what a request waits.
   */
  private async query<R extends pg.QueryResultRow>(name: HotQuery, text: string, values: unknown[], pool = this.pool): Promise<R[]> {
    const timer = this.queryTimer;
    const started = timer ? performance.now() : 0;
    try {
      return (await pool.query<R>({ name, text, values })).rows;
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
    await this.changes.close();
    await this.db.destroy();
    if (this.readPool !== this.pool) await this.readPool.end();
  }

  protected isUnavailable(err: unknown): boolean {
    return isConnectionError(err);
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

  async listPlantsVisibleTo(userId: number, { after, limit }: PageRequest, extraGroups: readonly string[] = []): Promise<ListedPlant[]> {
    return this.query<ListedPlant>('visible_plants', VISIBLE_PLANTS_SQL, [userId, after, limit, extraGroups], this.readPool);
  }

  async listAllPlants({ after, limit }: PageRequest): Promise<ListedPlant[]> {
    return this.query<ListedPlant>('all_plants', 'SELECT id, name, tag FROM plants WHERE id > $1 ORDER BY id LIMIT $2', [after, limit], this.readPool);
  }

  dataVersion(): number | undefined {
    return this.changes.version();
  }

  async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    const client = await this.pool.connect();
    const now = Date.now();
    const userIds = new Map<string, number>();
    const groupIds = new Map<string, number>();
    const lookup = async (table: 'users' | 'groups', cache: Map<string, number>, name: string, line: number): Promise<number> => {
      let id = cache.get(name);
      if (id === undefined) {
        const { rows } = await client.query<{ id: number }>(`SELECT id FROM ${table} WHERE name = $1`, [name]);
        id = rows[0]?.id;
        if (id === undefined) throw unknownName(table === 'users' ? 'user' : 'group', name, line);
        cache.set(name, id);
      }
      return id;
    };

    // Plants are buffered and written a batch at a time with ids reserved up front, so grants can refer to
    // them; each batch is three COPY streams (plants, user grants, group grants), far cheaper than INSERTs.
    type Pending = { name: string; tag: string | null; owner: number; isPublic: number; users: Set<number>; groups: Set<number> };
    let batch: Pending[] = [];
    const summary: ImportSummary = { users: 0, groups: 0, plants: 0, grants: 0 };
    const flush = async () => {
      if (batch.length === 0) return;
      const { rows } = await client.query<{ id: string }>(
        `SELECT nextval(pg_get_serial_sequence('plants', 'id'))::text AS id FROM generate_series(1, $1)`,
        [batch.length],
      );
      const ids = rows.map((r) => Number(r.id)).sort((a, b) => a - b);
      const plantLines: string[] = [];
      const userGrantLines: string[] = [];
      const groupGrantLines: string[] = [];
      batch.forEach((p, i) => {
        const id = ids[i]!;
        plantLines.push(`${id}\t${copyText(p.name)}\t${p.tag === null ? '\\N' : copyText(p.tag)}\t${p.owner}\t${p.isPublic}\t${now}\n`);
        for (const u of p.users) userGrantLines.push(`${u}\t${id}\n`);
        for (const g of p.groups) groupGrantLines.push(`${g}\t${id}\n`);
      });
      // COPY writes the reserved ids into the identity column as given (like OVERRIDING SYSTEM VALUE).
      await copyInto(client, 'COPY plants (id, name, tag, owner_id, is_public, created_at) FROM STDIN', plantLines);
      // The plants are new, so a grant can only repeat within its own record; the Sets above removed those.
      await copyInto(client, 'COPY plant_user_grants (user_id, plant_id) FROM STDIN', userGrantLines);
      await copyInto(client, 'COPY plant_group_grants (group_id, plant_id) FROM STDIN', groupGrantLines);
      batch = [];
    };

    let done = 0;
    try {
      await client.query('BEGIN');
      for await (const records of batches) {
        for (const { line, record } of records) {
          switch (record.type) {
            case 'user': {
              await flush();
              const { rows } = await client.query<{ id: number }>(
                `INSERT INTO users (name, is_admin, created_at) VALUES ($1, coalesce($2::int, 0), $3)
                 ON CONFLICT (name) DO UPDATE SET is_admin = coalesce($2::int, users.is_admin) RETURNING id`,
                [record.name, record.admin === undefined ? null : Number(record.admin), now],
              );
              userIds.set(record.name, rows[0]!.id);
              summary.users++;
              break;
            }
            case 'group': {
              await flush();
              const { rows } = await client.query<{ id: number }>(
                `INSERT INTO groups (name, created_at) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`,
                [record.name, now],
              );
              const groupId = rows[0]!.id;
              groupIds.set(record.name, groupId);
              const members: number[] = [];
              for (const m of record.members ?? []) members.push(await lookup('users', userIds, m, line));
              if (members.length > 0) {
                await client.query(
                  'INSERT INTO group_members (group_id, user_id) SELECT $1, * FROM unnest($2::bigint[]) ON CONFLICT DO NOTHING',
                  [groupId, members],
                );
              }
              summary.groups++;
              break;
            }
            case 'plant': {
              const plant: Pending = {
                name: record.name,
                tag: record.tag ?? null,
                owner: await lookup('users', userIds, record.owner, line),
                isPublic: record.public ? 1 : 0,
                users: new Set(),
                groups: new Set(),
              };
              for (const entry of record.sharedWith ?? []) {
                const grantee = parseSharedWith(entry);
                if ('user' in grantee) plant.users.add(await lookup('users', userIds, grantee.user, line));
                else plant.groups.add(await lookup('groups', groupIds, grantee.group, line));
                summary.grants++;
              }
              batch.push(plant);
              summary.plants++;
              if (batch.length >= IMPORT_BATCH) await flush();
              break;
            }
          }
        }
        done += records.length;
        progress?.(done);
      }
      await flush();
      await client.query('COMMIT');
      progress?.(done);
      return summary;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => {});
      throw err;
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
