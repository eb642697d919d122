import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { CatalogueRecord, NumberedRecord } from '../../src/import-format/records.js';
import { recordBatch } from '../../src/import-format/records.js';
import { openStore } from '../../src/store/open-store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';

// The import below the CLI: what it writes for records at the edges of the format, and the summary it gives back,
// which counts what it wrote.

after(() => cleanupBackends());

/** The records in batches of `size`, numbered by line, as the reader hands them over. */
async function* inBatches(records: readonly CatalogueRecord[], size: number): AsyncGenerator<NumberedRecord[]> {
  for (let from = 0; from < records.length; from += size) {
    yield records.slice(from, from + size).map((record, i) => ({ line: from + i + 1, record }));
  }
}

for (const backend of BACKENDS) {
  describe(`catalogue import [${backend.name}]`, { skip: backend.skip }, () => {
    it('counts the grants it writes: a grantee named twice is granted once', async () => {
      const store = await backend.open();
      const summary = await store.bulk.importRecords(
        recordBatch([
          { type: 'user', name: 'alice' },
          { type: 'user', name: 'bob' },
          { type: 'group', name: 'gardeners', members: ['bob'] },
          { type: 'plant', name: 'Fern', owner: 'alice', sharedWith: ['bob', 'user:bob'] },
          { type: 'plant', name: 'Ivy', owner: 'alice', sharedWith: ['group:gardeners', 'bob', 'group:gardeners'] },
        ]),
      );
      const shares: string[][] = [];
      for await (const record of store.bulk.exportRecords()) if (record.type === 'plant') shares.push(record.sharedWith ?? []);
      assert.deepEqual(shares, [['bob'], ['bob', 'group:gardeners']]);
      assert.deepEqual(summary, { users: 2, groups: 1, plants: 2, grants: 3 });
    });

    it('compares the users it adds with those it only lists again: a look-alike is refused, a stored pair kept', async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      const lookalike = '\u0430lice'; // a Cyrillic a
      await store.users.add('alice', false);
      await assert.rejects(
        store.bulk.importRecords(
          recordBatch([
            { type: 'user', name: 'alice' },
            { type: 'user', name: lookalike },
          ]),
        ),
        { message: /^line 2: user name "\u0430lice" looks like that of the user "alice"/ },
      );
      assert.deepEqual(
        (await store.users.list()).map((u) => u.name),
        ['alice'],
      );
      // A pair stored before (plain SQL can make one) is no import's to refuse when the file names one of them.
      await plainSql(
        db,
        `INSERT INTO users (name, is_admin, created_at, name_key) SELECT '${lookalike}', 0, 0, name_key FROM users WHERE name = 'alice'`,
      );
      await store.bulk.importRecords(recordBatch([{ type: 'user', name: 'alice' }]));
    });

    it("finds a group's stored members, and names the first unknown one in the file's order", async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      try {
        const stored = Array.from({ length: 2_000 }, (_, i) => `u${i}`);
        await store.bulk.importRecords(recordBatch(stored.map((name): CatalogueRecord => ({ type: 'user', name }))));
        await assert.rejects(
          store.bulk.importRecords(
            recordBatch([
              { type: 'user', name: 'new' },
              { type: 'group', name: 'g', members: ['u5', 'new', 'u3', 'u5', 'nobody1', 'u7', 'nobody0'] },
            ]),
          ),
          /^DomainError: line 2: no user named "nobody1" \(define it on an earlier line\)$/,
        );
        const summary = await store.bulk.importRecords(
          recordBatch([
            { type: 'user', name: 'new' },
            { type: 'group', name: 'g', members: ['new', ...stored, 'u0'] },
            { type: 'plant', name: 'P', owner: 'u1999', sharedWith: ['group:g', 'u42'] },
          ]),
        );
        assert.deepEqual(summary, { users: 1, groups: 1, plants: 1, grants: 2 });
      } finally {
        await store.close();
      }
      const members = await plainQuery<{ name: string }>(
        db,
        "SELECT u.name FROM group_members m JOIN users u ON u.id = m.user_id JOIN groups g ON g.id = m.group_id WHERE g.name = 'g' ORDER BY u.id",
      );
      assert.equal(members.length, 2_001);
      assert.deepEqual(
        members.slice(0, 2).map((m) => m.name),
        ['u0', 'u1'],
      );
    });

    it(
      'imports a group with as many members as the format allows for, far more than a call takes arguments',
      {
        skip: backend.name === 'postgres' ? false : 'the PostgreSQL import gathers members; SQLite writes each at once',
      },
      async () => {
        const db = await backend.freshDb();
        const store = await openStore({ db });
        try {
          const names = Array.from({ length: 200_000 }, (_, i) => `u${i}`);
          const records: CatalogueRecord[] = [
            ...names.map((name): CatalogueRecord => ({ type: 'user', name })),
            { type: 'group', name: 'everyone', members: names },
          ];
          const summary = await store.bulk.importRecords(inBatches(records, 10_000));
          assert.deepEqual(summary, { users: names.length, groups: 1, plants: 0, grants: 0 });
        } finally {
          await store.close();
        }
        const [{ n }] = (await plainQuery<{ n: number | string }>(db, 'SELECT count(*) AS n FROM group_members')) as [
          { n: number | string },
        ];
        assert.equal(Number(n), 200_000, 'every member is written');
      },
    );
  });
}
