import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { tokenPagesSql, visiblePlantsSql } from '../../src/store/postgres/postgres-listing-sql.js';
import { openStore } from '../../src/store/open-store.js';
import { createPool } from '../../src/store/postgres/postgres-connection.js';
import { dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';

// A listing's cost must not grow with the catalogue (docs/performance.md): its plan is kept rather than made again
// for every page, and that kept plan removes the union's duplicates by sorting, since a generic plan sizes a hash
// table by the planner's guess of the rows, which grows with the tables. Every table is read by its indexes, however
// small: a kept plan would otherwise read a small table whole for each token of a batch.

const skip = await requirePostgres();

describe("PostgreSQL keeps the listing's plan", { skip }, () => {
  const { schema, url } = freshSchema();
  let pool: pg.Pool;

  before(async () => {
    const store = await openStore({ db: url });
    await store.close();
    pool = createPool(url, { url }, 'listings').pool;
  });

  after(async () => {
    await pool?.end();
    await dropSchema(schema);
  });

  it('plans the listing generically, with no hashed aggregate', async () => {
    const client = await pool.connect();
    try {
      const listing = { name: 'listing', text: visiblePlantsSql(false) };
      for (const limit of [21, 101, 2]) await client.query({ ...listing, values: [1, 0, limit] });
      const { rows } = await client.query<{ generic_plans: string; custom_plans: string }>(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE name = 'listing'",
      );
      assert.deepEqual(
        rows.map((r) => [Number(r.generic_plans), Number(r.custom_plans)]),
        [[3, 0]],
      );
      const explained = await client.query<{ 'QUERY PLAN': unknown }>('EXPLAIN (FORMAT JSON) EXECUTE listing(1, 0, 21)');
      const plan = JSON.stringify(explained.rows[0]!['QUERY PLAN']);
      const aggregates = plan.match(/"Strategy":"[^"]+"/g) ?? [];
      assert.ok(aggregates.length > 0, plan);
      assert.deepEqual(
        aggregates.filter((strategy) => /Hashed|Mixed/.test(strategy)),
        [],
        plan,
      );
    } finally {
      client.release();
    }
  });

  it('reads every table of a listing by its indexes, small as they are', async () => {
    const client = await pool.connect();
    try {
      // Each with the index its small table is probed by.
      const statements = [
        ['tokens_with_pages', tokenPagesSql(false), "('{}'::bytea[], '{}'::bigint[], '{}'::bigint[], 0)", 'tokens_token_hash_key'],
        [
          'tokens_with_tag_pages',
          tokenPagesSql(true),
          "('{}'::bytea[], '{}'::bigint[], '{}'::bigint[], '{}'::text[], 0)",
          'tokens_token_hash_key',
        ],
        ['listing_with_claims', visiblePlantsSql(true), "(1, 0, 21, '{a}'::text[])", 'groups_name_key'],
      ] as const;
      for (const [name, text, values, index] of statements) {
        await client.query(`PREPARE ${name} AS ${text}`);
        const { rows } = await client.query<{ 'QUERY PLAN': string }>(`EXPLAIN (COSTS OFF) EXECUTE ${name}${values}`);
        const plan = rows.map((row) => row['QUERY PLAN']).join('\n');
        assert.doesNotMatch(plan, /Seq Scan/, plan);
        assert.ok(plan.includes(`Index Scan using ${index}`), plan);
      }
    } finally {
      client.release();
    }
  });
});
