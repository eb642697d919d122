import { remove as withoutConfusables } from 'confusables';
import { sql, type Kysely, type Migration } from 'kysely';
import { unlogged } from './backfill.js';

type Dialect = 'sqlite' | 'postgres';

/** What a user name looked like when this migration was released (the running code's rule may grow; this one stays). */
const nameKey = (name: string): string => withoutConfusables(name.normalize('NFKC')).normalize('NFKC').toLowerCase();

/** Users whose keys are written per statement while the column is filled. */
const BATCH = 10_000;

/**
 * `users.name_key`: what a user name looks like (see nameKey), indexed, so that a name an identity provider
 * brings can be refused when it looks like an existing user's without reading every name. Existing users get
 * theirs here; the change log records one broad change instead of a row per user.
 */
export function userNameKeys(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => addKeys(db, dialect),
  };
}

async function addKeys(db: Kysely<any>, dialect: Dialect): Promise<void> {
  await sql`ALTER TABLE users ADD COLUMN name_key text`.execute(db);
  await sql`CREATE INDEX users_by_name_key ON users (name_key)`.execute(db);
  await unlogged(db, dialect, 'users', () => fillKeys(db, dialect));
  // Readers hear of the backfill as one broad change.
  await sql`INSERT INTO change_log (table_name) VALUES ('*')`.execute(db);
}

async function fillKeys(db: Kysely<any>, dialect: Dialect): Promise<void> {
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
}
