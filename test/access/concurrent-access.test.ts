import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DomainError } from '../../src/catalogue/errors.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { recordBatch, type NumberedRecord } from '../../src/import-format/records.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { heldSessionsSkip, holdTransaction } from '../helpers/held-transaction.js';
import { bearer, rawRequest, seed, startApp, type RawResponse, type RunningApp } from '../helpers/http-app.js';
import { DERIVED_DIFFERENCE, lowerGroupBounds, plainQuery } from '../helpers/plain-sql.js';

// Access under two writers at once: one side's transaction is held open in another session (as `begin; …;` in
// psql or sqlite3), the other side commits meanwhile through the service (HTTP or the store the CLI uses), and then
// the first commits. Whatever the order, every answer is what one of the two sequential orders gives, and the
// listings afterwards are the access rule applied to the base tables: no plant kept by a member who left, none
// missing for one who joined, no derived row for a plant, membership or grant that is gone, never a 5xx.

after(() => cleanupBackends());

/** Long enough for the other side to reach the held transaction's rows (and wait for them, where it must). */
const OVERLAP_MS = 400;

/** `other` started while `held` is open; `held` commits after OVERLAP_MS; both outcomes are returned. */
async function overlapped<T>(held: Promise<{ commit(): Promise<void> }>, other: () => Promise<T>): Promise<T> {
  const transaction = await held;
  const answer = other();
  // A refusal may come while the commit is still under way: the caller handles it once this returns.
  answer.catch(() => {});
  await sleep(OVERLAP_MS);
  await transaction.commit();
  return answer;
}

const MEMBER_GRANTS_OF_NO_PLANT = 'SELECT * FROM plant_member_grants mg WHERE NOT EXISTS (SELECT 1 FROM plants p WHERE p.id = mg.plant_id)';

