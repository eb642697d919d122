import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { DomainError } from '../../src/catalogue/errors.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { recordBatch, type NumberedRecord } from '../../src/import-format/records.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { assertError, eventually } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends, type Backend } from '../helpers/backends.js';
import { heldSessionsSkip, holdTransaction } from '../helpers/held-transaction.js';
import { bearer, mintToken, rawRequest, seed, startApp, type MintedToken, type RawResponse, type RunningApp } from '../helpers/http-app.js';
import { DERIVED_DIFFERENCE, lowerGroupBounds, plainQuery, plainSql } from '../helpers/plain-sql.js';
import { execFile } from 'node:child_process';
import { exchangeRaw, parseResponses } from '../helpers/raw-http.js';
import { promisify } from 'node:util';

// Access under two writers at once: one side's transaction is held open in another session (as `begin; …;` in
// psql or sqlite3), the other side commits meanwhile through the service (HTTP or the store the CLI uses), and then
// the first commits. Whatever the order, every answer is what one of the two sequential orders gives, and the
// listings afterwards are the access rule applied to the base tables: no plant kept by a member who left, none
// missing for one who joined, no derived row for a plant, membership or grant that is gone, never a 5xx. A change
// of a plant (PATCH) waits for a delete of it and then finds none; a share, an unshare, a delete or another change
// of the plant beside it ends as the two in some order: the plant changed and shown, with its new name and tag, to
// exactly those who see it then, or gone for everyone, never back; of two changes with one If-Match, one is made.

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

/**
 * Plain SQL that waits for a lock another session holds, without blocking this process: on SQLite the sqlite3
 * command in a process of its own (better-sqlite3 would wait on this event loop, which the held session's commit
 * needs), on PostgreSQL a session of its own.
 */
async function plainSqlWaiting(db: string, statement: string): Promise<void> {
  if (db.startsWith('postgres')) return plainSql(db, statement);
  await promisify(execFile)('sqlite3', ['-cmd', '.timeout 10000', db, statement]);
}

const MEMBER_GRANTS_OF_NO_PLANT = 'SELECT * FROM plant_member_grants mg WHERE NOT EXISTS (SELECT 1 FROM plants p WHERE p.id = mg.plant_id)';

/**
 * Polls `probe` until it holds, within the bound a commit of another session or instance has to show on a server:
 * on SQLite the first request a millisecond after it, on PostgreSQL one second.
 */
async function withinBound(backend: Backend, what: string, probe: () => Promise<boolean>): Promise<void> {
  if (backend.name === 'sqlite') {
    await sleep(2);
    assert.ok(await probe(), what);
  } else {
    await eventually(what, probe, { timeoutMs: 1_000 });
  }
}

/** A plant as the listing and GET /plants/{id} answer it: its name, and its tag after a `#` when it has one. */
const shown = (plant: { name: string; tag?: string }): string => (plant.tag === undefined ? plant.name : `${plant.name} #${plant.tag}`);

