import BetterSqlite3 from 'better-sqlite3';
import { nameKey } from '../../catalogue/names.js';
import { KnownNames, type ImportedPlant, type ImportTarget } from '../catalogue-import.js';
import { EVERYTHING, LOGGED_TABLES } from '../change-log.js';
import { changeTriggerName } from '../migrations/0003-change-log.js';
import { beginWriting } from './writing-transactions.js';

/** The change-log triggers, by name, as SQLite stores them: an import drops them and restores them exactly. */
function changeTriggers(db: BetterSqlite3.Database): Array<{ name: string; sql: string }> {
  const names = Object.keys(LOGGED_TABLES).flatMap((table) =>
    (['insert', 'update', 'delete'] as const).map((op) => changeTriggerName(table as keyof typeof LOGGED_TABLES, op)),
  );
  return db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND name IN (${names.map(() => '?').join(', ')})`)
    .all(...names) as Array<{ name: string; sql: string }>;
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
      .prepare(
        `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'plants'), 0), coalesce((SELECT max(id) FROM plants), 0))`,
      )
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
    this.ownerIndexSql = this.db
      .prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = 'plants_by_owner'")
      .pluck()
      .get() as string | undefined;
    if (this.ownerIndexSql !== undefined) this.db.exec('DROP INDEX plants_by_owner');
  }
}

/**
 * An import into SQLite (see catalogue-import.ts for the flow): every record is written as it comes, in one
 * write transaction (BEGIN IMMEDIATE), synchronously.
 */
export class SqliteImport implements ImportTarget {
  readonly names: KnownNames;
  private readonly now = Date.now();
  private readonly statements;
  private plants: PlantWriter | undefined;
  private triggers: Array<{ name: string; sql: string }> = [];
  private readonly cacheSize: unknown;

  constructor(private readonly db: BetterSqlite3.Database) {
    this.statements = {
      upsertUser: db.prepare<{ name: string; admin: number | null; now: number; key: string }, { id: number }>(
        `INSERT INTO users (name, is_admin, created_at, name_key) VALUES (@name, coalesce(@admin, 0), @now, @key)
         ON CONFLICT (name) DO UPDATE SET is_admin = coalesce(@admin, users.is_admin) RETURNING id`,
      ),
      upsertGroup: db.prepare<{ name: string; now: number }, { id: number }>(
        `INSERT INTO groups (name, created_at) VALUES (@name, @now)
         ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id`,
      ),
      find: {
        user: db.prepare<[string], number>('SELECT id FROM users WHERE name = ?').pluck(true),
        group: db.prepare<[string], number>('SELECT id FROM groups WHERE name = ?').pluck(true),
      },
      addMember: db.prepare('INSERT INTO group_members (group_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING'),
      grantUser: db.prepare('INSERT INTO plant_user_grants (user_id, plant_id) VALUES (?, ?) ON CONFLICT DO NOTHING'),
      grantGroup: db.prepare('INSERT INTO plant_group_grants (group_id, plant_id) VALUES (?, ?) ON CONFLICT DO NOTHING'),
    };
    const { find } = this.statements;
    this.names = new KnownNames((what, name) => find[what].get(name));
    this.cacheSize = db.pragma('cache_size', { simple: true });
  }

  async begin(): Promise<void> {
    const { db } = this;
    // Every id this import writes was just read or inserted under its own write lock (BEGIN IMMEDIATE: no
    // other writer can delete a row meanwhile), so SQLite's per-row foreign-key checks can only pass; skipping
    // them makes a large import about 30% faster. The pragma cannot change inside a transaction.
    db.pragma('foreign_keys = OFF');
    // A 64 MB page cache for the import's one transaction (2 MB by default): index pages stay in memory instead
    // of being spilled to the WAL and read back; about 8% faster on a million plants.
    db.pragma('cache_size = -65536');
    try {
      await beginWriting(db);
    } catch (err) {
      this.restorePragmas();
      throw err;
    }
    // Row by row, the change log would double what an import writes; it records one broad change instead. The
    // triggers go and come back inside the transaction (no other writer runs meanwhile, nobody sees them gone).
    this.triggers = changeTriggers(db);
    for (const { name } of this.triggers) db.exec(`DROP TRIGGER ${name}`);
    this.plants = new PlantWriter(db, this.now);
  }

  next(): void {}

  user(name: string, admin: boolean | undefined): void {
    const row = this.statements.upsertUser.get({
      name,
      admin: admin === undefined ? null : Number(admin),
      now: this.now,
      key: nameKey(name),
    })!;
    this.names.learn('user', name, row.id);
  }

  group(name: string, memberIds: readonly number[]): void {
    const { id } = this.statements.upsertGroup.get({ name, now: this.now })!;
    this.names.learn('group', name, id);
    for (const userId of memberIds) this.statements.addMember.run(id, userId);
  }

  plant(plant: ImportedPlant): void {
    const plantId = this.plants!.add(plant.name, plant.tag, plant.ownerId, plant.isPublic ? 1 : 0);
    if (plant.userIds.length > 0) for (const userId of plant.userIds) this.statements.grantUser.run(userId, plantId);
    if (plant.groupIds.length > 0) for (const groupId of plant.groupIds) this.statements.grantGroup.run(groupId, plantId);
  }

  async commit(): Promise<void> {
    const { db } = this;
    this.plants!.finish();
    for (const { sql } of this.triggers) db.exec(sql);
    db.prepare('INSERT INTO change_log (table_name) VALUES (?)').run(EVERYTHING);
    db.exec('COMMIT');
    this.restorePragmas();
  }

  async rollback(err: unknown): Promise<unknown> {
    if (this.db.inTransaction) this.db.exec('ROLLBACK');
    this.restorePragmas();
    return err;
  }

  private restorePragmas(): void {
    this.db.pragma(`cache_size = ${String(this.cacheSize)}`);
    this.db.pragma('foreign_keys = ON');
  }
}
