import { notFound } from '../../catalogue/errors.js';
import type { DatabaseSeam } from '../seam.js';
import type { NewToken, TokenInfo } from '../records.js';
import { userIdByName } from './users.js';

// Tokens (only their hashes are stored): the shared SQL of both backends.

/** Tokens, one at a time (the CLI); only their hashes are stored. */
export function tokenRepository(d: DatabaseSeam) {
  return {
    /** One statement, the user's id read in it; a user that is not there fails it (user_id is NOT NULL), and is then named. */
    async add(token: NewToken): Promise<TokenInfo> {
      const createdAt = token.createdAt?.getTime() ?? Date.now();
      let row: { id: number | bigint };
      try {
        row = await d.writeStatement((db) =>
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
        await userIdByName(d.db, token.user);
        throw err;
      }
      return {
        id: Number(row.id),
        user: token.user,
        ...(token.label === undefined ? {} : { label: token.label }),
        createdAt: new Date(createdAt),
        ...(token.expiresAt === undefined ? {} : { expiresAt: token.expiresAt }),
      };
    },

    /** Resolves to false when the token was already revoked (revoking twice is not an error); an unknown id is not found. */
    async revoke(id: number): Promise<boolean> {
      const result = await d.writeStatement((db) =>
        db.updateTable('tokens').set({ revoked_at: Date.now() }).where('id', '=', id).where('revoked_at', 'is', null).executeTakeFirst(),
      );
      if (Number(result.numUpdatedRows) > 0) return true;
      const exists = await d.db.selectFrom('tokens').select('id').where('id', '=', id).executeTakeFirst();
      if (!exists) throw notFound(`no token with id ${id}`);
      return false;
    },

    async list(filter: { user?: string }): Promise<TokenInfo[]> {
      if (filter.user !== undefined) await userIdByName(d.db, filter.user);
      let query = d.db
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
    },
  };
}

export type TokenRepository = ReturnType<typeof tokenRepository>;
