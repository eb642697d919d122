import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { Awaitable } from '../../awaitable.js';
import { nameKey } from '../../catalogue/names.js';
import type { CatalogueRecord } from '../../catalogue/records.js';
import { KnownNames, type ImportedPlant, type ImportTarget } from '../catalogue-import.js';
import { EVERYTHING } from '../change-log.js';
import { BULK_LOAD_SETTING } from '../migrations/0003-change-log.js';

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

/** A batch of plants: their COPY rows (ids come later) and grants as (plant index, grantee id) pairs. */
type PlantBatch = { rows: PlantRows; userGrants: number[]; groupGrants: number[] };

const emptyBatch = (): PlantBatch => ({ rows: new PlantRows(), userGrants: [], groupGrants: [] });

/**
 * An import into PostgreSQL (see catalogue-import.ts for the flow), on one connection in one transaction.
 * Consecutive users are upserted by one statement, and so are consecutive groups, instead of a round trip each
 * (1,000 users took 0.5 s). Plants are written a batch at a time with ids reserved up front, so grants can refer
 * to them; each batch is three COPY streams (plants, user grants, group grants), far cheaper than INSERTs. A
 * batch is written while the next one is read and parsed (the database and Node each keep a CPU busy); every
 * other statement waits for that write first.
 */
export class PostgresImport implements ImportTarget {
  readonly names = new KnownNames((what, name) =>
    this.run<{ id: number }>(`SELECT id FROM ${what === 'user' ? 'users' : 'groups'} WHERE name = $1`, [name]).then(([row]) => row?.id),
  );
  private readonly now = Date.now();
  /** Users to upsert: a name repeated keeps its first place (the id it would have got) and the last admin flag given. */
  private users = new Map<string, number | null>();
  private groups = new Map<string, number[]>();
  private memberCount = 0;
  private plants = emptyBatch();
  /** The first batches are small so the database starts early; then up to IMPORT_BATCH plants a batch. */
  private batchSize = 1_000;
  /** The batch of plants being written, if any. */
  private writing: Promise<void> = Promise.resolve();
  private addKeys: string[] = [];

  constructor(private readonly client: pg.PoolClient) {}

  async begin(): Promise<void> {
    await this.client.query('BEGIN');
    // Like export: a bulk command, whose COPY of a batch or COMMIT may outlast a request's timeout.
    await this.client.query('SET LOCAL statement_timeout = 0');
    // Row by row, the change log would double what an import writes: it records one broad change instead.
    await this.client.query(`SET LOCAL ${BULK_LOAD_SETTING} = 'on'`);
    this.addKeys = (await dropKeysForFirstLoad(this.client)).add;
  }

  next(type: CatalogueRecord['type']): Awaitable<void> {
    if (this.users.size > 0 && type !== 'user') return this.writeUsers();
    if (this.groups.size > 0 && type !== 'group') return this.writeGroups();
    if (this.plants.rows.count > 0 && type !== 'plant') return this.flushPlants();
  }

  user(name: string, admin: boolean | undefined): Awaitable<void> {
    this.users.set(name, admin === undefined ? (this.users.get(name) ?? null) : Number(admin));
    if (this.users.size >= IMPORT_BATCH) return this.writeUsers();
  }

  group(name: string, memberIds: readonly number[]): Awaitable<void> {
    const members = this.groups.get(name) ?? [];
    this.groups.set(name, members);
    members.push(...memberIds);
    this.memberCount += memberIds.length;
    if (this.groups.size + this.memberCount >= IMPORT_BATCH) return this.writeGroups();
  }

  plant(plant: ImportedPlant): Awaitable<void> {
    const { rows, userGrants, groupGrants } = this.plants;
    const index = rows.count;
    for (const id of plant.userIds) userGrants.push(index, id);
    for (const id of plant.groupIds) groupGrants.push(index, id);
    const tag = plant.tag === null ? '\\N' : copyText(plant.tag);
    // A plant's COPY row is built when it is read, all but the id.
    rows.add(`\t${copyText(plant.name)}\t${tag}\t${plant.ownerId}\t${plant.isPublic ? 1 : 0}\t${this.now}\n`);
    if (rows.count >= this.batchSize) return this.flushPlants();
  }

