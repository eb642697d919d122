import { FIELD_NAMES, fieldValues } from '../../catalogue/plant-fields.js';
import { ACCESS_PATHS } from '../../catalogue/access-rule.js';
import type BetterSqlite3 from 'better-sqlite3';
import { BULK_IMPORT_INDEXES, TakenPlantId, type ImportedPlant } from '../catalogue-import.js';
import { isUniqueViolationOf } from './sqlite-errors.js';

/** Rows per INSERT statement once an import writes in bulk, and per INSERT into the grants queued in TEMP. */
const ROWS_PER_INSERT = 32;
/**
 * Catalogue positions (the plants there are, and were) from which sorting in runs pays (see
 * ImportPlantWriter.sorting); the page cache then, in KiB (negative, as the pragma takes it); the sorter's helper threads.
 */
const SORT_IN_RUNS_FROM = 200_000;
const SORT_RUN_CACHE = -2048;
const SORT_THREADS = 2;
/** The columns an import writes a plant's row to, in the order its values are queued. */
const PLANT_COLUMNS = ['id', 'api_id', ...FIELD_NAMES, 'owner_id', 'is_public', 'created_at'];

/**
 * Writes an import's plants and their grants, inside its transaction, with catalogue positions assigned here
 * the way AUTOINCREMENT would (after the largest ever used), so that a grant can name its plant before the
 * plant's row is written.
 *
 * Once the import has written more plants than the table held before, it switches to bulk writing: the
 * indexes of BULK_IMPORT_INDEXES are dropped and built again from the whole tables before the commit (sorting
 * a table once costs less than as many random index inserts as it has rows), and plants go in multi-row
 * INSERTs. Multi-row INSERTs only pay without those indexes; with them they are slower than one row at a time.
 * Readers never see an index missing: the drop and the rebuild commit together.
 *
 * Grants are keyed by grantee, so in file order each one lands somewhere else in its table, and costs several
 * times a plant's row. They are queued in TEMP tables instead (appended, no index) and written at the end sorted
 * by grantee, so that they fill their table's pages in order.
 */
export class ImportPlantWriter {
  private readonly one: BetterSqlite3.Statement<unknown[]>;
  private readonly many: BetterSqlite3.Statement<unknown[]>;
  private nextId: number;
  /** Plants the table held before the import, or more: the largest position ever used, deleted plants included. */
  private readonly before: number;
  /** The dropped indexes' own SQL while writing in bulk, to build them again exactly as they were. */
  private droppedIndexes: string[] = [];
  private bulk = false;
  private readonly pending: unknown[] = [];
  private readonly grants: { user: GrantQueue; group: GrantQueue };

  get largestPosition(): number {
    return this.before;
  }

  constructor(
    private readonly db: BetterSqlite3.Database,
    private readonly createdAt: number,
  ) {
    const insert = `INSERT INTO plants (${PLANT_COLUMNS.join(', ')}) VALUES `;
    const row = `(${PLANT_COLUMNS.map(() => '?').join(', ')})`;
    this.one = db.prepare(insert + row);
    this.many = db.prepare(insert + Array<string>(ROWS_PER_INSERT).fill(row).join(', '));
    this.before = db
      .prepare(
        `SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'plants'), 0), coalesce((SELECT max(id) FROM plants), 0))`,
      )
      .pluck()
      .get() as number;
    this.nextId = this.before + 1;
    const { sharedWithUser: user, sharedWithGroup: group } = ACCESS_PATHS;
    this.grants = { user: new GrantQueue(db, user.table, user.key), group: new GrantQueue(db, group.table, group.key) };
  }

  /** Writes (or queues) one plant, queues its grants, and returns its catalogue position. */
  add(plant: ImportedPlant): number {
    const id = this.nextId++;
    if (!this.bulk && id - this.before > this.before) this.startBulk();
    const isPublic = plant.isPublic ? 1 : 0;
    if (this.bulk) {
      const { pending } = this;
      pending.push(id, plant.id);
      for (const name of FIELD_NAMES) pending.push(plant.fields[name] ?? null);
      pending.push(plant.ownerId, isPublic, this.createdAt);
      if (this.pending.length === ROWS_PER_INSERT * PLANT_COLUMNS.length) {
        this.many.run(this.pending);
        this.pending.length = 0;
      }
    } else {
      try {
        this.one.run(id, plant.id, ...fieldValues(plant.fields), plant.ownerId, isPublic, this.createdAt);
      } catch (err) {
        if (!isTakenId(err)) throw err;
        const earlier = this.db.prepare('SELECT id FROM plants WHERE api_id = ?').pluck().get(plant.id) as number;
        throw new TakenPlantId(plant.id, id - this.before, this.placeOf(earlier));
      }
    }
    // A grant carries its plant's tag (migration 0018), which the import writes itself, without the triggers.
    const tag = plant.fields.tag ?? null;
    for (const userId of plant.userIds) this.grants.user.add(userId, id, tag);
    for (const groupId of plant.groupIds) this.grants.group.add(groupId, id, tag);
    return id;
  }

