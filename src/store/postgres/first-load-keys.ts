import type pg from 'pg';

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
export async function dropKeysForFirstLoad(client: pg.PoolClient): Promise<{ add: string[] }> {
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
