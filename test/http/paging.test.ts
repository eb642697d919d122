import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { CatalogueRecord } from '../../src/import-format/records.js';
import type { Plant } from '../../src/http/schemas.js';
import { recordBatch } from '../../src/import-format/records.js';
import type { Store } from '../../src/store/store.js';
import type { Change } from '../../src/store/change-log.js';
import { assertError, eventually, nextLink } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, startApp, type RunningApp, addPlant, removePlant } from '../helpers/http-app.js';

// Beyond the contract, for clients that page: Link rel="next" continuations, large listings streamed in
// chunks with bounded memory, caches that never serve what a committed change has altered.

const PLANTS = 2_600; // more than two stream chunks of 1,000

/** alice sees every third plant (owned, shared with her, or with her group) and every tenth (public). */
function catalogue(plants: number, padding = ''): { records: CatalogueRecord[]; alice: Plant[]; all: Plant[] } {
  const records: CatalogueRecord[] = [
    { type: 'user', name: 'alice' },
    { type: 'user', name: 'bob' },
    { type: 'user', name: 'root', admin: true },
    { type: 'group', name: 'gardeners', members: ['alice'] },
  ];
  const alice: Plant[] = [];
  const all: Plant[] = [];
  for (let i = 0; i < plants; i++) {
    const plant: Plant = i % 4 === 0 ? { name: `plant ${i}${padding}` } : { name: `plant ${i}${padding}`, tag: `tag ${i % 7}` };
    const kind = i % 3 === 0 ? ['owned', 'shared', 'group'][(i / 3) % 3]! : undefined;
    const isPublic = i % 10 === 0;
    records.push({
      type: 'plant',
      ...plant,
      owner: kind === 'owned' ? 'alice' : 'bob',
      public: isPublic,
      sharedWith: kind === 'shared' ? ['alice'] : kind === 'group' ? ['group:gardeners'] : [],
    });
    all.push(plant);
    if (kind !== undefined || isPublic) alice.push(plant);
  }
  return { records, alice, all };
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`paging and streaming [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let uncached: RunningApp;
    let expected: ReturnType<typeof catalogue>;
    const tokens: Record<string, string> = {};
    const get = (path: string, user = 'alice', target = server) => rawRequest(target.url, path, bearer(tokens[user]!));

    before(async () => {
      store = await backend.open();
      expected = catalogue(PLANTS);
      await store.bulk.importRecords(recordBatch(expected.records));
      for (const user of ['alice', 'bob', 'root']) tokens[user] = (await mintToken(store, user)).token;
      server = await startApp(store);
      uncached = await startApp(store, { config: { cache: false } });
    });
    after(async () => {
      await server?.close();
      await uncached?.close();
      await store?.close();
    });

    it('following Link rel="next" walks the whole listing, page by page, with no gap or repeat', async () => {
      for (const limit of [1, 7, 100, 1000]) {
        const seen: Plant[] = [];
        let path: string | undefined = `/plants?limit=${limit}`;
        let pages = 0;
        while (path) {
          const res = await get(path);
          assert.equal(res.status, 200, res.text);
          const page = res.body as Plant[];
          assert.ok(page.length <= limit);
          seen.push(...page);
          path = nextLink(res.headers.link);
          if (path) assert.equal(page.length, limit, 'only a full page has a next link');
          pages++;
        }
        assert.deepEqual(seen, expected.alice, `limit ${limit}`);
        assert.equal(pages, Math.ceil(expected.alice.length / limit));
      }
    });

    it('no Link on the last page or for limit=0; a cursor without limit gives the rest', async () => {
      assert.equal((await get(`/plants?limit=${expected.alice.length}`)).headers.link, undefined);
      assert.equal((await get('/plants?limit=0')).headers.link, undefined);
      const first = await get('/plants?limit=5');
      const cursor = new URL(nextLink(first.headers.link)!, 'http://x').searchParams.get('cursor')!;
      const rest = await get(`/plants?cursor=${cursor}`);
      assert.deepEqual(rest.body, expected.alice.slice(5));
    });

    it('a cursor is re-checked against access: it never opens plants of others', async () => {
      const res = await get('/plants?limit=1000');
      const link = nextLink(res.headers.link)!;
      const bobs = await get(link, 'bob');
      assert.equal(bobs.status, 200);
      const bobAll = (await get('/plants', 'bob')).body as Plant[];
      const names = new Set(bobAll.map((p) => p.name));
      for (const plant of bobs.body as Plant[]) assert.ok(names.has(plant.name), `${plant.name} is one bob may see`);
    });

    it('a cursor that is not one the service issued is a 400; given twice, a 400', async () => {
      for (const bad of ['', 'xyz', 'cDA', 'cC0x', Buffer.from('p1.5').toString('base64url'), 'a'.repeat(40), '%00', 'cDE=']) {
        assertError(await get(`/plants?limit=5&cursor=${bad}`), 400, 40001);
      }
      assertError(await get('/plants?cursor=cDE&cursor=cDI'), 400, 40002);
    });

    it('large listings stream in catalogue order, complete, with or without a limit', async () => {
      assert.deepEqual((await get('/plants', 'root')).body, expected.all);
      assert.deepEqual((await get('/plants?limit=1500', 'root')).body, expected.all.slice(0, 1500));
      assert.deepEqual((await get('/plants')).body, expected.alice);
      assert.deepEqual((await get('/plants?limit=2147483647')).body, expected.alice);
    });

    it('with and without caches the answers are the same, and a committed change shows on the next request', async () => {
      for (const target of [server, uncached]) {
        assert.deepEqual((await get('/plants?limit=3', 'alice', target)).body, expected.alice.slice(0, 3));
      }
      const before = (await get('/plants?limit=1000', 'bob')).body as Plant[];
      const plant = await addPlant(store, { name: 'late arrival', owner: 'root', public: false });
      await store.grants.add(plant.id, { user: 'bob' });
      const after = (await get(`/plants?limit=1000&cursor=${Buffer.from(`p${plant.id - 1}`).toString('base64url')}`, 'bob'))
        .body as Plant[];
      assert.deepEqual(after, [{ name: 'late arrival' }]);
      assert.deepEqual((await get('/plants?limit=1000', 'bob')).body, before, 'the first page is unchanged (the plant is last)');
      await store.grants.remove(plant.id, { user: 'bob' });
      assert.deepEqual((await get(`/plants?limit=1000&cursor=${Buffer.from(`p${plant.id - 1}`).toString('base64url')}`, 'bob')).body, []);
      await removePlant(store, plant.id);
    });

    it("this process's own writes reach its change feed before they resolve, so its caches never wait for a notification", async () => {
      // On PostgreSQL the notification comes on a connection of its own and could lose the race with the next
      // request; a write of this process waits until its own feed has read it from the log.
      const logged: Change[] = [];
      store.changes.subscribe((batch) => {
        if (batch !== 'everything') logged.push(...batch);
      });
      await eventually('the change feed follows the log', async () => store.changes.sync(), { until: (live) => live, timeoutMs: 5_000 });
      const names = (table: string, plantId: number) => logged.some((c) => c.table === table && c.plantId === plantId);
      for (let i = 0; i < 20; i++) {
        const plant = await addPlant(store, { name: `own write ${i}`, owner: 'root', public: false });
        assert.ok(names('plants', plant.id), `adding ${i} was not delivered before it resolved`);
        logged.length = 0;
        await removePlant(store, plant.id);
        assert.ok(names('plants', plant.id), `removing ${i} was not delivered before it resolved`);
      }
    });
  });

  describe(`a client that goes away mid-stream stops the reading [${backend.name}]`, { skip: backend.skip }, () => {
    it('reads only part of a 40,000-plant (20 MB) listing when the client disconnects early', async () => {
      const store = await backend.open();
      // Long names, so the listing is far larger than what socket buffers can absorb.
      const { records } = catalogue(40_000, ' '.padEnd(500, 'x'));
      await store.bulk.importRecords(recordBatch(records));
      const { token } = await mintToken(store, 'root');
      let chunks = 0;
      const listVisiblePlants: Store['listing']['listVisiblePlants'] = (viewer, page) => {
        chunks++;
        return store.listing.listVisiblePlants(viewer, page);
      };
      const counting: Store = { ...store, listing: { listVisiblePlants } };
      const server = await startApp(counting);
      try {
        const { port } = new URL(server.url);
        const socket = connect(Number(port), '127.0.0.1');
        socket.write(`GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`);
        // Read the headers and a first part, then stop reading and hang up.
        await new Promise<void>((resolve) => socket.once('data', () => resolve()));
        socket.pause();
        await new Promise((resolve) => setTimeout(resolve, 200));
        socket.destroy();
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.ok(chunks < 20, `read ${chunks} chunks of 40 after the client left`);
        // And the server is still fine.
        assert.equal((await rawRequest(server.url, '/plants?limit=1', bearer(token))).status, 200);
      } finally {
        await server.close();
        await store.close();
      }
    });
  });
}
