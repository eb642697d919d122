import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { generateToken } from '../../src/catalogue/tokens.js';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import { startStreamingPair, streamingPairUnavailable, type StreamingPair } from '../helpers/streaming-standby.js';
import { addPlant } from '../helpers/http-app.js';

// Read-your-writes with --read-db, against a real streaming standby whose replay is paused: the writer's next
// listing shows its write (read on the primary while the replica lags), while others read the lagging replica.

const skip = streamingPairUnavailable();

describe('read-your-writes with --read-db on a real streaming standby', { skip }, () => {
  let pair: StreamingPair;
  let server: RunningServer;
  const tokens: Record<string, string> = {};

  before(async () => {
    pair = await startStreamingPair();
    const store = await openStore({ db: pair.primaryUrl });
    try {
      for (const [name, admin] of [
        ['alice', false],
        ['root', true],
      ] as const) {
        await store.users.add(name, admin);
        const minted = generateToken();
        await store.tokens.add({ user: name, hash: minted.hash });
        tokens[name] = minted.token;
      }
      await addPlant(store, { name: 'Before', owner: 'alice', public: false });
    } finally {
      await store.close();
    }
    server = await startServer(loadConfig({ db: pair.primaryUrl, readDb: pair.standbyUrl, port: 0, logLevel: 'silent' }));
    await pair.waitForReplay();
  });

  after(async () => {
    await server?.stop();
    await pair?.stop();
  });

  const send = (user: string, method: string, path: string, body?: unknown) =>
    fetch(`${server.url}${path}`, {
      method,
      headers: { authorization: `Bearer ${tokens[user]}`, ...(body === undefined ? {} : { 'content-type': 'application/json' }) },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
  const names = async (user: string) => ((await (await send(user, 'GET', '/plants')).json()) as Array<{ name: string }>).map((p) => p.name);

  it('the writer sees its create and its delete at once while the standby replays nothing; others see the standby', async () => {
    assert.deepEqual(await names('root'), ['Before'], 'the standby has the seeded catalogue');
    await pair.pauseReplay();
    try {
      assert.equal((await send('alice', 'POST', '/plants', { id: 500, name: 'Written' })).status, 200);
      assert.deepEqual(await names('alice'), ['Before', 'Written'], 'the writer sees its create');
      // Root did not write: its listing comes from the standby, which has not replayed the create.
      assert.deepEqual(await names('root'), ['Before'], 'a reader who did not write reads the lagging standby');
      assert.equal((await send('alice', 'DELETE', '/plants/500')).status, 204);
      assert.deepEqual(await names('alice'), ['Before'], 'the writer sees its delete');
      assert.equal((await send('alice', 'POST', '/plants', { id: 501, name: 'Kept' })).status, 200);
      assert.deepEqual(await names('alice'), ['Before', 'Kept']);
    } finally {
      await pair.resumeReplay();
    }
    await pair.waitForReplay();
    assert.deepEqual(await names('root'), ['Before', 'Kept'], 'once replayed, everyone sees the writes');
    assert.deepEqual(await names('alice'), ['Before', 'Kept']);
  });

  it("a page another user read from the lagging standby is not kept past the writer's commit", async () => {
    const page = async (user: string) =>
      ((await (await send(user, 'GET', '/plants?limit=10')).json()) as Array<{ name: string }>).map((p) => p.name);
    assert.deepEqual(await page('root'), ['Before', 'Kept']);
    await pair.pauseReplay();
    try {
      // Root reads all the while the create commits, so that some of its reads come between the commit and the
      // change feed's read of the log: the standby has not replayed the create.
      const created = send('alice', 'POST', '/plants', { id: 600, name: 'Paged' });
      let done = false;
      void created.finally(() => setTimeout(() => (done = true), 100));
      while (!done) assert.deepEqual(await page('root'), ['Before', 'Kept'], 'a reader who did not write reads the lagging standby');
      assert.equal((await created).status, 200);
    } finally {
      await pair.resumeReplay();
    }
    await pair.waitForReplay();
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    assert.deepEqual(await page('root'), ['Before', 'Kept', 'Paged'], 'within the freshness bound once replayed');
  });
});
