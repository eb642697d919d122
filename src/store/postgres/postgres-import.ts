import { FIELD_NAMES } from '../../catalogue/plant-fields.js';
import type pg from 'pg';
import type { Awaitable } from '../../awaitable.js';
import { nameKey } from '../../catalogue/names.js';
import type { CatalogueRecord } from '../../import-format/records.js';
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
import { AUTOMATIC_IDS_LOCK, BULK_LOAD_SETTING, GROUP_SIZES, MEMBER_GRANTS, PLANT_API_ID_INDEX, writtenHere } from '../schema-names.js';
import { importedPlantEvents, LAST_EVENT_SQL } from '../webhook-outbox.js';
import { advisoryLockSql, classifyPostgresError } from './postgres-errors.js';
import { dropForFirstLoad } from './first-load.js';
import { copyInto, copyText, grantRows, PlantRows } from './postgres-copy.js';
import { withoutStatementTimeout } from './postgres-connection.js';

/** Rows an import statement writes at most: plants a batch, users or groups an upsert (far from the statement timeout). */
const IMPORT_BATCH = 20_000;

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
 * A batch of plants: their COPY rows (ids come later), their public ids (to name the earlier of two plants with
 * one, should COPY refuse it) and grants as (plant index, grantee id) pairs.
 */
/** A batch of plants: their rows, public ids and tags (in COPY text, `\\N` for none), and grants as (plant index, grantee id) pairs. */
type PlantBatch = { rows: PlantRows; publicIds: number[]; tags: string[]; userGrants: number[]; groupGrants: number[] };

const emptyBatch = (): PlantBatch => ({ rows: new PlantRows(), publicIds: [], tags: [], userGrants: [], groupGrants: [] });

type Reported = { code?: string; constraint?: string; detail?: string; where?: string };

/** Whether `err` is the refusal of a public id already taken, by COPY or by building the index again. */
const isTakenId = (err: Reported): boolean => classifyPostgresError(err) === 'unique_violation' && err.constraint === PLANT_API_ID_INDEX;

/**
 * An import into PostgreSQL (see catalogue-import.ts for the flow), on one connection in one transaction.
 * Consecutive users are upserted by one statement, and so are consecutive groups, instead of a round trip each.
 * Plants are written a batch at a time with ids reserved up front, so grants can refer
 * to them; each batch is three COPY streams (plants, user grants, group grants), far cheaper than INSERTs. A
 * batch is written while the next one is read and parsed (the database and Node each keep a CPU busy); every
 * other statement waits for that write first.
 */
/** The tables an import fills, analyzed once it has committed. */
const ANALYZE_IMPORTED = `ANALYZE users, groups, group_members, plants, plant_user_grants, plant_group_grants, ${MEMBER_GRANTS}, ${GROUP_SIZES}, webhook_events, webhook_deliveries`;

export class PostgresImport implements ImportTarget {
  readonly names = new KnownNames((what, names) =>
    this.run<StoredName>(`SELECT name, id FROM ${what === 'user' ? 'users' : 'groups'} WHERE name = ANY($1::text[])`, [names]),
  );
  /** What the import took as it began: the time its rows carry, and the largest user id (those it adds are after it). */
  private readonly began = { at: Date.now(), lastUser: 0 };
  /** Users to upsert: a name repeated keeps its first place (the id it would have got) and the last admin flag given. */
  private users = new Map<string, number | null>();
  private groups = new Map<string, number[]>();
  private memberCount = 0;
  private plants = emptyBatch();
  /** The first batches are small so the database starts early; then up to IMPORT_BATCH plants a batch. */
  private batchSize = 1_000;
  /** The batch of plants being written, if any. */
  private writing: Promise<void> = Promise.resolve();
  /** What a first load dropped (see first-load.ts), as the statements that add it back. */
  private addBack: string[] = [];
  /** The first catalogue position this import reserved: its plants are at it and after. */
  private firstPosition: number | undefined;
  /** The catalogue positions reserved for the import's plants. */
  private readonly positions = new ReservedPositions();
  /** What the import added to each group it wrote or shared plants with. */
  private readonly growth = new GroupGrowth();

  constructor(private readonly client: pg.PoolClient) {}

