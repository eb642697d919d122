import { mkdirSync, statSync, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect } from 'kysely';
import { exportRecord, parseSharedWith, unknownName } from '../../catalogue/record-fields.js';
import type { CatalogueRecord } from '../../catalogue/records.js';
import { unavailable } from '../../errors.js';
import { KyselyStore } from '../kysely-store.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
import { mergeSortedIds } from '../merge.js';
import type {
  HotQuery,
  Store,
  ImportProgress,
  ImportSummary,
  ListedPlant,
  NumberedRecord,
  PageRequest,
  TokenCredential,
  UserCredential,
} from '../store.js';

type PlantRow = [id: number, name: string, tag: string | null];

const toListed = (rows: PlantRow[]): ListedPlant[] => rows.map(([id, name, tag]) => ({ id, name, tag }));

/**
 * The listing is a k-way merge of index range reads, each in id order from `after` and cut at `limit`:
 * public plants, owned plants, plants granted to the user, and plants granted to each of the user's groups
 * (stored memberships plus a JWT's groups claim). A page costs about (3 + groups) x `limit` index entries,
 * whatever the size of the catalogue; only the ids of the final page are looked up in \`plants\`.
 */
const BRANCH_SQL = {
  public: 'SELECT id FROM plants WHERE is_public = 1 AND id > ? ORDER BY id LIMIT ?',
  owned: 'SELECT id FROM plants WHERE owner_id = ? AND id > ? ORDER BY id LIMIT ?',
  userGrants: 'SELECT plant_id FROM plant_user_grants WHERE user_id = ? AND plant_id > ? ORDER BY plant_id LIMIT ?',
  groupGrants: 'SELECT plant_id FROM plant_group_grants WHERE group_id = ? AND plant_id > ? ORDER BY plant_id LIMIT ?',
  memberOf: 'SELECT group_id FROM group_members WHERE user_id = ?',
  groupsNamed: 'SELECT id FROM groups WHERE name IN (SELECT value FROM json_each(?))',
  plantsById: 'SELECT id, name, tag FROM plants WHERE id IN (SELECT value FROM json_each(?)) ORDER BY id',
  all: 'SELECT id, name, tag FROM plants WHERE id > ? ORDER BY id LIMIT ?',
} as const;

export interface SqliteOptions {
  /** A file path, or `:memory:` for a private in-memory database. */
  path: string;
}

type Statements = ReturnType<typeof prepareStatements>;
type FileEventListener = Parameters<NonNullable<Store['followFile']>>[1];

function prepareStatements(sqlite: BetterSqlite3.Database) {
  const prepared = Object.fromEntries(Object.entries(BRANCH_SQL).map(([name, sql]) => [name, sqlite.prepare(sql)])) as {
    [K in keyof typeof BRANCH_SQL]: BetterSqlite3.Statement<unknown[]>;
  };
  for (const name of ['public', 'owned', 'userGrants', 'groupGrants', 'memberOf', 'groupsNamed'] as const) prepared[name].pluck(true);
  prepared.plantsById.raw(true);
  prepared.all.raw(true);
  return {
    ...prepared,
    findToken: sqlite.prepare<[Buffer]>(
      `SELECT t.id AS tokenId, t.user_id AS userId, u.is_admin AS admin, t.expires_at AS expiresAt, t.revoked_at AS revokedAt
       FROM tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?`,
    ),
    findUser: sqlite.prepare<[string]>('SELECT id AS userId, is_admin AS admin FROM users WHERE name = ?'),
    otherCommits: sqlite.prepare<[], number>('PRAGMA data_version').pluck(true),
    ownChanges: sqlite.prepare<[], number>('SELECT total_changes()').pluck(true),
  };
}

