import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { generateToken } from '../../src/catalogue/tokens.js';
import { pageFromColumns } from '../../src/store/listing-sql.js';
import { openStore } from '../../src/store/open-store.js';
import { visiblePlantsSql } from '../../src/store/postgres/postgres-listing-sql.js';
import { createPool } from '../../src/store/postgres/postgres-connection.js';
import { PostgresReads } from '../../src/store/postgres/postgres-reads.js';
import { adminQuery, dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';

// A page's aggregates take its rows in the order its plan gives them, unsorted (postgres-listing-sql.ts). When a plan
// gives them out of order, the page is read again by the statement that sorts them: the page is the same either way.
// Sessions that may not join by nested loop or merge join make one: plants read whole in storage order, which updates
// took out of id order, against the page's positions hashed.

const skip = await requirePostgres();

describe('PostgreSQL reads a page again, sorted, when its rows come out of order', { skip }, () => {
  const { schema, url } = freshSchema();
  let pool: pg.Pool;
  let userId: number;
  let hash: Buffer;
  const names: string[] = [];

  before(async () => {
    const store = await openStore({ db: url });
    try {
      await store.users.add('ada', false);
      for (let i = 0; i < 30; i++) {
        names.push(`plant ${i}`);
        await store.plants.create(OPERATOR, { name: names[i]!, owner: 'ada' });
      }
      const token = generateToken();
      hash = token.hash;
      await store.tokens.add({ user: 'ada', hash, label: 'page order' });
    } finally {
      await store.close();
    }
    // Each row updated leaves its place for the end of the table: the first ten now come last in storage order.
    await adminQuery(`UPDATE ${schema}.plants SET name = name WHERE id IN (SELECT id FROM ${schema}.plants ORDER BY id LIMIT 10)`);
    userId = Number((await adminQuery<{ id: string }>(`SELECT id FROM ${schema}.users WHERE name = 'ada'`))[0]!.id);
    // The listings' pool as the service makes it, its sessions then barred from the joins that keep the order.
    pool = createPool(url, { url }, 'listings').pool;
    pool.on('connect', (client) => {
      void client.query('SET enable_nestloop = off; SET enable_mergejoin = off; SET enable_seqscan = on');
    });
  });

  after(async () => {
    await pool?.end();
    await dropSchema(schema);
  });

  it('the unsorted statement gives them out of order in such a session', async () => {
    const { rows } = await pool.query<{ ids: string; plants: string }>({ text: visiblePlantsSql(false), values: [userId, 0, 21] });
    assert.equal(pageFromColumns(rows[0]!.ids, rows[0]!.plants, 20, [], true), undefined, rows[0]!.ids);
  });

  it('a listing is the page in id order', async () => {
    const reads = new PostgresReads(pool, pool, false, () => 0n);
    const page = await reads.visiblePlants(userId, { after: 0, limit: 20 }, []);
    assert.deepEqual(
      JSON.parse(page.json),
      names.slice(0, 20).map((name) => ({ name })),
    );
    assert.equal(page.more, true);
    assert.deepEqual(
      page.ids,
      [...page.ids].sort((a, b) => a - b),
    );
  });

  it("a token's page read with it is left to be read apart", async () => {
    const reads = new PostgresReads(pool, pool, false, () => 0n);
    const { credential, page } = await reads.findTokenWithPage!(hash, { after: 0, limit: 20 }, Date.now());
    assert.equal(credential?.userId, userId);
    assert.equal(page, undefined);
  });
});
