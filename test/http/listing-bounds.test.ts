import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { serverCpuSeconds } from '../../bench/process-cpu.js';
import type { CatalogueRecord } from '../../src/import-format/records.js';
import { recordBatch } from '../../src/import-format/records.js';
import type { Store } from '../../src/store/store.js';
import { assertError, eventually } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, startApp } from '../helpers/http-app.js';
import { runCli, spawnServe } from '../helpers/processes.js';
import { sendRaw } from '../helpers/raw-http.js';

// Full listings are the expensive answers: a HEAD costs no more than the headers it answers, the listings that
// run at once are bounded per user and per process, and slow readers can neither pin memory nor hold a slot.

/** Admins root, root2, root3; `plants` plants with long names, so a listing is far larger than socket buffers. */
function catalogue(plants: number, nameLength = 1000): CatalogueRecord[] {
  const records: CatalogueRecord[] = [
    { type: 'user', name: 'root', admin: true },
    { type: 'user', name: 'root2', admin: true },
    { type: 'user', name: 'root3', admin: true },
    { type: 'user', name: 'alice' },
  ];
  for (let i = 0; i < plants; i++)
    records.push({ type: 'plant', name: `plant ${i} `.padEnd(nameLength, 'x'), owner: 'alice', public: i % 2 === 0 });
  return records;
}

/** Counts the store's listing reads (each chunk of a stream is one). */
function counting(store: Store): { store: Store; reads: () => number } {
  let reads = 0;
  const listVisiblePlants: Store['listing']['listVisiblePlants'] = (viewer, page) => {
    reads++;
    return store.listing.listVisiblePlants(viewer, page);
  };
  return { store: { ...store, listing: { listVisiblePlants } }, reads: () => reads };
}

/** A client that asks for a full listing and then reads nothing: it holds the listing open. */
async function stalledListing(url: string, token: string): Promise<Socket> {
  const { port } = new URL(url);
  const socket = connect(Number(port), '127.0.0.1');
  socket.write(`GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n\r\n`);
  await new Promise<void>((resolve) => socket.once('data', () => resolve()));
  socket.pause();
  return socket;
}

/** HEAD answers a refused listing as GET does, with no body. */
async function assertHeadRefused(url: string, token: string, status: number): Promise<void> {
  const head = await rawRequest(url, '/plants', bearer(token), 'HEAD');
  assert.deepEqual([head.status, head.headers['retry-after'], head.text], [status, '1', '']);
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`HEAD /plants reads no more than its headers need [${backend.name}]`, { skip: backend.skip }, () => {
    it('a full listing is not read at all; a page at most once; the headers are those of GET', async () => {
      const store = await backend.open();
      await store.bulk.importRecords(recordBatch(catalogue(2_500, 20)));
      const { token } = await mintToken(store, 'root');
      const { store: watched, reads } = counting(store);
      const server = await startApp(watched);
      try {
        const head = await rawRequest(server.url, '/plants', bearer(token), 'HEAD');
        assert.equal(head.status, 200);
        assert.equal(head.text, '');
        assert.match(String(head.headers['content-type']), /^application\/json/);
        assert.equal(reads(), 0, 'HEAD of a full listing read the store');

        const before = reads();
        const headPage = await rawRequest(server.url, '/plants?limit=20', bearer(token), 'HEAD');
        assert.ok(reads() - before <= 1, `HEAD of a page read ${reads() - before} times`);
        const get = await rawRequest(server.url, '/plants?limit=20', bearer(token));
        assert.equal(headPage.headers.link, get.headers.link);
        assert.equal(headPage.headers['content-length'], String(Buffer.byteLength(get.text)));
        assert.equal(headPage.text, '');
      } finally {
        await server.close();
        await store.close();
      }
    });
  });

  describe(`full listings are bounded per user and per process [${backend.name}]`, { skip: backend.skip }, () => {
    it('past the bounds a listing is refused at once with 429 or 503 and Retry-After; pages still answer', async () => {
      const store = await backend.open();
      await store.bulk.importRecords(recordBatch(catalogue(10_000)));
      const tokens = Object.fromEntries(
        await Promise.all(['root', 'root2', 'root3'].map(async (u) => [u, (await mintToken(store, u)).token])),
      );
      const server = await startApp(store, { config: { maxListings: 3, maxListingsPerUser: 2 } });
      const held: Socket[] = [];
      try {
        held.push(await stalledListing(server.url, tokens.root), await stalledListing(server.url, tokens.root));
        const perUser = await rawRequest(server.url, '/plants', bearer(tokens.root));
        assertError(perUser, 429, 42902);
        assert.equal(perUser.headers['retry-after'], '1');
        await assertHeadRefused(server.url, tokens.root, 429);
        held.push(await stalledListing(server.url, tokens.root2));
        const perProcess = await rawRequest(server.url, '/plants', bearer(tokens.root3));
        assertError(perProcess, 503, 50303);
        assert.equal(perProcess.headers['retry-after'], '1');
        await assertHeadRefused(server.url, tokens.root3, 503);
        // A page is no full listing, and a listing that fits in its first chunk takes no slot.
        assert.equal((await rawRequest(server.url, '/plants?limit=20', bearer(tokens.root3))).status, 200);
        assert.equal((await rawRequest(server.url, '/plants?limit=20', bearer(tokens.root3), 'HEAD')).status, 200);
        // No plant has a tag: that listing is empty.
        for (const method of ['GET', 'HEAD'] as const) {
          assert.equal((await rawRequest(server.url, '/plants?tag=none', bearer(tokens.root3), method)).status, 200, method);
        }
        for (const socket of held.splice(0)) socket.destroy();
        await eventually(
          'the slots are free again',
          async () => (await rawRequest(server.url, '/plants?limit=5000', bearer(tokens.root))).status,
          {
            until: (status) => status === 200,
          },
        );
      } finally {
        for (const socket of held) socket.destroy();
        await server.close();
        await store.close();
      }
    });
  });
}