  async begin(): Promise<number> {
    await this.client.query('BEGIN');
    // Like export: a bulk command, whose COPY of a batch or COMMIT may outlast a request's timeout.
    await withoutStatementTimeout(this.client);
    // Row by row, the change log would double what an import writes: it records one broad change instead.
    await this.client.query(`SET LOCAL ${BULK_LOAD_SETTING} = 'on'`);
    // The indexes a first load builds again sort a million entries each per million plants or grants: in memory,
    // rather than in runs spilled to disk and merged, as the default 64 MB would for most of them.
    await this.client.query("SET LOCAL maintenance_work_mem = '256MB'");
    this.addBack = (await dropForFirstLoad(this.client)).add;
    this.began.lastUser = Number((await this.client.query<{ last: string }>(LAST_USER_SQL)).rows[0]!.last);
    // Plants without an id in the file are numbered like those added without one, under the same lock.
    await this.client.query(advisoryLockSql, [AUTOMATIC_IDS_LOCK]);
    const { rows } = await this.client.query<{ largest: string | null }>(LARGEST_USED_PLANT_ID_SQL);
    return Number(rows[0]!.largest ?? 0);
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
    // One at a time: a spread passes each member as an argument on the stack, which a large group overflows.
    for (const id of memberIds) members.push(id);
    this.memberCount += memberIds.length;
    if (this.groups.size + this.memberCount >= IMPORT_BATCH) return this.writeGroups();
  }

  plant(plant: ImportedPlant): Awaitable<void> {
    const { rows, publicIds, tags, userGrants, groupGrants } = this.plants;
    const index = rows.count;
    publicIds.push(plant.id);
    // A grant carries its plant's tag (migration 0018), which the import writes itself, without the triggers.
    if (plant.userIds.length + plant.groupIds.length > 0)
      tags[index] = typeof plant.fields.tag === 'string' ? copyText(plant.fields.tag) : '\\N';
    for (const id of plant.userIds) userGrants.push(index, id);
    for (const id of plant.groupIds) {
      groupGrants.push(index, id);
      this.growth.add(id, 1, 0);
    }
    let fields = '';
    for (const name of FIELD_NAMES) {
      const value = plant.fields[name];
      fields += value === undefined ? '\t\\N' : `\t${copyText(value)}`;
    }
    // A plant's COPY row is built when it is read, all but the id.
    rows.add(`\t${plant.id}${fields}\t${plant.ownerId}\t${plant.isPublic ? 1 : 0}\t${this.began.at}\n`);
    if (rows.count >= this.batchSize) return this.flushPlants();
  }

  async commit(usedIds: number): Promise<void> {
    if (usedIds > 0) await this.run(raiseUsedIdsSql('$1'), [usedIds]);
    if (this.users.size > 0) await this.writeUsers();
    if (this.groups.size > 0) await this.writeGroups();
    if (this.plants.rows.count > 0) await this.flushPlants();
    await this.writing;
    const [ids, plants, members] = this.growth.columns();
    if (ids.length > 0) {
      const growth = grownGroupsSql({
        ids: { sql: '(SELECT unnest($1::bigint[]))', values: [ids] },
        growth: {
          sql: 'unnest($1::bigint[], $2::bigint[], $3::bigint[]) AS d (group_id, plants, members)',
          values: [ids, plants, members],
        },
        insertIgnoring: (insert) => `${insert} ON CONFLICT DO NOTHING`,
        lockGroups: 'FOR NO KEY UPDATE',
      });
      for (const { sql, values } of growth) await this.client.query(sql, values);
    }
    await addBackDeferrals(this.client, this.addBack, this.positions);
    // Added here: an upsert of a stored user rewrites its row in this transaction too, and is no new name.
    const added = (alias: string) => `${writtenHere(alias)} AND ${alias}id > ${this.began.lastUser}`;
    const lookalike = (await this.client.query<{ name: string; other: string }>(importedLookalikeSql(added))).rows[0];
    if (lookalike !== undefined) throw new ImportedLookalike(lookalike.name, lookalike.other);
    if (this.firstPosition !== undefined) {
      const { rows } = await this.client.query<{ last: string }>(LAST_EVENT_SQL);
      for (const statement of importedPlantEvents(
        { imported: writtenHere(), messageId: undefined },
        this.firstPosition - 1,
        Number(rows[0]!.last),
        this.began.at,
      )) {
        await this.client.query(statement);
      }
    }
    await this.client.query('INSERT INTO change_log (table_name) VALUES ($1)', [EVERYTHING]);
    // Autovacuum analyzes a table only a while later, and a first load's tables never had statistics: until then the
    // planner guesses, and every reader (the listing, the webhook claims) pays for its guesses. In the transaction,
    // the statistics count its rows and commit with them.
    await this.client.query(ANALYZE_IMPORTED);
    await this.client.query('COMMIT');
  }

