import { sql, type Kysely, type Transaction } from 'kysely';
import { checkGroupName, checkPlant, checkUserName, nameKey } from '../names.js';
import type { CatalogueRecord } from '../import-format/records.js';
import { conflict, notFound, unavailable } from '../domain-errors.js';
import type { ChangeFeed } from './change-log.js';
import { plantVisibleSql } from './visible-plants-sql.js';
import { WebhookOutbox } from './webhook-outbox.js';
import type { Database } from './schema.js';
import type {
  HotQuery,
  Awaitable,
  CatalogueCounts,
  Deleter,
  GrantInfo,
  Grantee,
  GroupInfo,
  ImportProgress,
  ImportSummary,
  NewPlant,
  NewToken,
  NumberedRecord,
  VisiblePage,
  PageRequest,
  PlantInfo,
  PoolStats,
  QueryTimer,
  Store,
  TokenCredential,
  TokenInfo,
  UserCredential,
  UserInfo,
} from './store.js';

type Db = Kysely<Database> | Transaction<Database>;

/**
 * What both backends share: administration (AdminStore), written once in Kysely, and the hot-path query
 * wrapper (timing, unavailability). Each backend adds the request path and the bulk commands with its own
 * driver, for speed; the import and export flows they plug into are shared too (catalogue-import.ts,
 * catalogue-export.ts).
 */
export abstract class StoreBase implements Store {
  abstract readonly backend: 'sqlite' | 'postgres';

  /** Set while metrics are collected; the hot-path queries check it once each. */
  protected queryTimer: QueryTimer | undefined;

  readonly webhooks: WebhookOutbox;

  // Not readonly: the SQLite store reopens its file when it is replaced under it.
  protected constructor(
    protected db: Kysely<Database>,
    dialect: 'sqlite' | 'postgres',
  ) {
    this.webhooks = new WebhookOutbox(() => this.db, dialect);
  }

  timeQueries(timer: QueryTimer | undefined): void {
    this.queryTimer = timer;
  }

  /**
   * Runs a hot-path query, timed while metrics are on (failures too); an error that means the database cannot
   * be reached becomes "unavailable" (503). Synchronous when the query is: no promise on SQLite's request path.
   */
  protected hotQuery<R>(name: HotQuery, run: () => R): R {
    const timer = this.queryTimer;
    const started = timer === undefined ? 0 : performance.now();
    let result: R;
    try {
      result = run();
    } catch (err) {
      timer?.(name, (performance.now() - started) / 1000);
      throw this.asUnavailable(err);
    }
    if (!(result instanceof Promise)) {
      timer?.(name, (performance.now() - started) / 1000);
      return result;
    }
    return result.then(
      (value: unknown) => {
        timer?.(name, (performance.now() - started) / 1000);
        return value;
      },
      (err: unknown) => {
        timer?.(name, (performance.now() - started) / 1000);
        throw this.asUnavailable(err);
      },
    ) as R;
  }

  private asUnavailable(err: unknown): unknown {
    return this.isUnavailable(err) ? unavailable('database unavailable') : err;
  }

  poolStats(): PoolStats[] {
    return [];
  }

  abstract ping(): Promise<void>;
  abstract close(): Promise<void>;
  abstract findToken(hash: Buffer): Awaitable<TokenCredential | undefined>;
  abstract findUser(name: string): Awaitable<UserCredential | undefined>;
  abstract listPlantsVisibleTo(userId: number, page: PageRequest, extraGroups?: readonly string[]): Awaitable<VisiblePage>;
  abstract listAllPlants(page: PageRequest): Awaitable<VisiblePage>;
  abstract readonly changes: ChangeFeed;
  abstract importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary>;
  abstract exportRecords(): AsyncIterable<CatalogueRecord>;
  /** True when `err` is the backend's unique-constraint violation (a concurrent insert won the race). */
  protected abstract isUniqueViolation(err: unknown): boolean;
  /** True when `err` means the database is not reachable right now (a 503, not a 500). */
  protected abstract isUnavailable(err: unknown): boolean;