describe('slow readers of full listings', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-slow-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  const rssMb = (pid: number) => Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))![1]) / 1024;
  /** Resolves once `pid` has used at most a tick of CPU in each of two half seconds in a row. */
  const idle = async (pid: number) => {
    let quiet = 0;
    let used = serverCpuSeconds(pid);
    await eventually(
      'the server goes idle behind its stalled readers',
      async () => {
        await new Promise((r) => setTimeout(r, 500));
        const now = serverCpuSeconds(pid);
        quiet = now - used <= 0.01 ? quiet + 1 : 0;
        used = now;
        return quiet;
      },
      { until: (inARow) => inARow >= 2, timeoutMs: 30_000 },
    );
  };

  const db = join(dir, 'slow.db');
  let token = '';
  before(async () => {
    const file = join(dir, 'catalogue.ndjson');
    writeFileSync(
      file,
      catalogue(10_000)
        .map((r) => JSON.stringify(r))
        .join('\n'),
    );
    assert.equal((await runCli(db, ['import', file])).code, 0);
    token = (await runCli(db, ['tokens', 'create', 'root'])).stdout.trim();
  });

  /** Serves `db` with these listing settings and hands `run` a way to ask it and to leave listings unread. */
  async function withServer(
    env: NodeJS.ProcessEnv,
    run: (s: {
      pid: number;
      ask: (path: string) => Promise<number>;
      stall: (n: number) => Promise<void>;
      output: () => string;
    }) => Promise<void>,
  ): Promise<void> {
    const server = await spawnServe(db, [], { PLANTSTORE_MAX_LISTINGS_PER_USER: '1000', PLANTSTORE_RATE_LIMIT: 'off', ...env });
    const sockets: Socket[] = [];
    const port = Number(new URL(server.url).port);
    // Each request on a connection of its own that closes with the answer: a keep-alive connection left in
    // the client's pool would keep the server's drain waiting at the end.
    const ask = async (path: string) =>
      (
        await sendRaw(port, `GET ${path} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${token}\r\nConnection: close\r\n\r\n`, {
          timeoutMs: 30_000,
        })
      ).status;
    // Each asks for a 10 MB listing and reads nothing after its first bytes.
    const stall = async (n: number) => {
      for (let i = 0; i < n; i++) sockets.push((await stalledListing(server.url, token)).on('error', () => {}));
    };
    try {
      await run({ pid: server.child.pid!, ask, stall, output: () => server.output() });
    } finally {
      for (const socket of sockets) socket.destroy();
      const code = await server.stop();
      // On a failure, the server's last words other than the refusals the test provokes.
      const lastWords = server
        .output()
        .split('\n')
        .filter((line) => !line.includes('50303'))
        .slice(-10);
      assert.equal(code, 0, lastWords.join('\n'));
    }
  }

  it('memory stays flat however many readers connect and read nothing', { timeout: 120_000 }, async () => {
    // No minimum rate here: readers that are cut off would free slots for later ones, and the figure would
    // measure when that happened. A young generation of 1 MB makes the resident size follow what is kept: at
    // V8's default it grows by tens of MB with the garbage of a few hundred requests, whenever it likes.
    const env = { PLANTSTORE_LISTING_MIN_RATE: '0', NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --max-semi-space-size=1` };
    await withServer(env, async ({ pid, ask, stall }) => {
      for (let i = 0; i < 3; i++) assert.equal(await ask('/plants'), 200);
      // The first 20 take the process's 16 slots and fill kernel buffers; the 180 after them must cost next to nothing.
      // A size is read once the server has gone idle, every listing stopped by its reader: on a loaded machine the
      // first ones may still be filling their buffers seconds later, and the garbage of that would count as growth.
      const settled = async () => {
        await idle(pid);
        return rssMb(pid);
      };
      await stall(20);
      const withTwenty = await settled();
      await stall(180);
      const withTwoHundred = await settled();
      const grown = withTwoHundred - withTwenty;
      // A reader kept at even 1 MB would grow it by 180 MB.
      assert.ok(grown < 40, `180 more slow readers grew the server by ${grown.toFixed(0)} MB (to ${withTwoHundred.toFixed(0)} MB)`);
      assert.equal(await ask('/plants'), 503, 'the process bound (16 listings) is taken by slow readers');
      assert.equal(await ask('/healthz'), 200);
    });
  });

  it('readers below the minimum rate are cut off, and their slots serve others', { timeout: 120_000 }, async () => {
    // A 2 s window and 100 KB/s: a reader that takes nothing is cut off within seconds.
    await withServer({ PLANTSTORE_LISTING_RATE_WINDOW: '2', PLANTSTORE_LISTING_MIN_RATE: '100000' }, async ({ ask, stall, output }) => {
      await stall(20);
      assert.equal(await ask('/plants'), 503, 'the process bound (16 listings) is taken by slow readers');
      // Shedding load is no failure of the server: logged as a warning, without a stack.
      const refusals = output()
        .split('\n')
        .filter((line) => line.includes('"code":50303'));
      assert.ok(refusals.length > 0, 'the refusal is logged');
      for (const line of refusals) {
        assert.match(line, /"level":40/);
        assert.doesNotMatch(line, /"stack"/);
      }
      await eventually('the slow readers are cut off', () => ask('/plants'), { until: (status) => status === 200, timeoutMs: 15_000 });
    });
  });
});
