import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { DomainError } from '../../src/catalogue/errors.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { openStore } from '../../src/store/open-store.js';
import { recordBatch } from '../../src/import-format/records.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { plainSql } from '../helpers/plain-sql.js';

// Automatic plant ids against an oracle: whatever ids clients choose (small, or at the very top of the range), and
// whatever is deleted, every plant numbered automatically (by the operator, an import or plain SQL) gets the largest
// id ever used plus one, or, when that would pass 2^53 - 1, is refused and nothing is written.

const MAX = Number.MAX_SAFE_INTEGER;

type Op =
  | { kind: 'client'; id: number }
  | { kind: 'delete'; pick: number }
  | { kind: 'operator' }
  | { kind: 'sql' }
  | { kind: 'import'; count: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      kind: fc.constant('client' as const),
      id: fc.oneof(fc.integer({ min: 1, max: 40 }), fc.integer({ min: MAX - 3, max: MAX })),
    }),
    weight: 3,
  },
  { arbitrary: fc.record({ kind: fc.constant('delete' as const), pick: fc.nat() }), weight: 2 },
  { arbitrary: fc.constant({ kind: 'operator' as const }), weight: 2 },
  { arbitrary: fc.constant({ kind: 'sql' as const }), weight: 1 },
  { arbitrary: fc.record({ kind: fc.constant('import' as const), count: fc.integer({ min: 1, max: 3 }) }), weight: 1 },
);

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`automatic plant ids against an oracle [${backend.name}]`, { skip: backend.skip }, () => {
    it('number after the largest id ever used, within the range, or refuse and write nothing', async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 25 }), async (ops) => {
          const db = await backend.freshDb();
          const store = await openStore({ db });
          try {
            await store.users.add('alice', false);
            const alice = { userId: (await store.users.list())[0]!.id, admin: false };
            // The oracle: the plants in catalogue order, and the largest id ever used.
            const live: number[] = [];
            let largest = 0;
            let n = 0;
            /** Runs an automatic numbering of `count` plants and checks it against the oracle. */
            const automatic = async (count: number, run: () => Promise<void>) => {
              if (largest + count > MAX) {
                await assert.rejects(run(), (err: Error) => /no automatic plant id is left/.test(err.message));
                return;
              }
              await run();
              for (let i = 0; i < count; i++) live.push(++largest);
            };
            for (const o of ops) {
              const name = `plant ${++n}`;
              switch (o.kind) {
                case 'client': {
                  const created = store.plants.create(alice, { id: o.id, name });
                  if (live.includes(o.id)) {
                    await assert.rejects(created, (err) => err instanceof DomainError && err.kind === 'conflict');
                  } else {
                    assert.equal((await created).outcome, 'created');
                    live.push(o.id);
                    largest = Math.max(largest, o.id);
                  }
                  break;
                }
                case 'delete': {
                  if (live.length === 0) break;
                  const [id] = live.splice(o.pick % live.length, 1);
                  assert.equal(await store.plants.delete(OPERATOR, id as PlantId), 'deleted');
                  break;
                }
                case 'operator':
                  await automatic(1, async () => {
                    const { id } = await store.plants.create(OPERATOR, { name, owner: 'alice' });
                    assert.equal(id, largest + 1);
                  });
                  break;
                case 'sql':
                  await automatic(1, () =>
                    plainSql(db, `INSERT INTO plants (name, owner_id, is_public, created_at) VALUES ('${name}', ${alice.userId}, 0, 0)`),
                  );
                  break;
                case 'import':
                  await automatic(o.count, async () => {
                    const records = Array.from({ length: o.count }, (_, i) => ({
                      type: 'plant' as const,
                      name: `${name}.${i}`,
                      owner: 'alice',
                    }));
                    await store.bulk.importRecords(recordBatch(records));
                  });
                  break;
              }
              assert.deepEqual(
                (await store.plants.list({})).map((p) => p.id),
                live,
              );
            }
          } finally {
            await store.close();
          }
        }),
        { numRuns: 50 },
      );
    });
  });
}