  async commit(): Promise<void> {
    if (this.users.size > 0) await this.writeUsers();
    if (this.groups.size > 0) await this.writeGroups();
    if (this.plants.rows.count > 0) await this.flushPlants();
    await this.writing;
    for (const statement of this.addKeys) await this.client.query(statement);
    await this.client.query('INSERT INTO change_log (table_name) VALUES ($1)', [EVERYTHING]);
    await this.client.query('COMMIT');
  }

  async rollback(err: unknown): Promise<unknown> {
    // A batch still being written holds earlier lines of the file than the reader's error: report its error.
    const earlier = await this.writing.then(
      () => undefined,
      (e: unknown) => e,
    );
    await this.client.query('ROLLBACK').catch(() => {});
    return earlier ?? err;
  }

  private async run<R extends pg.QueryResultRow>(text: string, values: unknown[]): Promise<R[]> {
    await this.writing;
    return (await this.client.query<R>(text, values)).rows;
  }

  private async writeUsers(): Promise<void> {
    const users = this.users;
    this.users = new Map();
    const rows = await this.run<{ id: number; name: string }>(
      `WITH input AS (SELECT * FROM unnest($1::text[], $2::int[], $4::text[]) WITH ORDINALITY AS u (name, admin, key, n))
       INSERT INTO users (name, is_admin, created_at, name_key) SELECT name, coalesce(admin, 0), $3, key FROM input ORDER BY n
       ON CONFLICT (name) DO UPDATE SET is_admin = coalesce(
         ((SELECT jsonb_object_agg(name, admin) FROM input WHERE admin IS NOT NULL) ->> excluded.name)::int, users.is_admin)
       RETURNING id, name`,
      [[...users.keys()], [...users.values()], this.now, [...users.keys()].map(nameKey)],
    );
    for (const { id, name } of rows) this.names.learn('user', name, id);
  }

  private async writeGroups(): Promise<void> {
    const groups = this.groups;
    const memberCount = this.memberCount;
    this.groups = new Map();
    this.memberCount = 0;
    const rows = await this.run<{ id: number; name: string }>(
      `INSERT INTO groups (name, created_at) SELECT name, $2 FROM unnest($1::text[]) WITH ORDINALITY AS g (name, n) ORDER BY n
       ON CONFLICT (name) DO UPDATE SET name = excluded.name RETURNING id, name`,
      [[...groups.keys()], this.now],
    );
    const ids = new Map(rows.map(({ id, name }) => [name, id]));
    for (const [name, id] of ids) this.names.learn('group', name, id);
    if (memberCount === 0) return;
    const groupColumn: number[] = [];
    const userColumn: number[] = [];
    for (const [name, memberIds] of groups) {
      for (const userId of memberIds) {
        groupColumn.push(ids.get(name)!);
        userColumn.push(userId);
      }
    }
    await this.run(
      'INSERT INTO group_members (group_id, user_id) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING',
      [groupColumn, userColumn],
    );
  }

  private async flushPlants(): Promise<void> {
    const batch = this.plants;
    this.plants = emptyBatch();
    this.batchSize = Math.min(2 * this.batchSize, IMPORT_BATCH);
    // The ids are reserved at once, between the statements of the batch being written, and the rows built
    // meanwhile: the database goes on from one batch to the next without waiting for Node.
    const reservation = this.client.query<Range>(RESERVE_PLANT_IDS, [batch.rows.count]);
    reservation.catch(() => {});
    const previous = this.writing;
    this.writing = this.writePlants(batch, reservation, previous);
    // Seen by the next statement, or by rollback if reading fails first.
    this.writing.catch(() => {});
    // At most one batch is written while the next is read.
    await previous;
  }

  private async writePlants(
    { rows, userGrants, groupGrants }: PlantBatch,
    reservation: Promise<pg.QueryResult<Range>>,
    previous: Promise<void>,
  ) {
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
    await copyInto(this.client, 'COPY plants (id, name, tag, owner_id, is_public, created_at) FROM STDIN', plantRows);
    await copyInto(this.client, 'COPY plant_user_grants (user_id, plant_id) FROM STDIN', userGrantText);
    await copyInto(this.client, 'COPY plant_group_grants (group_id, plant_id) FROM STDIN', groupGrantText);
  }
}
