import type { Kysely, Transaction } from 'kysely';
import { notFound } from '../../catalogue/errors.js';
import { checkNewGroupName } from '../../catalogue/names.js';
import type { DatabaseSeam } from '../seam.js';
import type { Database } from '../schema.js';
import type { GroupInfo } from '../records.js';
import { insertUnique } from '../writes.js';
import { idByName, userIdByName } from './users.js';

// Groups and their members: the shared SQL of both backends.

type Db = Kysely<Database> | Transaction<Database>;

/** The id of the group named `name`; a name no group has is not found. */
export const groupIdByName = (db: Db, name: string, lock = ''): Promise<number> => idByName(db, 'group', name, lock);

/** Groups and their members, one at a time (the CLI). */
export function groupRepository(d: DatabaseSeam) {
  /**
   * The ids of a membership's group and user, both held until the commit: a member added to a group or of a user
   * deleted meanwhile is a not_found, never a foreign-key error, as in either order one after the other.
   */
  const heldMembership = async (trx: Transaction<Database>, group: string, user: string) => ({
    groupId: await groupIdByName(trx, group, d.statements.rowLocks.keep),
    userId: await userIdByName(trx, user, d.statements.rowLocks.keep),
  });
  /**
   * Adds `users` to `group` in one transaction, so that a name no user has leaves the group as it was. Resolves,
   * user by user, to false where the user was already a member (or named twice).
   */
  const addMembers = (group: string, users: readonly string[]): Promise<boolean[]> =>
    d.writeTransaction(async (trx) => {
      const added: boolean[] = [];
      for (const user of users) {
        const { groupId, userId } = await heldMembership(trx, group, user);
        const result = await trx
          .insertInto('group_members')
          .values({ group_id: groupId, user_id: userId })
          .onConflict((oc) => oc.doNothing())
          .executeTakeFirst();
        added.push(Number(result.numInsertedOrUpdatedRows ?? 0) > 0);
      }
      return added;
    });
  return {
    async add(name: string): Promise<GroupInfo> {
      checkNewGroupName(name);
      const createdAt = Date.now();
      const row = await insertUnique(d, `group "${name}"`, () =>
        d.writeStatement((db) => db.insertInto('groups').values({ name, created_at: createdAt }).returning('id').executeTakeFirstOrThrow()),
      );
      return { id: Number(row.id), name, members: [], createdAt: new Date(createdAt) };
    },

    async remove(name: string): Promise<void> {
      const result = await d.writeStatement((db) => db.deleteFrom('groups').where('name', '=', name).executeTakeFirst());
      if (Number(result.numDeletedRows) === 0) throw notFound(`no group named "${name}"`);
    },

    /** Resolves to false when the user was already a member (nothing changed). */
    addMember: async (group: string, user: string): Promise<boolean> => (await addMembers(group, [user]))[0]!,

    addMembers,

    /** Resolves to false when the user was not a member. */
    removeMember: (group: string, user: string): Promise<boolean> =>
      d.writeTransaction(async (trx) => {
        const { groupId, userId } = await heldMembership(trx, group, user);
        const result = await trx
          .deleteFrom('group_members')
          .where('group_id', '=', groupId)
          .where('user_id', '=', userId)
          .executeTakeFirst();
        return Number(result.numDeletedRows) > 0;
      }),

    async list(): Promise<GroupInfo[]> {
      const groups = await d.db.selectFrom('groups').selectAll().orderBy('id').execute();
      const members = await d.db
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
    },
  };
}

export type GroupRepository = ReturnType<typeof groupRepository>;
