import type pg from 'pg';
import { BULK_IMPORT_INDEXES } from '../catalogue-import.js';
import { BULK_LOAD_SETTING, MEMBER_GRANTS } from '../schema-names.js';

/** The tables an import fills row by row in bulk: those whose keys, indexes and row triggers a first load sets aside. */
const FILLED_TABLES = ['plants', 'plant_user_grants', 'plant_group_grants'];

/**
 * What a first load goes without, as statements that drop it and add it back: the indexes of
 * BULK_IMPORT_INDEXES and the grant tables' primary keys (built by one sort each at the end), the foreign keys
 * of the tables an import fills, and their row triggers that an import silences (BULK_LOAD_SETTING).
 * Checked row by row, the keys are most of a first load's time; added back, they check every row in one join per
 * key.
 */
async function firstLoadDeferrals(client: pg.PoolClient): Promise<{ drop: string[]; add: string[] }> {
  const { rows: indexes } = await client.query<{ name: string; definition: string }>(
    `SELECT quote_ident(indexname) AS name, indexdef AS definition FROM pg_indexes
     WHERE schemaname = current_schema() AND indexname = ANY($1::text[]) ORDER BY indexname`,
    [BULK_IMPORT_INDEXES],
  );
  // The grant tables' primary keys too: with no plant there is no grant, and a key filled row by row in another
  // order than its rows arrive in (by grantee, where rows come by plant) splits pages all through the load, ending
  // a third larger than one built by one sort at the end; the member grants' fill also checks its key with one
  // speculative insert a row.
  const { rows: keys } = await client.query<{ table: string; name: string; definition: string }>(
    `SELECT conrelid::regclass::text AS table, quote_ident(conname) AS name, pg_get_constraintdef(oid) AS definition
     FROM pg_constraint
     WHERE (contype = 'f' AND conrelid = ANY($1::regclass[]))
        OR (contype = 'p' AND conrelid IN ('${MEMBER_GRANTS}'::regclass, 'plant_user_grants'::regclass, 'plant_group_grants'::regclass))
     ORDER BY contype = 'p', conrelid, conname`,
    [FILLED_TABLES],
  );
  // With the setting on, these do nothing for an import's rows, yet each still tests it on every row. Only those
  // enabled now, so that a trigger an operator disabled stays so.
  const { rows: triggers } = await client.query<{ table: string; name: string }>(
    `SELECT tgrelid::regclass::text AS table, quote_ident(tgname) AS name FROM pg_trigger
     WHERE tgrelid = ANY($1::regclass[]) AND NOT tgisinternal AND tgenabled = 'O' AND strpos(pg_get_triggerdef(oid), $2) > 0
     ORDER BY tgrelid, tgname`,
    [FILLED_TABLES, `'${BULK_LOAD_SETTING}'`],
  );
  const trigger = (t: { table: string; name: string }, action: 'DISABLE' | 'ENABLE') =>
    `ALTER TABLE ${t.table} ${action} TRIGGER ${t.name}`;
  return {
    // The keys first: the first of them locks `plants`, which is what a reader of the catalogue holds first. Taken
    // in another order (a grant table's index first), a reader that holds `plants` and then reads that grant
    // table would wait for the load while the load waits for it, until the load's lock timeout.
    // The triggers last, when each of their tables is held already.
    drop: [
      ...keys.map((k) => `ALTER TABLE ${k.table} DROP CONSTRAINT ${k.name}`),
      ...indexes.map((i) => `DROP INDEX ${i.name}`),
      ...triggers.map((t) => trigger(t, 'DISABLE')),
    ],
    add: [
      ...indexes.map((i) => i.definition),
      ...keys.map((k) => `ALTER TABLE ${k.table} ADD CONSTRAINT ${k.name} ${k.definition}`),
      ...triggers.map((t) => trigger(t, 'ENABLE')),
    ],
  };
}

/** SQLSTATEs of a lock not taken: lock_timeout ran out (55P03), or a reader and the load waited on each other (40P01). */
const LOCK_NOT_TAKEN = new Set(['55P03', '40P01']);

/**
 * A first load (no plant yet) goes without some indexes and the foreign keys, and adds them back before its
 * commit: the ids it writes come from its own lookups and reservations, and adding a key back checks every row
 * anyway. Dropping them locks their tables (users and groups too) until the commit, so readers wait for the
 * load: with no catalogue to serve yet that costs little, while a load into a live catalogue keeps them. When
 * another transaction holds one of those tables for more than a second, the load keeps them too, rather than
 * make every reader queue behind its lock request; so it does when a reader that holds one table waits for
 * another it holds. Returns the statements that add back what was dropped.
 */
export async function dropForFirstLoad(client: pg.PoolClient): Promise<{ add: string[] }> {
  const none = { add: [] };
  const { rows } = await client.query<{ empty: boolean }>('SELECT NOT EXISTS (SELECT FROM plants) AS empty');
  if (!rows[0]!.empty) return none;
  const deferred = await firstLoadDeferrals(client);
  await client.query('SAVEPOINT drop_for_first_load');
  try {
    await client.query("SET LOCAL lock_timeout = '1s'");
    for (const statement of deferred.drop) await client.query(statement);
    await client.query('SET LOCAL lock_timeout = DEFAULT');
    await client.query('RELEASE SAVEPOINT drop_for_first_load');
    return deferred;
  } catch (err) {
    if (!LOCK_NOT_TAKEN.has((err as { code?: string }).code ?? '')) throw err;
    await client.query('ROLLBACK TO SAVEPOINT drop_for_first_load');
    return none;
  }
}
