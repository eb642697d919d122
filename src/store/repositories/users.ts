import { sql, type Kysely, type Transaction } from 'kysely';
import { conflict, notFound } from '../../catalogue/errors.js';
import { checkNewUserName, lookalikeName, nameKey } from '../../catalogue/names.js';
import type { DatabaseSeam } from '../seam.js';
import type { Database } from '../schema.js';
import type { UserCredential, UserInfo } from '../records.js';
import { insertUnique, storeErrorOf } from '../writes.js';

// Users: the shared SQL of both backends.

type Db = Kysely<Database> | Transaction<Database>;

/**
 * The id of the user or group named `name`, or not_found. In a writing transaction, `lock` (DatabaseSeam's
 * rowLocks.keep) holds the row until the commit: a delete under way is waited for, and then there is none.
 */
export async function idByName(db: Db, what: 'user' | 'group', name: string, lock = ''): Promise<number> {
  const row = await db
    .selectFrom(what === 'user' ? 'users' : 'groups')
    .select('id')
    .where('name', '=', name)
    .$if(lock !== '', (query) => query.modifyEnd(sql.raw(lock)))
    .executeTakeFirst();
  if (!row) throw notFound(`no ${what} named "${name}"`);
  return Number(row.id);
}

/** The id of the user named `name`; a name nobody has is not found. */
export const userIdByName = (db: Db, name: string, lock = ''): Promise<number> => idByName(db, 'user', name, lock);

/**
 * The name of another user whose name looks like `name` (its nameKey is `key`), if any, with the key's lock taken
 * so that two concurrent writers of look-alike names cannot both find none.
 */
async function lockedLookalike(d: DatabaseSeam, trx: Transaction<Database>, name: string, key: string): Promise<string | undefined> {
  await d.lock(trx, `name ${key}`);
  const other = await trx.selectFrom('users').select('name').where('name_key', '=', key).where('name', '<>', name).executeTakeFirst();
  return other?.name;
}

/**
 * The first user an import added whose name looks like that of a user the database already had (addUser's rule),
 * with that user's name. `imported` is the condition, on a users row as `alias` names it, that the import wrote it
 * (users after the last one before it; on PostgreSQL, of those, the rows the transaction wrote). Users
 * that arrive together are not compared: a catalogue exported before the rule (which may hold such a pair) imports
 * back whole.
 */
export function importedLookalikeSql(imported: (alias: string) => string): string {
  return (
    `SELECT n.name AS name, o.name AS other FROM users n JOIN users o ON o.name_key = n.name_key AND o.id <> n.id ` +
    `WHERE ${imported('n.')} AND NOT (${imported('o.')}) ORDER BY n.id LIMIT 1`
  );
}

/** The largest user id so far (0 for none): what `importedLookalikeSql` counts the users an import adds from. */
export const LAST_USER_SQL = 'SELECT coalesce(max(id), 0) AS last FROM users';

const credential = (row: { id: number; is_admin: number }): UserCredential => ({
  userId: Number(row.id),
  admin: Number(row.is_admin) === 1,
});

/**
 * Finds the user a JWT names or creates it as an ordinary user (concurrent calls for one name create one user).
 * A new name that looks like an existing user's (the same nameKey: `ALICE`, a Cyrillic look-alike) is refused
 * (conflict): the provider's user would otherwise pass for the other one in every list.
 */
export async function provisionUser(d: DatabaseSeam, name: string): Promise<UserCredential> {
  checkNewUserName(name);
  const key = nameKey(name);
  const provisioned = d.writeTransaction(async (trx) => {
    const found = await trx.selectFrom('users').select(['id', 'is_admin']).where('name', '=', name).executeTakeFirst();
    if (found) return credential(found);
    // The other user is not named: the provider's user learns nothing about who else is here.
    if ((await lockedLookalike(d, trx, name, key)) !== undefined) throw conflict(`the user name "${name}" looks like an existing user's`);
    await trx
      .insertInto('users')
      .values({ name, is_admin: 0, created_at: Date.now(), name_key: key })
      .onConflict((oc) => oc.column('name').doNothing())
      .execute();
    return credential(await trx.selectFrom('users').select(['id', 'is_admin']).where('name', '=', name).executeTakeFirstOrThrow());
  });
  return provisioned.catch((err: unknown) => {
    throw storeErrorOf(d, err);
  });
}

/** The name of the user whose id is `id`; an id nobody has is not found. */
export async function userNameById(db: Db, id: number): Promise<string> {
  const row = await db.selectFrom('users').select('name').where('id', '=', id).executeTakeFirst();
  if (!row) throw notFound(`no user with id ${id}`);
  return row.name;
}

/** Users, one at a time (the CLI). */
export function userRepository(d: DatabaseSeam) {
  return {
    /**
     * Adds a user. A name that looks like an existing user's (the same nameKey: `ALICE` beside `alice`, a Cyrillic
     * look-alike) is refused (conflict), as it is for a user an identity provider names (provisionUser).
     */
    async add(name: string, admin: boolean): Promise<UserInfo> {
      checkNewUserName(name);
      const key = nameKey(name);
      const createdAt = Date.now();
      const row = await insertUnique(d, `user "${name}"`, () =>
        d.writeTransaction(async (trx) => {
          const lookalike = await lockedLookalike(d, trx, name, key);
          if (lookalike !== undefined) throw lookalikeName(name, lookalike);
          return trx
            .insertInto('users')
            .values({ name, is_admin: admin ? 1 : 0, created_at: createdAt, name_key: key })
            .returning('id')
            .executeTakeFirstOrThrow();
        }),
      );
      return { id: Number(row.id), name, admin, createdAt: new Date(createdAt) };
    },

    /** Resolves to false when the user already had that flag. */
    async setAdmin(name: string, admin: boolean): Promise<boolean> {
      const changed = d.writeTransaction(async (trx) => {
        const row = await trx.selectFrom('users').select('is_admin').where('name', '=', name).executeTakeFirst();
        if (!row) throw notFound(`no user named "${name}"`);
        if ((Number(row.is_admin) === 1) === admin) return false;
        await trx
          .updateTable('users')
          .set({ is_admin: admin ? 1 : 0 })
          .where('name', '=', name)
          .execute();
        return true;
      });
      return changed;
    },

    async remove(name: string, opts: { withPlants: boolean }): Promise<void> {
      const removed = d.writeTransaction(async (trx) => {
        const id = await userIdByName(trx, name);
        const owned = await trx
          .selectFrom('plants')
          .select((eb) => eb.fn.countAll<number>().as('n'))
          .where('owner_id', '=', id)
          .executeTakeFirstOrThrow();
        if (Number(owned.n) > 0) {
          if (!opts.withPlants) throw conflict(`user "${name}" owns ${owned.n} plant(s); remove them first or pass --with-plants`);
          await trx.deleteFrom('plants').where('owner_id', '=', id).execute();
        }
        await trx.deleteFrom('users').where('id', '=', id).execute();
      });
      return removed;
    },

    async list(): Promise<UserInfo[]> {
      const rows = await d.db.selectFrom('users').selectAll().orderBy('id').execute();
      return rows.map((r) => ({
        id: Number(r.id),
        name: r.name,
        admin: Number(r.is_admin) === 1,
        createdAt: new Date(Number(r.created_at)),
      }));
    },
  };
}

export type UserRepository = ReturnType<typeof userRepository>;