  /** The place among the import's plants (1 for its first) of the plant at catalogue position `position`. */
  placeOf(position: number): number | 'stored' {
    return position > this.before ? position - this.before : 'stored';
  }

  /**
   * Writes what is queued, then what `derive` writes from it (the member grants), and builds the indexes again;
   * the caller commits.
   */
  finish(derive: () => void): void {
    const width = PLANT_COLUMNS.length;
    for (let i = 0; i < this.pending.length; i += width) this.one.run(this.pending.slice(i, i + width));
    this.pending.length = 0;
    this.sorting(() => {
      this.grants.user.write();
      this.grants.group.write();
      derive();
      // Building the unique index again is where an id given twice is found: the import fails and rolls back.
      for (const sql of this.droppedIndexes) this.db.exec(sql);
    });
  }

  /**
   * Runs `sorts` (statements that sort the tables' rows) in runs that fit the processor's cache once the tables
   * are large. SQLite sorts in memory up to the page cache's size, and merges sorted runs beyond it: runs of 2 MB
   * sorted by helper threads beat one run the size of the import's cache on large tables; below a few hundred
   * thousand rows one run in memory is as fast or faster.
   */
  private sorting(sorts: () => void): void {
    const { db } = this;
    if (this.nextId - 1 < SORT_IN_RUNS_FROM) return sorts();
    const cacheSize = db.pragma('cache_size', { simple: true }) as number;
    const threads = db.pragma('threads', { simple: true }) as number;
    db.pragma(`cache_size = ${SORT_RUN_CACHE}`);
    db.pragma(`threads = ${SORT_THREADS}`);
    try {
      sorts();
    } finally {
      db.pragma(`cache_size = ${cacheSize}`);
      db.pragma(`threads = ${threads}`);
    }
  }

  private startBulk(): void {
    this.bulk = true;
    this.droppedIndexes = this.db
      .prepare(`SELECT sql FROM sqlite_master WHERE type = 'index' AND name IN (${BULK_IMPORT_INDEXES.map(() => '?').join(', ')})`)
      .pluck()
      .all(...BULK_IMPORT_INDEXES) as string[];
    for (const name of BULK_IMPORT_INDEXES) this.db.exec(`DROP INDEX IF EXISTS ${name}`);
  }
}

/** SQLite's refusal of a public id already in the table. */
export const isTakenId = (err: unknown): boolean => isUniqueViolationOf(err, 'plants.api_id');

/**
 * One grant table's grants of an import, queued in a TEMP table of the import's connection (rolled back with
 * the import's transaction, gone with the connection) and written sorted by grantee.
 */
class GrantQueue {
  private readonly queue: string;
  private readonly many: BetterSqlite3.Statement<unknown[]>;
  private readonly pending: Array<number | string | null> = [];

  constructor(
    private readonly db: BetterSqlite3.Database,
    private readonly table: string,
    private readonly grantee: string,
  ) {
    this.queue = `temp.imported_${table}`;
    db.exec(`CREATE TEMP TABLE imported_${table} (grantee_id INTEGER NOT NULL, plant_id INTEGER NOT NULL, tag TEXT)`);
    this.many = db.prepare(`INSERT INTO ${this.queue} VALUES ${Array<string>(ROWS_PER_INSERT).fill('(?, ?, ?)').join(', ')}`);
  }

  add(granteeId: number, plantId: number, tag: string | null): void {
    this.pending.push(granteeId, plantId, tag);
    if (this.pending.length === 3 * ROWS_PER_INSERT) {
      this.many.run(this.pending);
      this.pending.length = 0;
    }
  }

  /** Writes the queued grants into their table, in the table's own order, and drops the queue. */
  write(): void {
    const { db, queue } = this;
    if (this.pending.length > 0) {
      const one = db.prepare(`INSERT INTO ${queue} VALUES (?, ?, ?)`);
      for (let i = 0; i < this.pending.length; i += 3) one.run(this.pending[i], this.pending[i + 1], this.pending[i + 2]);
      this.pending.length = 0;
    }
    db.exec(
      `INSERT INTO ${this.table} (${this.grantee}, plant_id, tag) SELECT grantee_id, plant_id, tag FROM ${queue}
       ORDER BY grantee_id, plant_id ON CONFLICT DO NOTHING`,
    );
    db.exec(`DROP TABLE ${queue}`);
  }
}