  /**
   * Runs a write and, once it is committed, waits until this process's change feed has taken it in, so that the
   * next request served here sees it (read-your-writes) without waiting for a notification.
   */
  protected async write<T>(run: () => Promise<T>): Promise<T> {
    const result = await run();
    await this.changes.catchUp();
    return result;
  }

  private async insertUnique<T>(what: string, insert: () => Promise<T>): Promise<T> {
    try {
      return await insert();
    } catch (err) {
      if (this.isUniqueViolation(err)) throw conflict(`${what} already exists`);
      throw err;
    }
  }

  protected async userId(db: Db, name: string): Promise<number> {
    const row = await db.selectFrom('users').select('id').where('name', '=', name).executeTakeFirst();
    if (!row) throw notFound(`no user named "${name}"`);
    return Number(row.id);
  }

  protected async groupId(db: Db, name: string): Promise<number> {
    const row = await db.selectFrom('groups').select('id').where('name', '=', name).executeTakeFirst();
    if (!row) throw notFound(`no group named "${name}"`);
    return Number(row.id);
  }

  /** The catalogue position of the plant whose (public) id is `id`. */
  private async plantPosition(db: Db, id: number): Promise<number> {
    const row = await db.selectFrom('plants').select('id').where('api_id', '=', id).executeTakeFirst();
    if (!row) throw notFound(`no plant with id ${id}`);
    return Number(row.id);
  }

  addUser(name: string, admin: boolean): Promise<UserInfo> {
    return this.write(async () => {
      checkUserName(name);
      const createdAt = Date.now();
      const row = await this.insertUnique(`user "${name}"`, () =>
        this.db
          .insertInto('users')
          .values({ name, is_admin: admin ? 1 : 0, created_at: createdAt, name_key: nameKey(name) })
          .returning('id')
          .executeTakeFirstOrThrow(),
      );
      return { id: Number(row.id), name, admin, createdAt: new Date(createdAt) };
    });
  }

  /**
   * Finds the user a JWT names or creates it as an ordinary user (concurrent calls for one name create one user).
   * A new name that looks like an existing user's (the same nameKey: `ALICE`, a Cyrillic look-alike) is refused
   * (conflict): the provider's user would otherwise pass for the other one in every list.
   */
  provisionUser(name: string): Promise<UserCredential> {
    checkUserName(name);
    const key = nameKey(name);
    const credential = (row: { id: number; is_admin: number }): UserCredential => ({
      userId: Number(row.id),
      admin: Number(row.is_admin) === 1,
    });
    return this.write(() =>
      this.db.transaction().execute(async (trx) => {
        const found = await trx.selectFrom('users').select(['id', 'is_admin']).where('name', '=', name).executeTakeFirst();
        if (found) return credential(found);
        await this.lockNameKey(trx, key);
        const lookalike = await trx
          .selectFrom('users')
          .select('id')
          .where('name_key', '=', key)
          .where('name', '<>', name)
          .executeTakeFirst();
        if (lookalike) throw conflict(`the user name "${name}" looks like an existing user's`);
        await trx
          .insertInto('users')
          .values({ name, is_admin: 0, created_at: Date.now(), name_key: key })
          .onConflict((oc) => oc.column('name').doNothing())
          .execute();
        return credential(await trx.selectFrom('users').select(['id', 'is_admin']).where('name', '=', name).executeTakeFirstOrThrow());
      }),
    ).catch((err: unknown) => {
      if (this.isUnavailable(err)) throw unavailable('database unavailable');
      throw err;
    });
  }

  /** Holds, until the transaction ends, every other provisioning of a name with this key (SQLite's writing transactions already do). */
  protected abstract lockNameKey(trx: Transaction<Database>, key: string): Promise<void>;

  /**
   * Runs one statement that writes, as its own transaction. On PostgreSQL a statement is one: a transaction
   * around it would add two round trips (BEGIN, COMMIT), each a wake-up of the database and of this process. On
   * SQLite it runs in a writing transaction, whose wait for another process's write is asynchronous.
   */
  protected abstract writeStatement<T>(run: (db: Db) => Promise<T>): Promise<T>;