/** The answers to PATCH and GET /plants/{id}, to compare with. */
const asPlant = (id: number, name: string, tag?: string) => ({ id, name, ...(tag === undefined ? {} : { tag }) });

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
        /** The user's cached page (of 1000), each plant as `shown`. */
        const page = async (user: string): Promise<string[]> => {
          const res = await rawRequest(server.url, '/plants?limit=1000', bearer(tokens[user]!));
          assert.equal(res.status, 200, res.text);
          return (res.body as Array<{ name: string; tag?: string }>).map(shown);
        };
        /** The names on the user's page of one tag (of 1000). */
        const tagPage = async (user: string, tag: string): Promise<string[]> => {
          const res = await rawRequest(server.url, `/plants?limit=1000&tag=${tag}`, bearer(tokens[user]!));
          assert.equal(res.status, 200, res.text);
          return (res.body as Array<{ name: string }>).map((p) => p.name);
        };
        /** Whether each of `viewers` has `plant` on its page of tag `now` and none has it on its page of tag `before`. */
        const underTag = async (viewers: string[], plant: string, now: string, before: string) => {
          for (const user of viewers) {
            if (!(await tagPage(user, now)).includes(plant) || (await tagPage(user, before)).includes(plant)) return false;
          }
          return true;
        };
        /** Whether every one of `viewers` has `plant` on its page and none of `others` has it, nor any of `gone`. */
        const onPagesOf = async (viewers: string[], others: string[], plant: string, gone: string[] = []) => {
          for (const user of [...viewers, ...others]) {
            const seen = await page(user);
            if (seen.includes(plant) !== viewers.includes(user) || gone.some((name) => seen.some((p) => p.split(' #')[0] === name)))
              return false;
          }
          return true;
        };
        /** GET /plants/{id} by each user: `plant` to the viewers, 404 to the others. */
        const readsOf = async (id: number, viewers: string[], others: string[], plant?: object) => {
          for (const user of viewers) {
            const res = await as(user, 'GET', `/plants/${id}`);
            assert.equal(res.status, 200, `${user} reads plant ${id}: ${res.text}`);
            assert.deepEqual(res.body, plant, `${user} reads plant ${id}`);
          }
          for (const user of others) assertError(await as(user, 'GET', `/plants/${id}`), 404, 40402);
        };
        /** The plant with public id `id`, as plain SQL names its row (the API's id is not its catalogue position). */
        const plantWithId = (id: number) => `(SELECT id FROM plants WHERE api_id = ${id})`;
        /** How many plants plain SQL finds with public id `id`. */
        const rowsWithId = async (id: number) =>
          (await plainQuery<{ n: number | string }>(db, `SELECT count(*) AS n FROM plants WHERE api_id = ${id}`))[0]!.n;
        /** Resolves once a statement waits for a row of this schema's plants that a held session locks. */
        const untilAPlantRowIsWaitedFor = (what: string) =>
          eventually(what, async () => {
            const [row] = await plainQuery<{ n: number | string }>(
              db,
              "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'tuple' AND relation = 'plants'::regclass",
            );
            return Number(row!.n) > 0;
          });
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
          const users = [
            'alice',
            'bob',
            'carol',
            'dave',
            'erin',
            'frank',
            'gus',
            'hana',
            'ivan',
            'jim',
            'kim',
            'mia',
            'ned',
            'rita',
            'sam',
            'tess',
          ];
          const seeded = await seed(store, {
            users: [...users.map((name) => ({ name })), { name: 'olga' }, { name: 'pam' }, { name: 'root', admin: true }],
            groups: [
              { name: 'g', members: ['bob', 'erin'] },
              { name: 'h', members: ['gus'] },
              { name: 'doomed', members: [] },
              { name: 'doomed-too', members: ['ned'] },
              { name: 'p', members: ['pam'] },
              { name: 'r', members: ['rita'] },
              { name: 'r2', members: [] },
            ],
            plants: [
              { name: 'secret', owner: 'alice' },
              { name: 'unshared', owner: 'alice', sharedWith: [{ group: 'g' }] },
              { name: 'shared', owner: 'alice' },
              { name: 'sql-shared', owner: 'alice' },
              { name: 'deleted', owner: 'alice', sharedWith: [{ group: 'h' }] },
              { name: 'gone', owner: 'alice' },
              { name: 'gone-public', owner: 'alice' },
              { name: 'to-change-shared', tag: 'old', owner: 'alice' },
              { name: 'to-change-unshared', tag: 'old', owner: 'alice', sharedWith: [{ user: 'olga' }, { group: 'p' }] },
              { name: 'to-change-deleted', owner: 'alice', sharedWith: [{ user: 'olga' }] },
              { name: 'to-delete-changed', owner: 'alice', sharedWith: [{ user: 'olga' }, { group: 'p' }] },
              { name: 'to-share-changed', tag: 'old', owner: 'alice' },
              { name: 'to-change-twice', owner: 'alice', sharedWith: [{ group: 'p' }] },
              { name: 'retagged-joined', tag: 'before', owner: 'alice', sharedWith: [{ group: 'r' }] },
              { name: 'joined-retagged', tag: 'before', owner: 'alice', sharedWith: [{ group: 'r' }, { user: 'tess' }] },
              { name: 'shared-retagged', tag: 'before', owner: 'alice' },
              { name: 'retagged-shared', tag: 'before', owner: 'alice' },
              { name: 'moved-retagged', tag: 'before', owner: 'alice', sharedWith: [{ group: 'r' }] },
              { name: 'shared-while-deleted', owner: 'alice' },
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

        it('a plant changed while a share of it is held open is shown changed to the grantees it ends with', async () => {
          const id = ids['to-change-shared']!;
          // Every page is cached before: none of the grantees has the plant yet.
          for (const user of ['alice', 'olga', 'pam', 'root', 'bob']) await page(user);
          const res = await overlapped(
            holdTransaction(
              db,
              `INSERT INTO plant_user_grants (user_id, plant_id) VALUES (${userId('olga')}, ${plantWithId(id)});
               INSERT INTO plant_group_grants (group_id, plant_id) VALUES (${groupId('p')}, ${plantWithId(id)})`,
            ),
            () => as('alice', 'PATCH', `/plants/${id}`, { name: 'changed-while-shared', tag: 'new' }),
          );
          assert.equal(res.status, 200, res.text);
          assert.deepEqual(res.body, asPlant(id, 'changed-while-shared', 'new'));
          await withinBound(backend, 'the grantees the share gave the plant to see it changed', () =>
            onPagesOf(['alice', 'olga', 'pam', 'root'], ['bob'], 'changed-while-shared #new', ['to-change-shared']),
          );
          await readsOf(id, ['olga', 'pam', 'root'], ['bob'], asPlant(id, 'changed-while-shared', 'new'));
          await assertDerivedRowsExact();
        });

        it('a plant changed while an unshare of it is held open is gone for the grantees it loses, changed for the rest', async () => {
          const id = ids['to-change-unshared']!;
          for (const user of ['alice', 'olga', 'pam', 'root']) await page(user);
          const held = await holdTransaction(
            db,
            `DELETE FROM plant_user_grants WHERE plant_id = ${plantWithId(id)} AND user_id = ${userId('olga')};
             DELETE FROM plant_group_grants WHERE plant_id = ${plantWithId(id)} AND group_id = ${groupId('p')}`,
          );
          let answered = false;
          const changing = as('alice', 'PATCH', `/plants/${id}`, { name: 'changed-while-unshared', tag: null });
          changing.then(
            () => (answered = true),
            () => {},
          );
          await sleep(OVERLAP_MS);
          // Where the unshare holds nothing the change waits for (PostgreSQL), the change is made first, and the
          // grantees it is still shared with see it changed meanwhile.
          if (answered) {
            assert.ok(await onPagesOf(['olga', 'pam'], [], 'changed-while-unshared'), 'a grantee sees the plant unchanged');
            await readsOf(id, ['olga', 'pam'], [], asPlant(id, 'changed-while-unshared'));
          }
          await held.commit();
          const res = await changing;
          assert.equal(res.status, 200, res.text);
          assert.deepEqual(res.body, asPlant(id, 'changed-while-unshared'));
          await withinBound(backend, 'the grantees the unshare took the plant from do not see it, by either name', () =>
            onPagesOf(['alice', 'root'], ['olga', 'pam'], 'changed-while-unshared', ['to-change-unshared']),
          );
          await readsOf(id, ['alice', 'root'], ['olga', 'pam'], asPlant(id, 'changed-while-unshared'));
          await assertDerivedRowsExact();
        });

        it('a change of a plant whose delete is held open waits for it and answers 404; the plant stays gone', async () => {
          const id = ids['to-change-deleted']!;
          for (const user of ['alice', 'olga', 'root']) await page(user);
          const res = await overlapped(holdTransaction(db, `DELETE FROM plants WHERE api_id = ${id}`), () =>
            as('alice', 'PATCH', `/plants/${id}`, { name: 'changed-after-delete', tag: 'late' }),
          );
          assertError(res, 404, 40402);
          await withinBound(backend, 'the deleted plant is on no page, by either name', () =>
            onPagesOf([], ['alice', 'olga', 'root'], 'changed-after-delete #late', ['to-change-deleted', 'changed-after-delete']),
          );
          await readsOf(id, [], ['alice', 'olga', 'root']);
          assert.equal(Number(await rowsWithId(id)), 0, 'the change brought the plant back');
          assertError(await as('root', 'PATCH', `/plants/${id}`, { name: 'again' }), 404, 40402);
          await assertDerivedRowsExact();
        });

        it('a delete of a plant whose change is held open waits for it, and the plant is gone by either name', async () => {
          const id = ids['to-delete-changed']!;
          for (const user of ['alice', 'olga', 'pam', 'root']) await page(user);
          const res = await overlapped(
            holdTransaction(db, `UPDATE plants SET name = 'changed-then-deleted', tag = 'x' WHERE api_id = ${id}`),
            () => as('alice', 'DELETE', `/plants/${id}`),
          );
          assert.equal(res.status, 204, res.text);
          await withinBound(backend, 'the deleted plant is on no page, by either name', () =>
            onPagesOf([], ['alice', 'olga', 'pam', 'root'], 'changed-then-deleted #x', ['to-delete-changed', 'changed-then-deleted']),
          );
          await readsOf(id, [], ['alice', 'olga', 'pam', 'root']);
          assert.equal(Number(await rowsWithId(id)), 0);
          await assertDerivedRowsExact();
        });

        it(
          "a delete that waited for a share committed meanwhile takes the plant off the grantee's page on its instance at once",
          { skip: backend.name !== 'postgres' && 'SQLite writers run one at a time', timeout: 60_000 },
          async () => {
            const id = ids['shared-while-deleted']!;
            await page('gus');
            const share = await holdTransaction(
              db,
              `INSERT INTO plant_group_grants (group_id, plant_id) VALUES (${groupId('h')}, ${plantWithId(id)})`,
            );
            // The plant's row held too, with the lock the share's trigger takes on it, which a delete waits for: the
            // delete takes its snapshot and waits for both, so it still waits, the share committed, while gus reads.
            // A row the delete reaches only after the share commits (its group's) would race it for the lock.
            const holdingPlant = await holdTransaction(db, `SELECT 1 FROM plants WHERE api_id = ${id} FOR SHARE`);
            let deleting: Promise<RawResponse> | undefined;
            try {
              deleting = as('alice', 'DELETE', `/plants/${id}`);
              deleting.catch(() => {});
              await untilAPlantRowIsWaitedFor('the delete waits for the held row');
              await share.commit();
              await eventually('gus sees the plant shared, its delete not committed', async () =>
                (await page('gus')).includes('shared-while-deleted'),
              );
            } finally {
              await holdingPlant.commit();
            }
            assert.equal((await deleting).status, 204);
            // Read your writes: the deleting instance's next answer, not the next read of the change log.
            assert.ok(!(await page('gus')).includes('shared-while-deleted'), "the deleted plant stayed on gus's cached page");
            await assertDerivedRowsExact();
          },
        );

        it('a share of a plant whose change is held open waits for it and gives the grantees the changed plant', async () => {
          const id = ids['to-share-changed']!;
          for (const user of ['olga', 'pam']) await page(user);
          const held = await holdTransaction(db, `UPDATE plants SET name = 'changed-then-shared', tag = NULL WHERE api_id = ${id}`);
          const sharing = Promise.all([
            as('alice', 'PUT', `/plants/${id}/access/users/olga`),
            as('root', 'PUT', `/plants/${id}/access/groups/p`),
          ]);
          sharing.catch(() => {});
          await sleep(OVERLAP_MS);
          await held.commit();
          for (const res of await sharing) assert.equal(res.status, 204, res.text);
          await withinBound(backend, 'the grantees see the plant as the held change left it', () =>
            onPagesOf(['olga', 'pam', 'alice'], [], 'changed-then-shared', ['to-share-changed']),
          );
          await readsOf(id, ['olga', 'pam'], ['bob'], asPlant(id, 'changed-then-shared'));
          await assertDerivedRowsExact();
        });

        it("a plant's tag changed while a member joins its group is under its new tag for every member", async () => {
          const id = ids['retagged-joined']!;
          for (const user of ['rita', 'sam']) for (const tag of ['before', 'after']) await tagPage(user, tag);
          // The member grants the join writes, and the change of tag, each wait for the other where they must
          // (PostgreSQL: the group's lock); either order ends with the new tag on every grant.
          const res = await overlapped(
            holdTransaction(db, `INSERT INTO group_members (group_id, user_id) VALUES (${groupId('r')}, ${userId('sam')})`),
            () => as('alice', 'PATCH', `/plants/${id}`, { tag: 'after' }),
          );
          assert.equal(res.status, 200, res.text);
          await withinBound(backend, 'both members find the plant under its new tag only', () =>
            underTag(['rita', 'sam', 'alice', 'root'], 'retagged-joined', 'after', 'before'),
          );
          await assertDerivedRowsExact();
        });

        it('a member who joins while the tag of a plant shared with the group is changed finds it under the new tag', async () => {
          const id = ids['joined-retagged']!;
          for (const user of ['rita', 'tess', 'kim']) for (const tag of ['before', 'again']) await tagPage(user, tag);
          const res = await overlapped(holdTransaction(db, `UPDATE plants SET tag = 'again' WHERE api_id = ${id}`), () =>
            store.groups.addMember('r', 'kim'),
          );
          assert.equal(res, true);
          await withinBound(backend, 'the members and the user it is shared with find the plant under its new tag only', () =>
            underTag(['rita', 'kim', 'tess', 'alice'], 'joined-retagged', 'again', 'before'),
          );
          await assertDerivedRowsExact();
        });

        it('a share held open while plain SQL changes the tag gives the grantees the plant under its new tag', async () => {
          const id = ids['shared-retagged']!;
          for (const user of ['olga', 'rita']) for (const tag of ['before', 'later']) await tagPage(user, tag);
          // Plain SQL's update takes no lock a share's foreign keys conflict with: the grant's read of its plant's
          // tag does (PostgreSQL), so the change waits for the share and rewrites its rows.
          await overlapped(
            holdTransaction(
              db,
              `INSERT INTO plant_user_grants (user_id, plant_id) VALUES (${userId('olga')}, ${plantWithId(id)});
               INSERT INTO plant_group_grants (group_id, plant_id) VALUES (${groupId('r')}, ${plantWithId(id)})`,
            ),
            () => plainSqlWaiting(db, `UPDATE plants SET tag = 'later' WHERE api_id = ${id}`),
          );
          await withinBound(backend, 'the grantees find the plant under its new tag only', () =>
            underTag(['olga', 'rita', 'alice'], 'shared-retagged', 'later', 'before'),
          );
          await assertDerivedRowsExact();
        });

        it("a group share by plain SQL while a change of the plant's tag is held open gives the members the new tag", async () => {
          const id = ids['retagged-shared']!;
          for (const tag of ['before', 'anew']) await tagPage('rita', tag);
          // The change locks only the groups that already hold the plant: the share must read the plant's tag under
          // its lock before it writes the members' rows (PostgreSQL: its tag trigger fires first, migration 0019).
          await overlapped(holdTransaction(db, `UPDATE plants SET tag = 'anew' WHERE api_id = ${id}`), () =>
            plainSqlWaiting(db, `INSERT INTO plant_group_grants (group_id, plant_id) VALUES (${groupId('r')}, ${plantWithId(id)})`),
          );
          await withinBound(backend, 'the members find the plant under its new tag only', () =>
            underTag(['rita', 'alice'], 'retagged-shared', 'anew', 'before'),
          );
          await assertDerivedRowsExact();
        });

        it("a member joining the group a share was moved to while the plant's tag changed finds it under the new tag", async () => {
          const id = ids['moved-retagged']!;
          for (const tag of ['before', 'moved']) await tagPage('tess', tag);
          // Plain SQL moves the group share, and takes no lock of the plant: the change of tag, which waits for it,
          // must lock the group the share ends in, so that a member joining it waits in turn (PostgreSQL, migration 0019).
          const moving = await holdTransaction(
            db,
            `UPDATE plant_group_grants SET group_id = ${groupId('r2')} WHERE group_id = ${groupId('r')} AND plant_id = ${plantWithId(id)}`,
          );
          const retagging = holdTransaction(db, `UPDATE plants SET tag = 'moved' WHERE api_id = ${id}`);
          retagging.catch(() => {});
          await sleep(OVERLAP_MS);
          await moving.commit();
          const retagged = await retagging;
          const joining = store.groups.addMember('r2', 'tess');
          joining.catch(() => {});
          await sleep(OVERLAP_MS);
          await retagged.commit();
          assert.equal(await joining, true);
          await withinBound(backend, 'the new member finds the plant under its new tag only', () =>
            underTag(['tess', 'alice'], 'moved-retagged', 'moved', 'before'),
          );
          await assertDerivedRowsExact();
        });

        it('of two changes with the same If-Match held back together, exactly one is made; the other answers 412 with its version', async () => {
          const id = ids['to-change-twice']!;
          for (let round = 0; round < 3; round++) {
            const before = await as('pam', 'GET', `/plants/${id}`);
            assert.equal(before.status, 200, before.text);
            const etag = String(before.headers.etag);
            // The plant's row held by another session (psql's SELECT … FOR UPDATE; sqlite3's write lock), so that
            // both changes wait for it and then run one after the other.
            const lock = backend.name === 'postgres' ? `SELECT id FROM plants WHERE api_id = ${id} FOR UPDATE` : `SELECT 1`;
            const proposed = [`by-alice-${round}`, `by-root-${round}`];
            const answers = await overlapped(holdTransaction(db, lock), () =>
              Promise.all(
                (['alice', 'root'] as const).map((user, i) =>
                  rawRequest(
                    server.url,
                    `/plants/${id}`,
                    { ...bearer(tokens[user]!), 'content-type': 'application/merge-patch+json', 'if-match': etag },
                    'PATCH',
                    JSON.stringify({ name: proposed[i], tag: `t${round}` }),
                  ),
                ),
              ),
            );
            const won = answers.filter((res) => res.status === 200);
            assert.equal(won.length, 1, `round ${round}: ${answers.map((res) => `${res.status} ${res.text}`).join('; ')}`);
            const lost = answers.find((res) => res.status !== 200)!;
            assertError(lost, 412, 41202);
            assert.equal(lost.headers.etag, won[0]!.headers.etag, 'the refused change is told the version the other made');
            const winner = (won[0]!.body as { name: string }).name;
            assert.ok(proposed.includes(winner));
            assert.deepEqual(won[0]!.body, asPlant(id, winner, `t${round}`));
            assert.ok(await onPagesOf(['alice', 'pam', 'root'], ['olga'], `${winner} #t${round}`), 'the change made is shown');
            await readsOf(id, ['pam', 'root'], ['olga'], asPlant(id, winner, `t${round}`));
            assert.equal((await as('pam', 'GET', `/plants/${id}`)).headers.etag, won[0]!.headers.etag);
          }
        });

        it('a change with the If-Match of a version that a held plain SQL change leaves behind answers 412', async () => {
          const id = ids['to-change-twice']!;
          const before = await as('alice', 'GET', `/plants/${id}`);
          const sqlName = 'changed-by-sql';
          const res = await overlapped(holdTransaction(db, `UPDATE plants SET name = '${sqlName}' WHERE api_id = ${id}`), () =>
            rawRequest(
              server.url,
              `/plants/${id}`,
              { ...bearer(tokens.alice!), 'content-type': 'application/merge-patch+json', 'if-match': String(before.headers.etag) },
              'PATCH',
              JSON.stringify({ name: 'changed-by-alice' }),
            ),
          );
          assertError(res, 412, 41202);
          const tag = (before.body as { tag?: string }).tag;
          await withinBound(backend, 'the plain SQL change is shown', () =>
            onPagesOf(['alice', 'pam'], ['olga'], shown({ name: sqlName, tag })),
          );
          const after = await as('pam', 'GET', `/plants/${id}`);
          assert.deepEqual(after.body, asPlant(id, sqlName, tag));
          assert.equal(after.headers.etag, res.headers.etag, 'the 412 names the version the plain SQL change made');
        });

        it(
          "a delete waiting for a plant's row that a held session locks holds no later delete back",
          { skip: backend.name === 'postgres' ? false : 'SQLite writes one transaction at a time: every write waits for the held one' },
          async () => {
            const [heldId, freeId] = [970_001, 970_002];
            for (const id of [heldId, freeId]) {
              const res = await as('alice', 'POST', '/plants', { id, name: `row-${id}` });
              assert.equal(res.status, 200, res.text);
            }
            const held = await holdTransaction(db, `SELECT id FROM plants WHERE api_id = ${heldId} FOR UPDATE`);
            let waiting: Promise<RawResponse> | undefined;
            try {
              waiting = as('alice', 'DELETE', `/plants/${heldId}`);
              waiting.catch(() => {});
              // The service's statement of deletes waits for the row (a tuple lock of this schema's plants), in flight.
              await untilAPlantRowIsWaitedFor('the delete waits for the held row');
              const free = await Promise.race([as('alice', 'DELETE', `/plants/${freeId}`), sleep(3_000).then(() => undefined)]);
              assert.ok(free, 'the later delete waited for the held row too');
              assert.equal(free.status, 204, free.text);
            } finally {
              await held.commit();
            }
            assert.equal((await waiting).status, 204, 'the held delete is made once the row is free');
            assert.equal(Number(await rowsWithId(heldId)), 0);
            assert.equal(Number(await rowsWithId(freeId)), 0);
          },
        );
      },
    );
  }

  // A token the caches do not hold is read with its first page, the requests of one event-loop turn together: a
  // change committed while those reads run is honoured from the bound on, by the page the caches then keep too.
  for (const cache of [true, false]) {
    describe(
      `new tokens' first pages with a transaction held open beside them, caches ${cache ? 'on' : 'off'} [${backend.name}]`,
      { skip: backend.skip || heldSessionsSkip(backend.name) },
      () => {
        let db: string;
        let store: Store;
        let server: RunningApp;
        /** What each user sees now, in catalogue order. */
        const sees: Record<string, string[]> = {
          alice: ['group-plant', 'public-plant', 'untagged'],
          una: ['public-plant'],
          vic: ['public-plant'],
          root: ['group-plant', 'public-plant', 'untagged'],
        };
        const PATHS = ['/plants?limit=20', '/plants', '/plants?limit=20&tag=t'];
        /** A user's first page, full listing and first page of tag `t`, as names; a refused token as 401s. */
        const expected = (names: string[] | 401) =>
          names === 401 ? [401, 401, 401] : [names, names, names.filter((n) => n !== 'untagged')];
        /**
         * What each token is shown at each of PATHS, every request pipelined on one connection: the server reads
         * them in one turn, so the tokens it does not hold are read together.
         */
        const pagesOf = async (tokens: string[]): Promise<unknown[][]> => {
          const port = Number(new URL(server.url).port);
          const requests = tokens.flatMap((token) =>
            PATHS.map((path) => `GET ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n`),
          );
          const wire = requests.map((request, i) => `${request}${i === requests.length - 1 ? 'Connection: close\r\n' : ''}\r\n`).join('');
          const answers = parseResponses(await exchangeRaw(port, wire)).map(({ status, text }) => {
            if (status === 401) return 401;
            assert.equal(status, 200, text);
            return (JSON.parse(text) as Array<{ name: string }>).map((p) => p.name);
          });
          assert.equal(answers.length, requests.length);
          return tokens.map((_, i) => answers.slice(PATHS.length * i, PATHS.length * (i + 1)));
        };
        /** Three new tokens of `user` and one of every other user, so that a turn reads several new tokens. */
        const newTokens = async (user: string) => {
          const own: MintedToken[] = [];
          for (let i = 0; i < 3; i++) own.push(await mintToken(store, user));
          const others: Array<[string, string]> = [];
          for (const other of Object.keys(sees)) if (other !== user) others.push([other, (await mintToken(store, other)).token]);
          return { own, others };
        };
        /**
         * Holds `statement` open while every new token's pages are read, all at once: `user`'s show what the user
         * saw before, the others what they saw. After the commit, `user`'s show `after` within the bound.
         */
        const heldBeside = async (user: string, statement: (own: MintedToken[]) => string, after: string[] | 401) => {
          const before = sees[user]!;
          const { own, others } = await newTokens(user);
          const held = await holdTransaction(db, statement(own));
          try {
            const during = await pagesOf([...own.map((t) => t.token), ...others.map(([, token]) => token)]);
            for (const pages of during.slice(0, own.length)) assert.deepEqual(pages, expected(before), `${user} before the commit`);
            others.forEach(([other], i) => assert.deepEqual(during[own.length + i], expected(sees[other]!), other));
          } finally {
            await held.commit();
          }
          // The user's other tokens are not revoked; a membership or admin flag is the user's own.
          if (after !== 401) sees[user] = after;
          const want = JSON.stringify(expected(after));
          let last: unknown;
          await withinBound(backend, `${user} shows ${want} after the commit`, async () => {
            last = await pagesOf(own.map((t) => t.token));
            return (last as unknown[]).every((pages) => JSON.stringify(pages) === want);
          }).catch((err: Error) => {
            throw new Error(`${err.message}; last seen ${JSON.stringify(last)}`);
          });
          const othersAfter = await pagesOf(others.map(([, token]) => token));
          others.forEach(([other], i) => assert.deepEqual(othersAfter[i], expected(sees[other]!), `${other} after the commit`));
        };

        before(async () => {
          db = await backend.freshDb();
          store = await openStore({ db });
          await seed(store, {
            users: [{ name: 'alice' }, { name: 'una' }, { name: 'vic' }, { name: 'root', admin: true }],
            groups: [{ name: 'fp', members: [] }],
            plants: [
              { name: 'group-plant', tag: 't', owner: 'alice', sharedWith: [{ group: 'fp' }] },
              { name: 'public-plant', tag: 't', owner: 'alice', public: true },
              { name: 'untagged', owner: 'alice' },
            ],
          });
          server = await startApp(store, { config: { cache } });
        });
        after(async () => {
          await server?.close();
          await store?.close();
        });

        it('a user who joins a group while new tokens read their first pages gets its plants from the bound on', async () => {
          await heldBeside(
            'una',
            () =>
              `INSERT INTO group_members (group_id, user_id) SELECT g.id, u.id FROM groups g, users u WHERE g.name = 'fp' AND u.name = 'una'`,
            ['group-plant', 'public-plant'],
          );
        });

        it('a token revoked while it reads its first pages is refused from the bound on', async () => {
          await heldBeside(
            'vic',
            (own) => `UPDATE tokens SET revoked_at = ${Date.now()} WHERE id IN (${own.map((t) => t.id).join(', ')})`,
            401,
          );
        });

        it('an admin demoted while new tokens read their first pages sees only what a user may from the bound on', async () => {
          await heldBeside('root', () => `UPDATE users SET is_admin = 0 WHERE name = 'root'`, ['public-plant']);
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

  describe(`one plant changed and deleted on two instances at once [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    const stores: Store[] = [];
    const servers: RunningApp[] = [];
    let tokens: Record<string, string>;
    let contested: PlantId;
    const USERS = ['alice', 'olga', 'root'];

    before(async () => {
      db = await backend.freshDb();
      // Two stores on one database, as two processes or instances have.
      for (let i = 0; i < 2; i++) stores.push(await openStore({ db }));
      const seeded = await seed(stores[0]!, {
        users: [{ name: 'alice' }, { name: 'olga' }, { name: 'root', admin: true }],
        plants: [{ name: 'contested', owner: 'alice', sharedWith: [{ user: 'olga' }] }],
      });
      tokens = seeded.tokens;
      contested = seeded.plants[0]!.id;
      for (const store of stores) servers.push(await startApp(store));
    });
    after(async () => {
      for (const server of servers) await server.close();
      for (const store of stores) await store.close();
    });

    const request = (server: number, user: string, method: string, path: string, body?: unknown, ifMatch?: string) =>
      rawRequest(
        servers[server]!.url,
        path,
        {
          ...bearer(tokens[user]!),
          ...(body === undefined ? {} : { 'content-type': method === 'PATCH' ? 'application/merge-patch+json' : 'application/json' }),
          ...(ifMatch === undefined ? {} : { 'if-match': ifMatch }),
        },
        method,
        body === undefined ? undefined : JSON.stringify(body),
      );
    /** The user's cached page (of 1000) on the `server`-th instance, each plant as `shown`. */
    const page = async (server: number, user: string): Promise<string[]> => {
      const res = await request(server, user, 'GET', '/plants?limit=1000');
      assert.equal(res.status, 200, res.text);
      return (res.body as Array<{ name: string; tag?: string }>).map(shown);
    };
    /** Whether every user's page on both instances satisfies `holds`. */
    const everyPage = async (holds: (seen: string[], user: string) => boolean) => {
      for (const server of [0, 1]) for (const user of USERS) if (!holds(await page(server, user), user)) return false;
      return true;
    };

    it('a change racing a delete of the plant ends as 404 or as changed then deleted, never a plant brought back', async () => {
      for (let round = 0; round < 8; round++) {
        const id = 9100 + round;
        const [changeAt, deleteAt] = round % 2 === 0 ? [0, 1] : [1, 0];
        const [changer, deleter] = round % 4 < 2 ? ['alice', 'root'] : ['root', 'alice'];
        const created = await request(deleteAt, 'alice', 'POST', '/plants', { id, name: `racing-${round}` });
        assert.equal(created.status, 200, created.text);
        assert.equal((await request(changeAt, 'alice', 'PUT', `/plants/${id}/access/users/olga`)).status, 204);
        // Both instances' pages hold the plant before the race.
        await withinBound(backend, `every page shows racing-${round}`, () => everyPage((seen) => seen.includes(`racing-${round}`)));
        // Sent in either order, so that each of them comes first in some rounds.
        const change = () => request(changeAt, changer, 'PATCH', `/plants/${id}`, { name: `raced-${round}`, tag: 'r' });
        const remove = () => request(deleteAt, deleter, 'DELETE', `/plants/${id}`);
        const [changed, deleted] =
          round % 3 === 0
            ? await Promise.all([change(), remove()])
            : await Promise.all([remove(), change()]).then(([removed, changed]) => [changed, removed] as const);
        assert.equal(deleted.status, 204, deleted.text);
        if (changed.status === 200) assert.deepEqual(changed.body, asPlant(id, `raced-${round}`, 'r'));
        else assertError(changed, 404, 40402);
        await withinBound(backend, `round ${round}: the plant is on no page of either instance, by either name`, () =>
          everyPage((seen) => !seen.some((p) => p.startsWith(`racing-${round}`) || p.startsWith(`raced-${round}`))),
        );
        for (const server of [0, 1]) {
          for (const user of USERS) assertError(await request(server, user, 'GET', `/plants/${id}`), 404, 40402);
        }
        const rows = await plainQuery<{ n: number | string }>(db, `SELECT count(*) AS n FROM plants WHERE api_id = ${id}`);
        assert.equal(Number(rows[0]!.n), 0, `round ${round}: the change brought the plant back`);
      }
    });

    it('of two changes with the same If-Match on two instances, exactly one is made; the other answers 412 with its version', async () => {
      for (let round = 0; round < 6; round++) {
        const before = await request(round % 2, 'olga', 'GET', `/plants/${contested}`);
        assert.equal(before.status, 200, before.text);
        const etag = String(before.headers.etag);
        const proposed = [`by-alice-${round}`, `by-root-${round}`];
        const answers = await Promise.all([
          request(0, 'alice', 'PATCH', `/plants/${contested}`, { name: proposed[0] }, etag),
          request(1, 'root', 'PATCH', `/plants/${contested}`, { name: proposed[1] }, etag),
        ]);
        const won = answers.filter((res) => res.status === 200);
        assert.equal(won.length, 1, `round ${round}: ${answers.map((res) => `${res.status} ${res.text}`).join('; ')}`);
        assertError(
          answers.find((res) => res.status !== 200)!,
          412,
          41202,
        );
        const winner = (won[0]!.body as { name: string }).name;
        assert.ok(proposed.includes(winner), winner);
        assert.equal(answers.find((res) => res.status !== 200)!.headers.etag, won[0]!.headers.etag);
        await withinBound(backend, `round ${round}: every page shows ${winner}`, () =>
          everyPage((seen) => seen.includes(winner) && !seen.some((p) => p.startsWith('by-') && p !== winner)),
        );
        for (const server of [0, 1]) {
          const read = await request(server, 'olga', 'GET', `/plants/${contested}`);
          assert.deepEqual(read.body, asPlant(contested, winner));
          assert.equal(read.headers.etag, won[0]!.headers.etag);
        }
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