/** Opens the file (creating it unless `mustExist`), sets the pragmas and brings the schema up to date. */
async function openDatabase(path: string, mustExist: boolean): Promise<{ sqlite: BetterSqlite3.Database; db: Kysely<Database> }> {
  if (path !== ':memory:' && !mustExist) mkdirSync(dirname(path), { recursive: true });
  const sqlite = new BetterSqlite3(path, { fileMustExist: mustExist });
  try {
    sqlite.pragma('journal_mode = WAL');
    // FULL: a commit is on disk before it is acknowledged, so a crash or power loss loses nothing committed.
    sqlite.pragma('synchronous = FULL');
    sqlite.pragma('foreign_keys = ON');
    // The server reads while the CLI writes; wait for a writer rather than failing at once.
    sqlite.pragma('busy_timeout = 5000');
    const db = new Kysely<Database>({ dialect: new SqliteDialect({ database: sqlite }) });
    await migrateToLatest(db, 'sqlite');
    return { sqlite, db };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}

/** Plants per INSERT statement once an import writes in bulk. */
const PLANTS_PER_INSERT = 32;
/** The columns an import writes a plant's row to, in the order its values are queued. */
const PLANT_COLUMNS = ['id', 'name', 'tag', 'owner_id', 'is_public', 'created_at'] as const;

/**
 * Writes an import's plants, inside its transaction, with ids assigned here the way AUTOINCREMENT would (after
 * the largest ever used), so that grants can refer to a plant before its row is written.
 *
 * Once the import has written more plants than the table held before, it switches to bulk writing: the
 * `plants_by_owner` index is dropped and built again from the whole table before the commit (sorting the
 * table once costs less than as many random index inserts as it has rows), and plants go in multi-row
 * INSERTs. Multi-row INSERTs only pay without that index; with it they are slower than one row at a time.
 * Readers never see the index missing: the drop and the rebuild commit together.
 */
class PlantWriter {
  private readonly one: BetterSqlite3.Statement<unknown[]>;
  private readonly many: BetterSqlite3.Statement<unknown[]>;
  private nextId: number;
  /** Plants the table held before the import, or more: the largest id ever used, deleted plants included. */
  private readonly before: number;
  /** The dropped index's own SQL while writing in bulk, to build it again exactly as it was. */
  private ownerIndexSql: string | undefined;
  private bulk = false;
  private readonly pending: unknown[] = [];

  constructor(
    private readonly db: BetterSqlite3.Database,
    private readonly createdAt: number,
  ) {
    const insert = `INSERT INTO plants (${PLANT_COLUMNS.join(', ')}) VALUES `;
    const row = `(${PLANT_COLUMNS.map(() => '?').join(', ')})`;
    this.one = db.prepare(insert + row);
    this.many = db.prepare(insert + Array<string>(PLANTS_PER_INSERT).fill(row).join(', '));
    this.before = db
      .prepare(`SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'plants'), 0), coalesce((SELECT max(id) FROM plants), 0))`)
      .pluck()
      .get() as number;
    this.nextId = this.before + 1;
  }

  /** Writes (or queues) one plant and returns its id. */
  add(name: string, tag: string | null, ownerId: number, isPublic: number): number {
    const id = this.nextId++;
    if (!this.bulk && id - this.before > this.before) this.startBulk();
    if (!this.bulk) {
      this.one.run(id, name, tag, ownerId, isPublic, this.createdAt);
      return id;
    }
    this.pending.push(id, name, tag, ownerId, isPublic, this.createdAt);
    if (this.pending.length === PLANTS_PER_INSERT * PLANT_COLUMNS.length) {
      this.many.run(this.pending);
      this.pending.length = 0;
    }
    return id;
  }

  /** Writes what is queued and builds the index again; the caller commits. */
  finish(): void {
    const width = PLANT_COLUMNS.length;
    for (let i = 0; i < this.pending.length; i += width) this.one.run(this.pending.slice(i, i + width));
    this.pending.length = 0;
    if (this.ownerIndexSql !== undefined) this.db.exec(this.ownerIndexSql);
  }

  private startBulk(): void {
    this.bulk = true;
    this.ownerIndexSql = this.db.prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'plants_by_owner'").pluck().get() as
      | string
      | undefined;
    if (this.ownerIndexSql !== undefined) this.db.exec('DROP INDEX plants_by_owner');
  }
}

const sameFile = (a: Stats, b: Stats) => a.dev === b.dev && a.ino === b.ino;

/** Added to the data version on every reopen, so that no cached answer of the old file survives. */
const REOPEN_VERSION_STEP = 2 ** 40;

/** The embedded default backend: one SQLite file in WAL mode, durable on commit. */
export class SqliteStore extends KyselyStore {
  readonly backend = 'sqlite' as const;
  private closed = false;

  private stmts: Statements;
  private otherCommits = 0;
  private otherCommitsReadAt = -Infinity;
  private versionOffset = 0;
  /** The file followed (followFile); while it is gone the connection is closed, so every read answers 503. */
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
    super(db);
    this.stmts = prepareStatements(sqlite);
  }

  /** Checks every `intervalMs` that the file at the path is still the one open (see checkFile). The server calls this. */
  followFile(intervalMs: number, onEvent: FileEventListener): void {
    if (this.options.path === ':memory:' || this.watcher) return;
    this.identity = statSync(this.options.path);
    this.onFileEvent = onEvent;
    this.watcher = setInterval(() => (this.watching ??= this.checkFile().finally(() => (this.watching = undefined))), intervalMs);
    this.watcher.unref();
  }

  static async open(options: SqliteOptions): Promise<SqliteStore> {
    const { sqlite, db } = await openDatabase(options.path, false);
    return new SqliteStore(sqlite, db, options);
  }

  /**
   * Follows the file at the path: when it is removed, the open connection is closed (another process creating
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
      this.sqlite = sqlite;
      this.db = db;
      this.stmts = prepareStatements(sqlite);
      this.identity = statSync(path);
      this.otherCommitsReadAt = -Infinity;
      this.versionOffset += REOPEN_VERSION_STEP;
      this.lastReopenFailure = undefined;
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

  /** Runs a hot-path read (timed while metrics are on), mapping unavailability to a DomainError. */
  private read<T>(name: HotQuery, query: () => T): T {
    const timer = this.queryTimer;
    const started = timer ? performance.now() : 0;
    try {
      return query();
    } catch (err) {
      if (this.isUnavailable(err)) throw unavailable('database unavailable');
      throw err;
    } finally {
      timer?.(name, (performance.now() - started) / 1000);
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.watcher);
    await this.watching;
    if (this.sqlite.open) await this.db.destroy();
  }

  protected isUniqueViolation(err: unknown): boolean {
    const code = (err as { code?: string }).code;
    return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY';
  }

  async findToken(hash: Buffer): Promise<TokenCredential | undefined> {
    const row = this.read('find_token', () => this.stmts.findToken.get(hash)) as
      | { tokenId: number; userId: number; admin: number; expiresAt: number | null; revokedAt: number | null }
      | undefined;
    if (!row) return undefined;
    return { tokenId: row.tokenId, userId: row.userId, admin: row.admin === 1, expiresAt: row.expiresAt, revokedAt: row.revokedAt };
  }

  async findUser(name: string): Promise<UserCredential | undefined> {
    const row = this.read('find_user', () => this.stmts.findUser.get(name)) as { userId: number; admin: number } | undefined;
    return row && { userId: row.userId, admin: row.admin === 1 };
  }

  async listPlantsVisibleTo(userId: number, { after, limit }: PageRequest, extraGroups: readonly string[] = []): Promise<ListedPlant[]> {
    const s = this.stmts;
    return this.read('visible_plants', () => {
      const groups = new Set(s.memberOf.all(userId) as number[]);
      if (extraGroups.length > 0) for (const id of s.groupsNamed.all(JSON.stringify(extraGroups)) as number[]) groups.add(id);
      const branches = [
        s.public.all(after, limit) as number[],
        s.owned.all(userId, after, limit) as number[],
        s.userGrants.all(userId, after, limit) as number[],
      ];
      for (const group of groups) branches.push(s.groupGrants.all(group, after, limit) as number[]);
      const ids = mergeSortedIds(branches, limit);
      if (ids.length === 0) return [];
      return toListed(s.plantsById.all(JSON.stringify(ids)) as PlantRow[]);
    });
  }

  async listAllPlants({ after, limit }: PageRequest): Promise<ListedPlant[]> {
    return toListed(this.read('all_plants', () => this.stmts.all.all(after, limit)) as PlantRow[]);
  }

  /**
   * `PRAGMA data_version` moves when another connection (a worker, the CLI) commits; it costs a few
   * microseconds, so it is read at most once a millisecond: another process's change is seen within 1 ms.
   * `total_changes()` counts this connection's own writes and is read every time (it is nearly free).
   */
  dataVersion(): number | undefined {
    if (!this.sqlite.open) return undefined;
    const now = performance.now();
    if (now - this.otherCommitsReadAt >= 1) {
      this.otherCommits = this.stmts.otherCommits.get()!;
      this.otherCommitsReadAt = now;
    }
    return this.versionOffset + this.otherCommits + this.stmts.ownChanges.get()!;
  }

  async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    const db = this.sqlite;
    const now = Date.now();
    const upsertUser = db.prepare<{ name: string; admin: number | null; now: number }, { id: number }>(
      `INSERT INTO users (name, is_admin, created_at) VALUES (@name, coalesce(@admin, 0), @now)
       ON CONFLICT (name) DO UPDATE SET is_admin = coalesce(@admin, users.is_admin) RETURNING id`,
    );
    const upsertGroup = db.prepare<{ name: string; now: number }, { id: number }>(
      `INSERT INTO groups (name, created_at) VALUES (@name, @now)
       ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`,
    );
    const findUser = db.prepare<[string], { id: number }>('SELECT id FROM users WHERE name = ?');
    const findGroup = db.prepare<[string], { id: number }>('SELECT id FROM groups WHERE name = ?');
    const addMember = db.prepare('INSERT INTO group_members (group_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING');
    const grantUser = db.prepare('INSERT INTO plant_user_grants (user_id, plant_id) VALUES (?, ?) ON CONFLICT DO NOTHING');
    const grantGroup = db.prepare('INSERT INTO plant_group_grants (group_id, plant_id) VALUES (?, ?) ON CONFLICT DO NOTHING');

    // Name-to-id caches grow with users and groups, never with plants, so memory stays flat on big imports.
    const userIds = new Map<string, number>();
    const groupIds = new Map<string, number>();
    const resolver = (what: 'user' | 'group', cache: Map<string, number>, find: BetterSqlite3.Statement<[string], { id: number }>) =>
      (name: string, line: number): number => {
        let id = cache.get(name);
        if (id === undefined) {
          id = find.get(name)?.id;
          if (id === undefined) throw unknownName(what, name, line);
          cache.set(name, id);
        }
        return id;
      };
    const userId = resolver('user', userIds, findUser);
    const groupId = resolver('group', groupIds, findGroup);

    const summary: ImportSummary = { users: 0, groups: 0, plants: 0, grants: 0 };
    let done = 0;
    // Every id this import writes was just read or inserted under its own write lock (BEGIN IMMEDIATE: no
    // other writer can delete a row meanwhile), so SQLite's per-row foreign-key checks can only pass; skipping
    // them makes a large import about 30% faster. The pragma cannot change inside a transaction.
    db.pragma('foreign_keys = OFF');
    // A 64 MB page cache for the import's one transaction (2 MB by default): index pages stay in memory instead
    // of being spilled to the WAL and read back; about 8% faster on a million plants.
    const cacheSize = db.pragma('cache_size', { simple: true });
    db.pragma('cache_size = -65536');
    db.exec('BEGIN IMMEDIATE');
    try {
      const plants = new PlantWriter(db, now);
      for await (const batch of batches) {
        for (const { line, record } of batch) {
          switch (record.type) {
            case 'user': {
              const id = upsertUser.get({ name: record.name, admin: record.admin === undefined ? null : Number(record.admin), now })!.id;
              userIds.set(record.name, id);
              summary.users++;
              break;
            }
            case 'group': {
              const id = upsertGroup.get({ name: record.name, now })!.id;
              groupIds.set(record.name, id);
              for (const member of record.members ?? []) addMember.run(id, userId(member, line));
              summary.groups++;
              break;
            }
            case 'plant': {
              const plantId = plants.add(record.name, record.tag ?? null, userId(record.owner, line), record.public ? 1 : 0);
              for (const entry of record.sharedWith ?? []) {
                const grantee = parseSharedWith(entry);
                if ('user' in grantee) grantUser.run(userId(grantee.user, line), plantId);
                else grantGroup.run(groupId(grantee.group, line), plantId);
                summary.grants++;
              }
              summary.plants++;
              break;
            }
          }
        }
        done += batch.length;
        progress?.(done);
      }
      plants.finish();
      db.exec('COMMIT');
      progress?.(done);
      return summary;
    } catch (err) {
      if (db.inTransaction) db.exec('ROLLBACK');
      throw err;
    } finally {
      db.pragma(`cache_size = ${cacheSize}`);
      db.pragma('foreign_keys = ON');
    }
  }

  async *exportRecords(): AsyncGenerator<CatalogueRecord> {
    const db = this.sqlite;
    // One read transaction: the export is a consistent snapshot even while others write.
    db.exec('BEGIN');
    try {
      const users = db.prepare('SELECT name, is_admin FROM users ORDER BY id').raw(true);
      for (const [name, admin] of users.iterate() as Iterable<[string, number]>) yield exportRecord.user(name, admin === 1);
      const groups = db
        .prepare(
          `SELECT g.name, (SELECT json_group_array(name) FROM (
             SELECT u.name FROM group_members m JOIN users u ON u.id = m.user_id WHERE m.group_id = g.id ORDER BY u.id)) AS members
           FROM groups g ORDER BY g.id`,
        )
        .raw(true);
      for (const [name, members] of groups.iterate() as Iterable<[string, string]>) {
        yield exportRecord.group(name, JSON.parse(members) as string[]);
      }
      const plants = db
        .prepare(
          `SELECT p.name, p.tag, u.name, p.is_public,
             (SELECT json_group_array(name) FROM (
                SELECT gu.name FROM plant_user_grants g JOIN users gu ON gu.id = g.user_id WHERE g.plant_id = p.id ORDER BY gu.id)),
             (SELECT json_group_array(name) FROM (
                SELECT gr.name FROM plant_group_grants g JOIN groups gr ON gr.id = g.group_id WHERE g.plant_id = p.id ORDER BY gr.id))
           FROM plants p JOIN users u ON u.id = p.owner_id ORDER BY p.id`,
        )
        .raw(true);
      type Row = [string, string | null, string, number, string, string];
      for (const [name, tag, owner, isPublic, users, groups] of plants.iterate() as Iterable<Row>) {
        yield exportRecord.plant(name, tag, owner, isPublic === 1, JSON.parse(users) as string[], JSON.parse(groups) as string[]);
      }
    } finally {
      if (db.inTransaction) db.exec('COMMIT');
    }
  }
}