  setAdmin(name: string, admin: boolean): Promise<boolean> {
    return this.write(() =>
      this.db.transaction().execute(async (trx) => {
        const row = await trx.selectFrom('users').select('is_admin').where('name', '=', name).executeTakeFirst();
        if (!row) throw notFound(`no user named "${name}"`);
        if ((Number(row.is_admin) === 1) === admin) return false;
        await trx
          .updateTable('users')
          .set({ is_admin: admin ? 1 : 0 })
          .where('name', '=', name)
          .execute();
        return true;
      }),
    );
  }

  removeUser(name: string, opts: { withPlants: boolean }): Promise<void> {
    return this.write(async () => {
      await this.db.transaction().execute(async (trx) => {
        const id = await this.userId(trx, name);
        const owned = await trx
          .selectFrom('plants')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('owner_id', '=', id)
          .executeTakeFirstOrThrow();
        if (Number(owned.n) > 0) {
          if (!opts.withPlants) {
            throw conflict(`user "${name}" owns ${owned.n} plant(s); remove them first or pass --with-plants`);
          }
          await trx.deleteFrom('plants').where('owner_id', '=', id).execute();
        }
        await trx.deleteFrom('users').where('id', '=', id).execute();
      });
    });
  }

  async counts(): Promise<CatalogueCounts> {
    const count = async (table: keyof Database) =>
      Number(
        (
          await this.db
            .selectFrom(table)
            .select((eb) => eb.fn.countAll().as('n'))
            .executeTakeFirstOrThrow()
        ).n,
      );
    const [users, groups, plants, userGrants, groupGrants, tokens] = await Promise.all(
      (['users', 'groups', 'plants', 'plant_user_grants', 'plant_group_grants', 'tokens'] as const).map(count),
    );
    return { users: users!, groups: groups!, plants: plants!, grants: userGrants! + groupGrants!, tokens: tokens! };
  }

  async listUsers(): Promise<UserInfo[]> {
    const rows = await this.db.selectFrom('users').selectAll().orderBy('id').execute();
    return rows.map((r) => ({
      id: Number(r.id),
      name: r.name,
      admin: Number(r.is_admin) === 1,
      createdAt: new Date(Number(r.created_at)),
    }));
  }

  addGroup(name: string): Promise<GroupInfo> {
    return this.write(async () => {
      checkGroupName(name);
      const createdAt = Date.now();
      const row = await this.insertUnique(`group "${name}"`, () =>
        this.db.insertInto('groups').values({ name, created_at: createdAt }).returning('id').executeTakeFirstOrThrow(),
      );
      return { id: Number(row.id), name, members: [], createdAt: new Date(createdAt) };
    });
  }

  removeGroup(name: string): Promise<void> {
    return this.write(async () => {
      const result = await this.db.deleteFrom('groups').where('name', '=', name).executeTakeFirst();
      if (Number(result.numDeletedRows) === 0) throw notFound(`no group named "${name}"`);
    });
  }

  addMember(group: string, user: string): Promise<boolean> {
    return this.write(() =>
      this.db.transaction().execute(async (trx) => {
        const groupId = await this.groupId(trx, group);
        const userId = await this.userId(trx, user);
        const result = await trx
          .insertInto('group_members')
          .values({ group_id: groupId, user_id: userId })
          .onConflict((oc) => oc.doNothing())
          .executeTakeFirst();
        return Number(result.numInsertedOrUpdatedRows ?? 0) > 0;
      }),
    );
  }

  removeMember(group: string, user: string): Promise<boolean> {
    return this.write(() =>
      this.db.transaction().execute(async (trx) => {
        const groupId = await this.groupId(trx, group);
        const userId = await this.userId(trx, user);
        const result = await trx
          .deleteFrom('group_members')
          .where('group_id', '=', groupId)
          .where('user_id', '=', userId)
          .executeTakeFirst();
        return Number(result.numDeletedRows) > 0;
      }),
    );
  }

  async listGroups(): Promise<GroupInfo[]> {
    const groups = await this.db.selectFrom('groups').selectAll().orderBy('id').execute();
    const members = await this.db
      .selectFrom('group_members')
      .innerJoin('users', 'users.id', 'group_members.user_id')
      .select(['group_members.group_id', 'users.name'])
      .orderBy('group_members.group_id')
      .orderBy('users.id')
      .execute();
    const byGroup = new Map<number, string[]>();
    for (const m of members) {
      const list = byGroup.get(Number(m.group_id)) ?? [];
      list.push(m.name);
      byGroup.set(Number(m.group_id), list);
    }
    return groups.map((g) => ({
      id: Number(g.id),
      name: g.name,
      members: byGroup.get(Number(g.id)) ?? [],
      createdAt: new Date(Number(g.created_at)),
    }));
  }

