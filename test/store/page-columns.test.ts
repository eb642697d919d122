import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { pageFromColumns } from '../../src/store/listing-sql.js';
import { pageColumnsSql } from '../../src/store/sqlite/sqlite-listing-sql.js';

// The page body the database builds: the contract's Plant objects, the extra row left out whatever the names
// hold, and the sorting statement SqliteReadsAndChanges falls back to when SQLite aggregates rows out of their order.

const PLANTS = [
  { id: 3, name: 'Monstera', tag: 'tropical' },
  { id: 5, name: 'Fern ,{"name":"x"} \\ "quoted"', tag: null },
  { id: 9, name: '🌱\u0001\n', tag: ',{"name":' },
];

function database(): BetterSqlite3.Database {
  const db = new BetterSqlite3(':memory:');
  db.exec('CREATE TABLE plants (id INTEGER PRIMARY KEY, name TEXT NOT NULL, tag TEXT)');
  const insert = db.prepare('INSERT INTO plants (id, name, tag) VALUES (?, ?, ?)');
  // Inserted out of order, so that a query without ORDER BY meets them in another order than the ids'.
  for (const p of [PLANTS[2]!, PLANTS[0]!, PLANTS[1]!]) insert.run(p.id, p.name, p.tag);
  return db;
}

const asPlants = (rows: typeof PLANTS) => rows.map(({ name, tag }) => (tag === null ? { name } : { name, tag }));

describe('page columns', () => {
  it('SQLite builds the Plant objects of a page, and the extra row is left out whatever the names hold', () => {
    const db = database();
    for (let limit = 1; limit <= 3; limit++) {
      // As the stores read it: one row more than the page holds.
      const sql = pageColumnsSql(`SELECT id, name, tag FROM plants ORDER BY id LIMIT ${limit + 1}`);
      const [ids, plants] = db.prepare(sql).raw(true).get() as [string, string];
      const page = pageFromColumns(ids, plants, limit, [7], true)!;
      assert.deepEqual(JSON.parse(page.json), asPlants(PLANTS.slice(0, limit)), `limit ${limit}`);
      assert.deepEqual(page.ids, [3, 5, 9].slice(0, limit));
      assert.equal(page.more, limit < 3);
      // The first plant after the page: what a cached page's span ends before (see ScopedCache).
      assert.equal(page.next, [5, 9, undefined][limit - 1]);
      assert.deepEqual(page.groupIds, [7]);
    }
  });

  it('ids out of order are refused, and the sorting statement puts rows that come unordered in order', () => {
    const db = database();
    // Rows in storage order, then a descending order: what an aggregate that did not keep the order would give.
    const rows = 'SELECT id, name, tag FROM (SELECT id, name, tag FROM plants ORDER BY id DESC LIMIT 3)';
    const [ids, plants] = db.prepare(pageColumnsSql(rows)).raw(true).get() as [string, string];
    assert.equal(pageFromColumns(ids, plants, 3, [], true), undefined);
    const [sortedIds, sortedPlants] = db
      .prepare(pageColumnsSql(rows, { ordered: true }))
      .raw(true)
      .get() as [string, string];
    const page = pageFromColumns(sortedIds, sortedPlants, 2, [], true)!;
    assert.deepEqual(JSON.parse(page.json), asPlants(PLANTS.slice(0, 2)));
    assert.equal(page.more, true);
  });

  it('an empty page is an empty array', () => {
    const db = database();
    const [ids, plants] = db.prepare(pageColumnsSql('SELECT id, name, tag FROM plants WHERE id > 100')).raw(true).get() as [string, string];
    assert.deepEqual(pageFromColumns(ids, plants, 20, [], true), {
      json: '[]',
      ids: [],
      more: false,
      next: undefined,
      groupIds: [],
      cacheable: true,
    });
  });
});
