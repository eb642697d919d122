import { sql, type Kysely, type Migration } from 'kysely';
import { nameKey } from '../../names.js';
import { EVERYTHING } from '../change-log.js';
import type { Dialect } from '../schema.js';
import { BULK_LOAD_SETTING, changeTriggerName } from './0003-change-log.js';

/** Users whose keys are written per statement while the column is filled. */
const BATCH = 10_000;

/**
 * `users.name_key`: what a user name looks like (see nameKey), indexed, so that a name an identity provider
 * brings can be refused when it looks like an existing user's without reading every name. Existing users get
 * theirs here; the change log records one broad change instead of a row per user.
 */
export function userNameKeys(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      // Kysely runs SQLite migrations outside a transaction: this one needs one, or a failure could leave the
      // log's trigger dropped. (PostgreSQL migrations run in one already.)
      if (dialect === 'postgres') return addKeys(db, dialect);
      await sql`BEGIN IMMEDIATE`.execute(db);
      try {
        await addKeys(db, dialect);
        await sql`COMMIT`.execute(db);
      } catch (err) {
        await sql`ROLLBACK`.execute(db);
        throw err;
      }
    },
  };
}

async function addKeys(db: Kysely<any>, dialect: Dialect): Promise<void> {
  await sql`ALTER TABLE users ADD COLUMN name_key text`.execute(db);
  await sql`CREATE INDEX users_by_name_key ON users (name_key)`.execute(db);
  // The per-row log of the backfill is of no use to anyone: suppressed, then one broad change.
  let trigger: string | undefined;
  if (dialect === 'postgres') {
    await sql.raw(`SET LOCAL ${BULK_LOAD_SETTING} = 'on'`).execute(db);
  } else {
    const name = changeTriggerName('users', 'update');
    trigger = (await sql<{ sql: string }>`SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = ${name}`.execute(db)).rows[0]
      ?.sql;
    if (trigger !== undefined) await sql.raw(`DROP TRIGGER ${name}`).execute(db);
  }
  for (let after = 0; ;) {
    const { rows } = await sql<{
      id: number;
      name: string;
    }>`SELECT id, name FROM users WHERE id > ${after} ORDER BY id LIMIT ${BATCH}`.execute(db);
    if (rows.length === 0) break;
    after = Number(rows.at(-1)!.id);
    const keys = JSON.stringify(rows.map((r) => [Number(r.id), nameKey(r.name)]));
    if (dialect === 'postgres') {
      await sql`UPDATE users SET name_key = k.key FROM jsonb_to_recordset(
        (SELECT jsonb_agg(jsonb_build_object('id', e->0, 'key', e->1)) FROM jsonb_array_elements(${keys}::jsonb) e)) AS k(id bigint, key text)
        WHERE users.id = k.id`.execute(db);
    } else {
      await sql`UPDATE users SET name_key = (SELECT value ->> 1 FROM json_each(${keys}) WHERE value ->> 0 = users.id)
        WHERE id IN (SELECT value ->> 0 FROM json_each(${keys}))`.execute(db);
    }
  }
  if (trigger !== undefined) await sql.raw(trigger).execute(db);
  await sql`INSERT INTO change_log (table_name) VALUES (${EVERYTHING})`.execute(db);
}
