import type BetterSqlite3 from 'better-sqlite3';

/** Plants per INSERT statement once an import writes in bulk. */
const PLANTS_PER_INSERT = 32;
/** The columns an import writes a plant's row to, in the order its values are queued. */
const PLANT_COLUMNS = ['id', 'api_id', 'name', 'tag', 'owner_id', 'is_public', 'created_at'] as const;

/**
 * Writes an import's plants, inside its transaction, with ids assigned here the way AUTOINCREMENT would (after
 * the largest ever used), so that grants can refer to a plant before its row is written.
 *
 * Once the import has written more plants than the table held before, it switches to bulk writing: the
 * `plants_by_owner` and `plants_by_api_id` indexes are dropped and built again from the whole table before the commit (sorting the
 * table once costs less than as many random index inserts as it has rows), and plants go in multi-row
 * INSERTs. Multi-row INSERTs only pay without that index; with it they are slower than one row at a time.
 * Readers never see the index missing: the drop and the rebuild commit together.
 */
export class PlantWriter {
  private readonly one: BetterSqlite3.Statement<unknown[]>;
  private readonly many: BetterSqlite3.Statement<unknown[]>;
  private nextId: number;
  /** Plants the table held before the import, or more: the largest position ever used, deleted plants included. */
  private readonly before: number;

  get largestPosition(): number {
    return this.before;
  }
  /** The dropped indexes' own SQL while writing in bulk, to build them again exactly as they were. */
  private droppedIndexes: string[] = [];
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

  /** Writes (or queues) one plant and returns its catalogue position. */
  add(apiId: number, name: string, tag: string | null, ownerId: number, isPublic: number): number {
    const id = this.nextId++;
    if (!this.bulk && id - this.before > this.before) this.startBulk();
    if (!this.bulk) {
      this.one.run(id, apiId, name, tag, ownerId, isPublic, this.createdAt);
      return id;
    }
    this.pending.push(id, apiId, name, tag, ownerId, isPublic, this.createdAt);
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
    // Building the unique index again is where an id given twice is found: the import fails and rolls back.
    for (const sql of this.droppedIndexes) this.db.exec(sql);
  }

  private startBulk(): void {
    this.bulk = true;
    this.droppedIndexes = this.db
      .prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND name IN ('plants_by_owner', 'plants_by_api_id')")
      .pluck()
      .all() as string[];
    this.db.exec('DROP INDEX IF EXISTS plants_by_owner; DROP INDEX IF EXISTS plants_by_api_id');
  }
}
