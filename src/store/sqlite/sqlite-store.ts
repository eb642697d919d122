import { existsSync, mkdirSync, statSync, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely } from 'kysely';
import { exportRecord, parseSharedWith, unknownName } from '../../catalogue/record-fields.js';
import { nameKey } from '../../catalogue/names.js';
import type { CatalogueRecord } from '../../catalogue/records.js';
import { notFound, unavailable } from '../../errors.js';
import { CHANGE_LOG_PRUNE_EVERY_MS, CHANGE_LOG_RETENTION_MS, EVERYTHING, LOGGED_TABLES } from '../change-log.js';
import { KyselyStore } from '../kysely-store.js';
import { changeTriggerName } from '../migrations/0003-change-log.js';
import { migrateToLatest } from '../migrations/index.js';
import type { Database } from '../schema.js';
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
  VisiblePage,
} from '../store.js';
import { SqliteReader } from './sqlite-reader.js';
import { beginWriting, BUSY_TIMEOUT_MS, WritingTransactionsDialect } from './writing-transactions.js';

export interface SqliteOptions {
  /** A file path, or `:memory:` for a private in-memory database. */
  path: string;
  /** Create the file (and its folders) when it is not there; otherwise its absence is an error. Default true. */
  create?: boolean;
}

type FileEventListener = Parameters<NonNullable<Store['followFile']>>[1];

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
    sqlite.pragma(`busy_timeout = ${BUSY_TIMEOUT_MS}`);
    const db = new Kysely<Database>({ dialect: new WritingTransactionsDialect(sqlite) });
    await migrateToLatest(db, 'sqlite');
    return { sqlite, db };
  } catch (err) {
    sqlite.close();
    throw err;
  }
}

/** The change-log triggers, by name, as SQLite stores them: an import drops them and restores them exactly. */
function changeTriggers(db: BetterSqlite3.Database): Array<{ name: string; sql: string }> {
  const names = Object.keys(LOGGED_TABLES).flatMap((table) =>
    (['insert', 'update', 'delete'] as const).map((op) => changeTriggerName(table as keyof typeof LOGGED_TABLES, op)),
  );
  return db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN (${names.map(() => '?').join(', ')})`)
    .all(...names) as Array<{ name: string; sql: string }>;
}

/**
 * One pruning pass (see CHANGE_LOG_RETENTION_MS): deletes the rows that existed at the previous pass, if that
 * was at least the retention ago, and marks where this pass stands. Gives up at once when another process
 * holds the write lock (this connection is synchronous: waiting would hold up every request); the next pass
 * tries again.
 */
function pruneChangeLog(db: BetterSqlite3.Database, now: number): void {
  const timeout = db.pragma('busy_timeout', { simple: true });
  db.pragma('busy_timeout = 0');
  try {
    db.transaction(() => {
      const mark = db.prepare('SELECT mark_seq AS seq, mark_at AS at FROM change_log_state').get() as { seq: number; at: number };
      if (now - mark.at < CHANGE_LOG_RETENTION_MS) return;
      db.prepare('DELETE FROM change_log WHERE seq <= ?').run(mark.seq);
      db.prepare(
        'UPDATE change_log_state SET pruned_through = max(pruned_through, ?), mark_seq = coalesce((SELECT max(seq) FROM change_log), ?), mark_at = ?',
      ).run(mark.seq, mark.seq, now);
    }).immediate();
  } catch (err) {
    if (!/^SQLITE_BUSY/.test((err as { code?: string }).code ?? '')) throw err;
  } finally {
    db.pragma(`busy_timeout = ${timeout}`);
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

/** The embedded default backend: one SQLite file in WAL mode, durable on commit. */
export class SqliteStore extends KyselyStore {
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
    super(db);
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
    this.watcher = setInterval(() => (this.watching ??= this.checkFile().finally(() => (this.watching = undefined))), intervalMs);
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

  /** Runs a hot-path read (timed while metrics are on), mapping unavailability to a DomainError. Synchronous. */
  private read<T>(name: HotQuery, query: () => T): T {
    const timer = this.queryTimer;
    const started = timer ? performance.now() : 0;
    try {
      if (!this.reader.open) throw unavailable('database unavailable');
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
    clearInterval(this.pruner);
    await this.watching;
    this.reader.close();
    if (this.sqlite.open) await this.db.destroy();
  }

  protected async lockNameKey(): Promise<void> {
    // Nothing to do: the store's transactions are writing ones (BEGIN IMMEDIATE), one at a time.
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
    const summary = await this.db.connection().execute(() => this.importLocked(batches, progress));
    await this.changes.catchUp();
    return summary;
  }

  private async importLocked(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
    const db = this.sqlite;
    const now = Date.now();
    const upsertUser = db.prepare<{ name: string; admin: number | null; now: number; key: string }, { id: number }>(
      `INSERT INTO users (name, is_admin, created_at, name_key) VALUES (@name, coalesce(@admin, 0), @now, @key)
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
    try {
      await beginWriting(db);
      // Row by row, the change log would double what an import writes; it records one broad change instead. The
      // triggers go and come back inside the transaction (no other writer runs meanwhile, nobody sees them gone).
      const triggers = changeTriggers(db);
      for (const { name } of triggers) db.exec(`DROP TRIGGER ${name}`);
      const plants = new PlantWriter(db, now);
      for await (const batch of batches) {
        for (const { line, record } of batch) {
          switch (record.type) {
            case 'user': {
              const admin = record.admin === undefined ? null : Number(record.admin);
              const id = upsertUser.get({ name: record.name, admin, now, key: nameKey(record.name) })!.id;
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
      for (const { sql } of triggers) db.exec(sql);
      db.prepare('INSERT INTO change_log (table_name) VALUES (?)').run(EVERYTHING);
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
