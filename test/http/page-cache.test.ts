import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { eventually, settleChangeFeed } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed } from '../helpers/http-app.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';
import { delta, parseSamples, type Sample } from '../helpers/prometheus.js';

// A cached page depends on the catalogue up to the plant after it, and on nothing beyond: a plant added or deleted
// past that keeps the page cached (the common case: a user who writes and reads the first page of a long list), one
// within it drops the page, whichever writer made the change and wherever in the catalogue it lands.

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`cached pages and the changes after them [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    let server: RunningServer;
    let token: string;
    let nextId = 1000;

    before(async () => {
      db = await backend.freshDb();
      store = await openStore({ db });
      const { tokens } = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }],
        plants: ['one', 'two', 'three', 'four', 'five'].map((name) => ({ name, owner: 'alice' })),
      });
      token = tokens.alice!;
      server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent', metricsPort: 0, writeRateLimit: 'off' }), store);
      await settleChangeFeed(store);
    });

    after(async () => {
      await server?.stop();
      await store?.close();
    });

    const scrape = async (): Promise<Sample[]> => parseSamples(await (await fetch(server.metricsUrl!)).text());
    const page = async (limit: number) => {
      const res = await rawRequest(server.url, `/plants?limit=${limit}`, bearer(token));
      assert.equal(res.status, 200, res.text);
      return { names: (res.body as Array<{ name: string }>).map((p) => p.name), more: res.headers.link !== undefined };
    };
    /** Reads the page once, asserts what it shows, and says whether it came from the cache. */
    const cached = async (limit: number, names: string[], more: boolean) => {
      const before = await scrape();
      assert.deepEqual(await page(limit), { names, more });
      return delta(before, await scrape(), 'plantstore_cache_hits_total', { cache: 'page' }) === 1;
    };
    /** The page, read until it shows `names` (a change by another writer), then cached. */
    const readUntil = async (limit: number, names: string[], more: boolean) => {
      await eventually(`the page of ${limit} shows ${names.join(', ')}`, async () => {
        return JSON.stringify(await page(limit)) === JSON.stringify({ names, more });
      });
      assert.equal(await cached(limit, names, more), true);
    };
    const write = (method: 'POST' | 'DELETE', path: string, body?: object) =>
      rawRequest(
        server.url,
        path,
        { ...bearer(token), ...(body ? { 'content-type': 'application/json' } : {}) },
        method,
        body ? JSON.stringify(body) : undefined,
      );

    it('keeps a full page cached when its owner adds a plant after it, and drops it for a delete within it', async () => {
      await readUntil(2, ['one', 'two'], true);
      const added = nextId++;
      assert.equal((await write('POST', '/plants', { id: added, name: 'six' })).status, 200);
      // The first page is as it was, and still cached; a longer page shows the new plant.
      assert.equal(await cached(2, ['one', 'two'], true), true, 'the page of 2 is still cached after a create past it');
      assert.deepEqual(await page(10), { names: ['one', 'two', 'three', 'four', 'five', 'six'], more: false });
      // Some time for the log to be read: what it says again about this process's own writes drops nothing.
      await new Promise((resolve) => setTimeout(resolve, 400));
      assert.equal(await cached(2, ['one', 'two'], true), true, 'the page of 2 is still cached once the log is read');
      const two = (await store.plants.list({})).find((p) => p.name === 'two')!.id;
      assert.equal((await write('DELETE', `/plants/${two}`)).status, 204);
      assert.equal(await cached(2, ['one', 'three'], true), false);
    });

    it('drops a page when the plant after it goes, since more no longer follow', async () => {
      await readUntil(4, ['one', 'three', 'four', 'five'], true);
      const six = (await store.plants.list({})).find((p) => p.name === 'six')!.id;
      assert.equal((await write('DELETE', `/plants/${six}`)).status, 204);
      assert.equal(await cached(4, ['one', 'three', 'four', 'five'], false), false);
    });

    it('drops a page for a plant written into it with plain SQL, at a position inside it', async () => {
      await readUntil(2, ['one', 'three'], true);
      // The position that "two" had, between "one" and "three": only plain SQL can put a plant there.
      const [one, three] = await positions(db, ['one', 'three']);
      assert.ok(three! - one! > 1, 'a free position between them');
      await plainSql(
        db,
        `INSERT INTO plants (id, api_id, name, owner_id, is_public, created_at) ` +
          // PostgreSQL's positions are an identity column: an explicit one has to say so.
          `${db.startsWith('postgres') ? 'OVERRIDING SYSTEM VALUE ' : ''}SELECT ${one! + 1}, ${nextId++}, 'one and a half', id, 0, 0 FROM users WHERE name = 'alice'`,
      );
      await readUntil(2, ['one', 'one and a half'], true);
    });
  });
}

/** The catalogue positions of the plants named, in that order. */
async function positions(db: string, names: string[]): Promise<number[]> {
  const rows = await plainQuery<{ id: number | string; name: string }>(db, 'SELECT id, name FROM plants');
  return names.map((name) => Number(rows.find((r) => r.name === name)!.id));
}