  addPlant(plant: { id?: number; name: string; tag?: string; owner: string; public: boolean }): Promise<PlantInfo> {
    return this.write(async () => {
      checkPlant(plant);
      const createdAt = Date.now();
      return this.db.transaction().execute(async (trx) => {
        const ownerId = await this.userId(trx, plant.owner);
        const row = await this.insertUnique(`a plant with id ${plant.id}`, () =>
          trx
            .insertInto('plants')
            .values({
              ...(plant.id === undefined ? {} : { api_id: plant.id }),
              name: plant.name,
              tag: plant.tag ?? null,
              owner_id: ownerId,
              is_public: plant.public ? 1 : 0,
              created_at: createdAt,
            })
            .returning('id')
            .executeTakeFirstOrThrow(),
        );
        // Read back: without an id given, the database's trigger chose it.
        const { api_id } = await trx.selectFrom('plants').select('api_id').where('id', '=', row.id).executeTakeFirstOrThrow();
        return { ...plant, id: Number(api_id), createdAt: new Date(createdAt) };
      });
    });
  }

  async createPlant(ownerId: number, plant: NewPlant): Promise<'created' | 'existing'> {
    checkPlant(plant);
    const outcome = await this.write(async () => {
      // DO NOTHING waits for a concurrent insert of the same id and then skips: the retry of a create that is
      // still committing answers like one that has, never with a unique violation.
      const inserted = await this.writeStatement((db) =>
        db
          .insertInto('plants')
          .values({ api_id: plant.id, name: plant.name, tag: plant.tag ?? null, owner_id: ownerId, is_public: 0, created_at: Date.now() })
          .onConflict((oc) => oc.column('api_id').doNothing())
          .returning('id')
          .executeTakeFirst(),
      );
      if (inserted !== undefined) return 'created' as const;
      // Committed, since DO NOTHING waited for it: the plant that holds the id.
      const taken = await this.db
        .selectFrom('plants')
        .select(['owner_id', 'name', 'tag'])
        .where('api_id', '=', plant.id)
        .executeTakeFirst();
      const same =
        taken !== undefined && Number(taken.owner_id) === ownerId && taken.name === plant.name && taken.tag === (plant.tag ?? null);
      if (same) return 'existing' as const;
      throw conflict(`plant id ${plant.id} is taken by another plant`);
    });
    if (outcome === 'created') await this.wrote(ownerId);
    return outcome;
  }

  async deletePlant(deleter: Deleter, id: number): Promise<'deleted' | 'hidden' | 'forbidden'> {
    const outcome = await this.write(() =>
      this.db.transaction().execute(async (trx) => {
        const plant = await trx.selectFrom('plants').select(['id', 'owner_id']).where('api_id', '=', id).executeTakeFirst();
        if (plant === undefined) return 'hidden';
        const position = Number(plant.id);
        if (!deleter.admin && Number(plant.owner_id) !== deleter.userId) {
          const claimed =
            deleter.groups === undefined || deleter.groups.length === 0
              ? []
              : (await trx.selectFrom('groups').select('id').where('name', 'in', deleter.groups).execute()).map((g) => Number(g.id));
          const { rows } = await sql<{
            visible: unknown;
          }>`SELECT ${sql.raw(plantVisibleSql(position, deleter.userId, claimed))} AS visible`.execute(trx);
          // A boolean on PostgreSQL, 0 or 1 on SQLite.
          return rows[0]?.visible === true || rows[0]?.visible === 1 ? 'forbidden' : 'hidden';
        }
        await trx.deleteFrom('plants').where('id', '=', position).execute();
        return 'deleted' as const;
      }),
    );
    if (outcome === 'deleted') await this.wrote(deleter.userId);
    return outcome;
  }