  async rollback(err: unknown): Promise<unknown> {
    // A batch still being written holds earlier lines of the file than the reader's error: report its error.
    const earlier = await this.writing.then(
      () => undefined,
      (e: unknown) => e,
    );
    await this.client.query('ROLLBACK').catch(() => {});
    const reported = earlier ?? err;
    if (reported instanceof TakenPlantId && reported.earlier === undefined) {
      // Not an earlier plant of the same batch: a stored plant has it, or a plant of an earlier batch.
      const { rowCount } = await this.client.query('SELECT FROM plants WHERE api_id = $1', [reported.id]);
      if (rowCount !== 0) return new TakenPlantId(reported.id, reported.place, 'stored');
    }
    return reported;
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
      [[...users.keys()], [...users.values()], this.began.at, [...users.keys()].map(nameKey)],
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
      [[...groups.keys()], this.began.at],
    );
    const ids = new Map(rows.map(({ id, name }) => [name, id]));
    for (const [name, id] of ids) this.names.learn('group', name, id);
    for (const id of ids.values()) this.growth.add(id, 0, 0);
    if (memberCount === 0) return;
    const groupColumn: number[] = [];
    const userColumn: number[] = [];
    for (const [name, memberIds] of groups) {
      for (const userId of memberIds) {
        groupColumn.push(ids.get(name)!);
        userColumn.push(userId);
      }
    }
    // Counted as inserted: a member already there (or given twice) is no new row.
    const added = await this.run<{ group_id: string; members: string }>(
      `WITH added AS (
         INSERT INTO group_members (group_id, user_id) SELECT * FROM unnest($1::bigint[], $2::bigint[]) ON CONFLICT DO NOTHING RETURNING group_id
       ) SELECT group_id, count(*) AS members FROM added GROUP BY group_id`,
      [groupColumn, userColumn],
    );
    for (const { group_id: id, members } of added) this.growth.add(Number(id), 0, Number(members));
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
    { rows, publicIds, tags, userGrants, groupGrants }: PlantBatch,
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
    if (this.firstPosition === undefined && runs[0] !== undefined) this.firstPosition = Number(runs[0].first);
    const ids: number[] = [];
    for (const { first, last } of runs) {
      this.positions.add(Number(first), Number(last));
      for (let id = Number(first); id <= Number(last); id++) ids.push(id);
    }
    const plantRows = rows.withIds(ids);
    const userGrantText = grantRows(userGrants, ids, tags);
    const groupGrantText = grantRows(groupGrants, ids, tags);
    await previous;
    // COPY writes the reserved ids into the identity column as given (like OVERRIDING SYSTEM VALUE).
    try {
      await copyInto(
        this.client,
        `COPY plants (id, api_id, ${FIELD_NAMES.join(', ')}, owner_id, is_public, created_at) FROM STDIN`,
        plantRows,
      );
    } catch (err) {
      throw takenInBatch(err as Reported, publicIds, ids, this.positions) ?? err;
    }
    await copyInto(this.client, 'COPY plant_user_grants (user_id, plant_id, tag) FROM STDIN', userGrantText);
    await copyInto(this.client, 'COPY plant_group_grants (group_id, plant_id, tag) FROM STDIN', groupGrantText);
  }
}

/** The catalogue positions reserved for an import's plants, in the order of its plants: a run a batch, or a few. */
class ReservedPositions {
  private readonly runs: Range[] = [];

  add(first: number, last: number): void {
    this.runs.push({ first, last });
  }

  /** The place among the import's plants (1 for its first) of the plant at catalogue position `position`. */
  placeOf(position: number): number | 'stored' {
    let before = 0;
    for (const { first, last } of this.runs) {
      if (position >= first && position <= last) return before + position - first + 1;
      before += last - first + 1;
    }
    return 'stored';
  }
}

/**
 * COPY's refusal of a public id as the import's plants that have it: the row it names ("COPY plants, line 3")
 * and an earlier row of the batch with the same id, when there is one.
 */
function takenInBatch(err: Reported, publicIds: number[], ids: number[], positions: ReservedPositions): TakenPlantId | undefined {
  const row = Number(/COPY plants, line (\d+)/.exec(err.where ?? '')?.[1]);
  if (!isTakenId(err) || !(row >= 1)) return undefined;
  const place = positions.placeOf(ids[row - 1]!) as number;
  const repeated = row === 1 ? -1 : publicIds.lastIndexOf(publicIds[row - 1]!, row - 2);
  return new TakenPlantId(publicIds[row - 1]!, place, repeated === -1 ? undefined : positions.placeOf(ids[repeated]!));
}

/**
 * Adds back what a first load dropped (`statements`). Building the unique index of public ids again is where a first
 * load finds an id given twice: under a savepoint, so that the plants that have it can still be read to name their
 * lines.
 */
async function addBackDeferrals(client: pg.PoolClient, statements: string[], positions: ReservedPositions): Promise<void> {
  if (statements.length === 0) return;
  await client.query('SAVEPOINT add_back');
  try {
    for (const statement of statements) await client.query(statement);
  } catch (err) {
    if (!isTakenId(err as Reported)) throw err;
    await client.query('ROLLBACK TO SAVEPOINT add_back');
    const { rows } = await client.query<{ id: string; position: string; earlier: string }>(FIRST_REPEATED_PLANT_ID_SQL);
    const { id, position, earlier } = rows[0]!;
    const place = positions.placeOf(Number(position));
    if (place === 'stored') throw err;
    throw new TakenPlantId(Number(id), place, positions.placeOf(Number(earlier)));
  }
  await client.query('RELEASE SAVEPOINT add_back');
}
