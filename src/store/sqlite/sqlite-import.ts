import BetterSqlite3 from 'better-sqlite3';
import { nameKey } from '../../catalogue/names.js';
import {
  FIRST_REPEATED_PLANT_ID_SQL,
  KnownNames,
  type StoredName,
  TakenPlantId,
  ImportedLookalike,
  GroupGrowth,
  grownGroupsSql,
  type ImportedPlant,
  type ImportTarget,
} from '../catalogue-import.js';
import { EVERYTHING } from '../change-log.js';
import { LARGEST_USED_PLANT_ID_SQL, raiseUsedIdsSql } from '../repositories/plants.js';
import { importedLookalikeSql, LAST_USER_SQL } from '../repositories/users.js';
import { importedPlantEvents, LAST_EVENT_SQL } from '../webhook-outbox.js';
import { isTakenId, ImportPlantWriter } from './import-plant-writer.js';
import { beginWriting } from './writing-transactions.js';

/** A new webhook message id in SQL: SQLite's column draws none (migration 0010), so the import's statement does. */
const SQLITE_MESSAGE_ID = "'msg_' || lower(hex(randomblob(16)))";

/** The tables an import writes. */
const IMPORTED_TABLES = ['users', 'groups', 'group_members', 'plants', 'plant_user_grants', 'plant_group_grants', 'plant_member_grants'];

/**
 * The triggers of the tables an import writes, as SQLite stores them: it drops them and restores them exactly, and
 * does their work in bulk (a trigger, even one whose condition is false, costs every row). They log changes (the
 * import logs one broad change), number plants without an id (the import numbers its plants itself), raise
 * webhook events (the import raises them in one statement), keep the member grants (one statement too) and give
 * grants their plants' tags (the import writes them).
 */
function importedTableTriggers(db: BetterSqlite3.Database): Array<{ name: string; sql: string }> {
  return db
    .prepare(`SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN (${IMPORTED_TABLES.map(() => '?').join(', ')})`)
    .all(...IMPORTED_TABLES) as Array<{ name: string; sql: string }>;
}

/**
 * An import into SQLite (see catalogue-import.ts for the flow): every record is written as it comes, in one
 * write transaction (BEGIN IMMEDIATE), synchronously.
 */
export class SqliteImport implements ImportTarget {
  readonly names: KnownNames;
  private readonly now = Date.now();
  private readonly statements;
  private plants: ImportPlantWriter | undefined;
  private lastUserBefore = 0;
  /** The groups the import wrote (new ones, and existing ones it may have given members) or shared plants with. */
  private readonly growth = new GroupGrowth();
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
    };
    const { find } = this.statements;
    this.names = new KnownNames((what, names) => {
      const found: StoredName[] = [];
      for (const name of names) {
        const id = find[what].get(name);
        if (id !== undefined) found.push({ name, id });
      }
      return found;
    });
    this.cacheSize = db.pragma('cache_size', { simple: true });
  }

  async begin(): Promise<number> {
    const { db } = this;
    // Every id this import writes was just read or inserted under its own write lock (BEGIN IMMEDIATE: no
    // other writer can delete a row meanwhile), so SQLite's per-row foreign-key checks can only pass, and are
    // skipped. The pragma cannot change inside a transaction.
    db.pragma('foreign_keys = OFF');
    // A 64 MB page cache for the import's one transaction (2 MB by default): index pages stay in memory instead
    // of being spilled to the WAL and read back.
    db.pragma('cache_size = -65536');
    try {
      await beginWriting(db);
    } catch (err) {
      this.restorePragmas();
      throw err;
    }
    // Row by row, the change log would double what an import writes; it records one broad change instead. The
    // triggers go and come back inside the transaction (no other writer runs meanwhile, nobody sees them gone).
    this.triggers = importedTableTriggers(db);
    for (const { name } of this.triggers) db.exec(`DROP TRIGGER ${name}`);
    this.plants = new ImportPlantWriter(db, this.now);
    this.lastUserBefore = db.prepare(LAST_USER_SQL).pluck().get() as number;
    return Number(db.prepare(LARGEST_USED_PLANT_ID_SQL).pluck().get() ?? 0);
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
    let added = 0;
    for (const userId of memberIds) added += this.statements.addMember.run(id, userId).changes;
    this.growth.add(id, 0, added);
  }

  plant(plant: ImportedPlant): void {
    for (const id of plant.groupIds) this.growth.add(id, 1, 0);
    this.plants!.add(plant);
  }

  async commit(usedIds: number): Promise<void> {
    const { db } = this;
    if (usedIds > 0) db.prepare(raiseUsedIdsSql('@largest')).run({ largest: usedIds });
    const columns = this.growth.columns();
    const [ids, plants, members] = columns.map((column) => JSON.stringify(column));
    const growth =
      columns[0].length === 0
        ? []
        : grownGroupsSql({
            ids: { sql: '(SELECT value FROM json_each(?))', values: [ids] },
            growth: {
              sql:
                '(SELECT i.value AS group_id, p.value AS plants, m.value AS members FROM json_each(?) i ' +
                'JOIN json_each(?) p ON p.key = i.key JOIN json_each(?) m ON m.key = i.key) d',
              values: [ids, plants, members],
            },
            insertIgnoring: (insert) => insert.replace('INSERT INTO', 'INSERT OR IGNORE INTO'),
            lockGroups: undefined,
          });
    this.plants!.finish(() => {
      for (const { sql, values } of growth) db.prepare(sql).run(...values);
    });
    const lookalike = db.prepare(importedLookalikeSql((alias) => `${alias}id > ${this.lastUserBefore}`)).get() as
      { name: string; other: string } | undefined;
    if (lookalike !== undefined) throw new ImportedLookalike(lookalike.name, lookalike.other);
    const lastEvent = db.prepare(LAST_EVENT_SQL).pluck().get() as number;
    for (const statement of importedPlantEvents(
      { imported: undefined, messageId: SQLITE_MESSAGE_ID },
      this.plants!.largestPosition,
      lastEvent,
      this.now,
    ))
      db.exec(statement);
    for (const { sql } of this.triggers) db.exec(sql);
    db.prepare('INSERT INTO change_log (table_name) VALUES (?)').run(EVERYTHING);
    db.exec('COMMIT');
    this.restorePragmas();
  }

  async rollback(err: unknown): Promise<unknown> {
    const { db } = this;
    let reported = err;
    if (isTakenId(err) && db.inTransaction) {
      // Found when the index was built again after writing in bulk: both plants are in the table.
      const { id, position, earlier } = db.prepare(FIRST_REPEATED_PLANT_ID_SQL).get() as { id: number; position: number; earlier: number };
      const place = this.plants!.placeOf(position);
      // A repeat among stored plants alone is not the file's doing: the index was built from them before.
      if (place !== 'stored') reported = new TakenPlantId(id, place, this.plants!.placeOf(earlier));
    }
    if (db.inTransaction) db.exec('ROLLBACK');
    this.restorePragmas();
    return reported;
  }

  private restorePragmas(): void {
    this.db.pragma(`cache_size = ${String(this.cacheSize)}`);
    this.db.pragma('foreign_keys = ON');
  }
}