  /**
   * Called once a user's own write (over HTTP) is committed and taken in by this process's caches: a backend
   * that reads listings elsewhere (a replica) makes sure that user's next listing shows it.
   */
  protected async wrote(_userId: number): Promise<void> {}

  removePlant(id: number): Promise<void> {
    return this.write(async () => {
      const result = await this.db.deleteFrom('plants').where('api_id', '=', id).executeTakeFirst();
      if (Number(result.numDeletedRows) === 0) throw notFound(`no plant with id ${id}`);
    });
  }

  async listPlants(filter: { owner?: string }): Promise<PlantInfo[]> {
    let query = this.db
      .selectFrom('plants')
      .innerJoin('users', 'users.id', 'plants.owner_id')
      .select(['plants.api_id as id', 'plants.name', 'plants.tag', 'plants.is_public', 'plants.created_at', 'users.name as owner'])
      .orderBy('plants.id');
    if (filter.owner !== undefined) query = query.where('users.name', '=', filter.owner);
    const rows = await query.execute();
    return rows.map((r) => ({
      id: Number(r.id),
      name: r.name,
      ...(r.tag === null ? {} : { tag: r.tag }),
      owner: r.owner,
      public: Number(r.is_public) === 1,
      createdAt: new Date(Number(r.created_at)),
    }));
  }

  /**
   * Grants a plant to a user or a group, in one statement when both are there: false when it already was. Only
   * when nothing was inserted are the plant and the grantee looked up, for the error that names what is missing.
   */
  addGrant(plantId: number, grantee: Grantee): Promise<boolean> {
    return this.write(async () => {
      const result = await this.writeStatement((db) =>
        'user' in grantee
          ? db
              .insertInto('plant_user_grants')
              .columns(['user_id', 'plant_id'])
              .expression(
                db
                  .selectFrom(['users as u', 'plants as p'])
                  .select(['u.id as user_id', 'p.id as plant_id'])
                  .where('u.name', '=', grantee.user)
                  .where('p.api_id', '=', plantId),
              )
              .onConflict((oc) => oc.doNothing())
              .executeTakeFirst()
          : db
              .insertInto('plant_group_grants')
              .columns(['group_id', 'plant_id'])
              .expression(
                db
                  .selectFrom(['groups as g', 'plants as p'])
                  .select(['g.id as group_id', 'p.id as plant_id'])
                  .where('g.name', '=', grantee.group)
                  .where('p.api_id', '=', plantId),
              )
              .onConflict((oc) => oc.doNothing())
              .executeTakeFirst(),
      );
      if (Number(result.numInsertedOrUpdatedRows ?? 0) > 0) return true;
      await this.grantParties(plantId, grantee);
      return false;
    });
  }

  /** Removes a grant in one statement: false when there was none. Then, as for addGrant, what is missing is an error. */
  removeGrant(plantId: number, grantee: Grantee): Promise<boolean> {
    return this.write(async () => {
      const result = await this.writeStatement((db) => {
        const plant = db.selectFrom('plants').select('id').where('api_id', '=', plantId);
        return 'user' in grantee
          ? db
              .deleteFrom('plant_user_grants')
              .where('user_id', '=', db.selectFrom('users').select('id').where('name', '=', grantee.user))
              .where('plant_id', '=', plant)
              .executeTakeFirst()
          : db
              .deleteFrom('plant_group_grants')
              .where('group_id', '=', db.selectFrom('groups').select('id').where('name', '=', grantee.group))
              .where('plant_id', '=', plant)
              .executeTakeFirst();
      });
      if (Number(result.numDeletedRows) > 0) return true;
      await this.grantParties(plantId, grantee);
      return false;
    });
  }

  /** Fails (not_found) unless the plant and the grantee of a grant both exist: the plant is named first. */
  private async grantParties(plantId: number, grantee: Grantee): Promise<void> {
    await this.plantPosition(this.db, plantId);
    if ('user' in grantee) await this.userId(this.db, grantee.user);
    else await this.groupId(this.db, grantee.group);
  }