for (const backend of BACKENDS) {
  for (const lowGroupBounds of [false, true]) {
    describe(
      `access with a transaction held open beside it${lowGroupBounds ? ', groups going ranged and back' : ''} [${backend.name}]`,
      { skip: backend.skip || heldSessionsSkip(backend.name) },
      () => {
        let db: string;
        let store: Store;
        let server: RunningApp;
        let tokens: Record<string, string>;
        const ids: Record<string, PlantId> = {};
        const names = async (user: string): Promise<string[]> => {
          const res = await rawRequest(server.url, '/plants', bearer(tokens[user]!));
          assert.equal(res.status, 200, res.text);
          return (res.body as Array<{ name: string }>).map((p) => p.name);
        };
        const as = (user: string, method: string, path: string, body?: unknown): Promise<RawResponse> =>
          rawRequest(
            server.url,
            path,
            { ...bearer(tokens[user]!), ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
            method,
            body === undefined ? undefined : JSON.stringify(body),
          );
        const userId = (name: string) => `(SELECT id FROM users WHERE name = '${name}')`;
        const groupId = (name: string) => `(SELECT id FROM groups WHERE name = '${name}')`;
        const plantAt = (name: string) => `(SELECT id FROM plants WHERE name = '${name}')`;
        const assertDerivedRowsExact = async () => {
          assert.deepEqual(await plainQuery(db, DERIVED_DIFFERENCE), []);
          // sqlite3 leaves foreign keys off, so plain SQL there may leave grants of a deleted plant; PostgreSQL cascades.
          if (backend.name === 'postgres') assert.deepEqual(await plainQuery(db, MEMBER_GRANTS_OF_NO_PLANT), []);
        };

        before(async () => {
          db = await backend.freshDb();
          store = await openStore({ db });
          const users = ['alice', 'bob', 'carol', 'dave', 'erin', 'frank', 'gus', 'hana', 'ivan', 'jim', 'kim', 'mia', 'ned'];
          const seeded = await seed(store, {
            users: users.map((name) => ({ name })),
            groups: [
              { name: 'g', members: ['bob', 'erin'] },
              { name: 'h', members: ['gus'] },
              { name: 'doomed', members: [] },
              { name: 'doomed-too', members: ['ned'] },
            ],
            plants: [
              { name: 'secret', owner: 'alice' },
              { name: 'unshared', owner: 'alice', sharedWith: [{ group: 'g' }] },
              { name: 'shared', owner: 'alice' },
              { name: 'sql-shared', owner: 'alice' },
              { name: 'deleted', owner: 'alice', sharedWith: [{ group: 'h' }] },
              { name: 'gone', owner: 'alice' },
              { name: 'gone-public', owner: 'alice' },
            ],
          });
          tokens = seeded.tokens;
          for (const plant of seeded.plants) ids[plant.name] = plant.id;
          if (lowGroupBounds) await lowerGroupBounds(db);
          server = await startApp(store);
        });
        after(async () => {
          await server?.close();
          await store?.close();
        });

        it('a member who leaves while a plant is shared with the group does not keep it', async () => {
          const res = await overlapped(
            holdTransaction(db, `DELETE FROM group_members WHERE user_id = ${userId('bob')} AND group_id = ${groupId('g')}`),
            () => as('alice', 'PUT', `/plants/${ids.secret}/access/groups/g`),
          );
          assert.equal(res.status, 204, res.text);
          assert.ok(!(await names('bob')).includes('secret'), 'bob left the group and still sees its plant');
          assert.ok((await names('erin')).includes('secret'));
          await assertDerivedRowsExact();
        });

        it('a user who joins while a plant stops being shared with the group does not get it', async () => {
          const res = await overlapped(
            holdTransaction(db, `INSERT INTO group_members (group_id, user_id) VALUES (${groupId('g')}, ${userId('carol')})`),
            () => as('alice', 'DELETE', `/plants/${ids.unshared}/access/groups/g`),
          );
          assert.equal(res.status, 204, res.text);
          assert.ok(!(await names('carol')).includes('unshared'), 'carol joined and sees a plant no longer shared with the group');
          assert.ok((await names('carol')).includes('secret'), 'carol joined and does not see the group plant');
          await assertDerivedRowsExact();
        });

        it('a user who joins while a plant is shared with the group gets it', async () => {
          const res = await overlapped(
            holdTransaction(db, `INSERT INTO group_members (group_id, user_id) VALUES (${groupId('g')}, ${userId('dave')})`),
            () => as('alice', 'PUT', `/plants/${ids.shared}/access/groups/g`),
          );
          assert.equal(res.status, 204, res.text);
          assert.ok((await names('dave')).includes('shared'), 'dave joined and never gets the plant shared meanwhile');
          await assertDerivedRowsExact();
        });

        it('a membership removed by the CLI while plain SQL shares a plant leaves no row behind', async () => {
          const removed = await overlapped(
            holdTransaction(db, `INSERT INTO plant_group_grants (group_id, plant_id) VALUES (${groupId('g')}, ${plantAt('sql-shared')})`),
            () => store.groups.removeMember('g', 'erin'),
          );
          assert.equal(removed, true);
          assert.ok(!(await names('erin')).includes('sql-shared'), 'erin left the group and sees the plant shared meanwhile');
          await assertDerivedRowsExact();
        });

        it('a plant deleted while a member joins leaves no row for the plant', async () => {
          await overlapped(holdTransaction(db, `DELETE FROM plants WHERE id = ${plantAt('deleted')}`), () =>
            store.groups.addMember('h', 'hana'),
          );
          await assertDerivedRowsExact();
          assert.ok(!(await names('hana')).includes('deleted'));
          assert.ok(!(await names('gus')).includes('deleted'));
        });

        it('an import that shares plants with a group while its members change gives them to the members it ends with', async () => {
          // g is {carol, dave} here. The membership change is held open while the import runs and commits.
          await overlapped(
            holdTransaction(
              db,
              `INSERT INTO group_members (group_id, user_id) VALUES (${groupId('g')}, ${userId('jim')});
               DELETE FROM group_members WHERE group_id = ${groupId('g')} AND user_id = ${userId('carol')}`,
            ),
            () => store.bulk.importRecords(recordBatch([{ type: 'plant', name: 'imported-1', owner: 'alice', sharedWith: ['group:g'] }])),
          );
          assert.ok((await names('jim')).includes('imported-1'), 'jim joined while the import shared a plant with the group');
          assert.ok(!(await names('carol')).includes('imported-1'), 'carol left while the import shared a plant with the group');
          assert.ok((await names('dave')).includes('imported-1'));
          await assertDerivedRowsExact();

          // The import is held open, its plants written, while the CLI adds a member and commits (on SQLite the
          // member waits for the import's write lock instead).
          let release!: () => void;
          const gate = new Promise<void>((resolve) => (release = resolve));
          let reached!: () => void;
          const atGate = new Promise<void>((resolve) => (reached = resolve));
          async function* held(): AsyncGenerator<NumberedRecord[]> {
            yield [
              { line: 1, record: { type: 'plant', name: 'imported-2', owner: 'alice', sharedWith: ['group:g'] } },
              // A user after the plant: the plants so far are written now, not at the commit.
              { line: 2, record: { type: 'user', name: 'lee' } },
            ];
            reached();
            await gate;
          }
          const importing = store.bulk.importRecords(held());
          await atGate;
          await sleep(OVERLAP_MS / 2);
          const joining = store.groups.addMember('g', 'kim');
          await sleep(OVERLAP_MS / 2);
          release();
          await importing;
          assert.equal(await joining, true);
          assert.ok((await names('kim')).includes('imported-2'), 'kim joined while an import was open and never gets its plant');
          assert.ok((await names('kim')).includes('imported-1'));
          assert.ok(!(await names('carol')).includes('imported-2'));
          await assertDerivedRowsExact();
        });

        it('a member added or removed by the CLI in a group or for a user deleted meanwhile is not found, never a key error', async () => {
          const notFound = (name: string) => (err: unknown) =>
            err instanceof DomainError && err.kind === 'not_found' && err.message.includes(name);
          await assert.rejects(
            overlapped(holdTransaction(db, `DELETE FROM users WHERE name = 'mia'`), () => store.groups.addMember('g', 'mia')),
            notFound('"mia"'),
          );
          await assert.rejects(
            overlapped(holdTransaction(db, `DELETE FROM groups WHERE name = 'doomed-too'`), () =>
              store.groups.addMember('doomed-too', 'ivan'),
            ),
            notFound('"doomed-too"'),
          );
          await store.groups.add('doomed-three');
          await store.groups.addMember('doomed-three', 'ned');
          await assert.rejects(
            overlapped(holdTransaction(db, `DELETE FROM groups WHERE name = 'doomed-three'`), () =>
              store.groups.removeMember('doomed-three', 'ned'),
            ),
            notFound('"doomed-three"'),
          );
          await assertDerivedRowsExact();
        });

        it('sharing with a plant, a user or a group deleted meanwhile answers 404, never 500 or 200', async () => {
          const shareGone = await overlapped(holdTransaction(db, `DELETE FROM plants WHERE id = ${plantAt('gone')}`), () =>
            as('alice', 'PUT', `/plants/${ids.gone}/access/groups/g`),
          );
          assert.equal(shareGone.status, 404, shareGone.text);
          const publishGone = await overlapped(holdTransaction(db, `DELETE FROM plants WHERE id = ${plantAt('gone-public')}`), () =>
            as('alice', 'PUT', `/plants/${ids['gone-public']}/access`, { public: true, users: ['ivan'], groups: [] }),
          );
          assert.equal(publishGone.status, 404, publishGone.text);
          const userGone = await overlapped(holdTransaction(db, `DELETE FROM users WHERE name = 'frank'`), () =>
            as('alice', 'PUT', `/plants/${ids.secret}/access/users/frank`),
          );
          assert.equal(userGone.status, 404, userGone.text);
          const groupGone = await overlapped(holdTransaction(db, `DELETE FROM groups WHERE name = 'doomed'`), () =>
            as('alice', 'PUT', `/plants/${ids.secret}/access/groups/doomed`),
          );
          assert.equal(groupGone.status, 404, groupGone.text);
          await assertDerivedRowsExact();
        });
      },
    );
  }

  describe(`rows that point at no plant [${backend.name}]`, { skip: backend.skip || heldSessionsSkip(backend.name) }, () => {
    it('neither cut a page short nor end the paging', async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      const server = await startApp(store);
      try {
        const plants = Array.from({ length: 29 }, (_, i) => ({
          name: `p${String(i).padStart(2, '0')}`,
          owner: 'alice',
          sharedWith: [i % 2 === 0 ? { user: 'bob' } : { group: 'g' }],
        }));
        const doomed = Array.from({ length: 12 }, (_, i) => ({ name: `doomed${i}`, owner: 'alice', sharedWith: [{ user: 'bob' }] }));
        const { tokens } = await seed(store, {
          users: [{ name: 'alice' }, { name: 'bob' }],
          groups: [{ name: 'g', members: ['bob'] }],
          plants: [...doomed.slice(0, 6), ...plants.slice(0, 10), ...doomed.slice(6), ...plants.slice(10)],
        });
        // What a write that bypassed the rules leaves: grants of deleted plants (sqlite3 without foreign keys), and
        // member grants of plants that are gone (on PostgreSQL, what a lost race left).
        if (backend.name === 'sqlite') {
          const held = await holdTransaction(db, `DELETE FROM plants WHERE name LIKE 'doomed%'`);
          await held.commit();
        } else {
          const held = await holdTransaction(
            db,
            `INSERT INTO plant_member_grants (user_id, plant_id, group_id)
              SELECT u.id, p.id, g.id FROM users u, groups g, plants p WHERE u.name = 'bob' AND p.name LIKE 'doomed%';
             DELETE FROM plants WHERE name LIKE 'doomed%'`,
          );
          await held.commit();
        }
        await sleep(50);
        const expected = plants.map((p) => p.name);
        const all = await rawRequest(server.url, '/plants', bearer(tokens.bob!));
        assert.deepEqual(
          (all.body as Array<{ name: string }>).map((p) => p.name),
          expected,
        );
        for (const limit of [5, 7, 29, 30]) {
          const seen: string[] = [];
          let next: string | undefined = `/plants?limit=${limit}`;
          while (next !== undefined) {
            const res = await rawRequest(server.url, next, bearer(tokens.bob!));
            assert.equal(res.status, 200, res.text);
            const page = (res.body as Array<{ name: string }>).map((p) => p.name);
            assert.ok(page.length === limit || res.headers.link === undefined, `a page of ${page.length} of ${limit} with a Link`);
            seen.push(...page);
            next = /^<([^>]+)>/.exec(String(res.headers.link ?? ''))?.[1];
          }
          assert.deepEqual(seen, expected, `paging with limit=${limit}`);
        }
      } finally {
        await server.close();
        await store.close();
      }
    });
  });

  describe(`a deleted plant on the instance that deleted it [${backend.name}]`, { skip: backend.skip }, () => {
    it("is gone from its grantees' next request", async () => {
      const store = await backend.open();
      const server = await startApp(store);
      try {
        const { tokens } = await seed(store, {
          users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }],
          groups: [{ name: 'g', members: ['carol'] }],
        });
        for (let round = 0; round < 10; round++) {
          const id = 9000 + round;
          const created = await rawRequest(
            server.url,
            '/plants',
            { ...bearer(tokens.alice!), 'content-type': 'application/json' },
            'POST',
            JSON.stringify({ id, name: `fern${round}` }),
          );
          assert.equal(created.status, 200, created.text);
          for (const path of ['users/bob', 'groups/g']) {
            const shared = await rawRequest(server.url, `/plants/${id}/access/${path}`, bearer(tokens.alice!), 'PUT');
            assert.equal(shared.status, 204, shared.text);
          }
          // Both grantees' pages are read, and cached, before the delete.
          for (const user of ['bob', 'carol']) {
            const before = await rawRequest(server.url, '/plants?limit=10', bearer(tokens[user]!));
            assert.ok(before.text.includes(`fern${round}`), `${user} sees the plant: ${before.text}`);
          }
          const deleted = await rawRequest(server.url, `/plants/${id}`, bearer(tokens.alice!), 'DELETE');
          assert.equal(deleted.status, 204, deleted.text);
          for (const user of ['bob', 'carol']) {
            const next = await rawRequest(server.url, '/plants?limit=10', bearer(tokens[user]!));
            assert.ok(!next.text.includes(`fern${round}`), `round ${round}: ${user} still sees the deleted plant: ${next.text}`);
          }
        }
      } finally {
        await server.close();
        await store.close();
      }
    });
  });
}