  async listGrants(filter: { plantId?: number }): Promise<GrantInfo[]> {
    let users = this.db
      .selectFrom('plant_user_grants as g')
      .innerJoin('plants as p', 'p.id', 'g.plant_id')
      .innerJoin('users as u', 'u.id', 'g.user_id')
      .select(['p.id as position', 'p.api_id as plantId', 'p.name as plantName', 'u.name as grantee', 'u.id as granteeId']);
    let groups = this.db
      .selectFrom('plant_group_grants as g')
      .innerJoin('plants as p', 'p.id', 'g.plant_id')
      .innerJoin('groups as gr', 'gr.id', 'g.group_id')
      .select(['p.id as position', 'p.api_id as plantId', 'p.name as plantName', 'gr.name as grantee', 'gr.id as granteeId']);
    if (filter.plantId !== undefined) {
      users = users.where('p.api_id', '=', filter.plantId);
      groups = groups.where('p.api_id', '=', filter.plantId);
    }
    const [u, g] = await Promise.all([users.execute(), groups.execute()]);
    const all = [
      ...u.map((r) => ({
        plantId: Number(r.plantId),
        plantName: r.plantName,
        grantee: { user: r.grantee },
        order: [Number(r.position), 0, Number(r.granteeId)],
      })),
      ...g.map((r) => ({
        plantId: Number(r.plantId),
        plantName: r.plantName,
        grantee: { group: r.grantee },
        order: [Number(r.position), 1, Number(r.granteeId)],
      })),
    ];
    all.sort((a, b) => a.order[0]! - b.order[0]! || a.order[1]! - b.order[1]! || a.order[2]! - b.order[2]!);
    return all.map(({ plantId, plantName, grantee }) => ({ plantId, plantName, grantee }));
  }

  /** One statement, the user's id read in it; a user that is not there fails it (user_id is NOT NULL), and is then named. */
  addToken(token: NewToken): Promise<TokenInfo> {
    return this.write(async () => {
      const createdAt = Date.now();
      let row: { id: number | bigint };
      try {
        row = await this.writeStatement((db) =>
          db
            .insertInto('tokens')
            .values({
              user_id: db.selectFrom('users').select('id').where('name', '=', token.user),
              token_hash: token.hash,
              label: token.label ?? null,
              created_at: createdAt,
              expires_at: token.expiresAt?.getTime() ?? null,
              revoked_at: null,
            })
            .returning('id')
            .executeTakeFirstOrThrow(),
        );
      } catch (err) {
        await this.userId(this.db, token.user);
        throw err;
      }
      return {
        id: Number(row.id),
        user: token.user,
        ...(token.label === undefined ? {} : { label: token.label }),
        createdAt: new Date(createdAt),
        ...(token.expiresAt === undefined ? {} : { expiresAt: token.expiresAt }),
      };
    });
  }

  revokeToken(id: number): Promise<boolean> {
    return this.write(async () => {
      const result = await this.db
        .updateTable('tokens')
        .set({ revoked_at: Date.now() })
        .where('id', '=', id)
        .where('revoked_at', 'is', null)
        .executeTakeFirst();
      if (Number(result.numUpdatedRows) > 0) return true;
      const exists = await this.db.selectFrom('tokens').select('id').where('id', '=', id).executeTakeFirst();
      if (!exists) throw notFound(`no token with id ${id}`);
      // Revoking twice is not an error: the token is revoked either way.
      return false;
    });
  }

  async listTokens(filter: { user?: string }): Promise<TokenInfo[]> {
    if (filter.user !== undefined) await this.userId(this.db, filter.user);
    let query = this.db
      .selectFrom('tokens as t')
      .innerJoin('users as u', 'u.id', 't.user_id')
      .select(['t.id', 'u.name as user', 't.label', 't.created_at', 't.expires_at', 't.revoked_at'])
      .orderBy('t.id');
    if (filter.user !== undefined) query = query.where('u.name', '=', filter.user);
    const rows = await query.execute();
    return rows.map((r) => ({
      id: Number(r.id),
      user: r.user,
      ...(r.label === null ? {} : { label: r.label }),
      createdAt: new Date(Number(r.created_at)),
      ...(r.expires_at === null ? {} : { expiresAt: new Date(Number(r.expires_at)) }),
      ...(r.revoked_at === null ? {} : { revokedAt: new Date(Number(r.revoked_at)) }),
    }));
  }
}
