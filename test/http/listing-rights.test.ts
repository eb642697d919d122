import assert from 'node:assert/strict';
import { request } from 'node:http';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { recordBatch } from '../../src/import-format/records.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { mintToken, startApp } from '../helpers/http-app.js';

// A full listing is streamed chunk by chunk for as long as its client takes to read it. Each chunk is read with the
// caller's rights as they are when it is read: an admin demoted meanwhile goes on as a user, and a listing whose
// token is revoked meanwhile ends unfinished, so that nothing created or hidden after the change reaches it.

after(() => cleanupBackends());

/** Enough plants of a long name that a paused client holds most of the listing unsent (socket buffers are a few MB). */
const PLANTS = 40_000;
const NAME = 'x'.repeat(400);
/** Longer than the freshness bound within which every process sees a change. */
const FRESHNESS_MS = 1_200;

interface Outcome {
  text: string;
  complete: boolean;
}

/**
 * GET /plants with `token`, reading the first bytes, then pausing while `meanwhile` runs and FRESHNESS_MS pass,
 * then reading to the end: what arrived, and whether the response ended whole.
 */
function listPausing(url: string, token: string, meanwhile: () => Promise<void>): Promise<Outcome> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const req = request({ hostname, port, path: '/plants', headers: { authorization: `Bearer ${token}` }, agent: false }, (res) => {
      assert.equal(res.statusCode, 200);
      const parts: Buffer[] = [];
      let paused = false;
      const done = (complete: boolean) => resolve({ text: Buffer.concat(parts).toString('utf8'), complete });
      res.on('data', (part: Buffer) => {
        parts.push(part);
        if (paused) return;
        paused = true;
        res.pause();
        meanwhile()
          .then(() => sleep(FRESHNESS_MS))
          .then(() => res.resume(), reject);
      });
      res.on('end', () => done(res.complete));
      res.on('error', () => done(false));
      res.on('aborted', () => done(false));
    });
    req.on('error', reject);
    req.end();
  });
}

for (const backend of BACKENDS) {
  describe(`a full listing under way [${backend.name}]`, { skip: backend.skip }, () => {
    const setUp = async (): Promise<{ store: Store; url: string; token: string; tokenId: number; close: () => Promise<void> }> => {
      const store = await backend.open();
      await store.bulk.importRecords(
        recordBatch([
          { type: 'user', name: 'owner' },
          { type: 'user', name: 'root', admin: true },
          ...Array.from({ length: PLANTS }, (_, i) => ({ type: 'plant' as const, name: `${NAME}${i}`, owner: 'owner' })),
        ]),
      );
      const server = await startApp(store);
      const { token, id } = await mintToken(store, 'root');
      return { store, url: server.url, token, tokenId: id, close: async () => (await server.close(), await store.close()) };
    };

    it("goes on with a demoted admin's rights", async () => {
      const { store, url, token, close } = await setUp();
      try {
        const outcome = await listPausing(url, token, async () => {
          await store.users.setAdmin('root', false);
          await store.plants.create(OPERATOR, { name: 'created-after-demotion', owner: 'owner' });
        });
        assert.ok(outcome.complete, 'the listing ended whole');
        const names = (JSON.parse(outcome.text) as Array<{ name: string }>).map((p) => p.name);
        assert.ok(!names.includes('created-after-demotion'), 'a plant created after the demotion was listed');
        assert.ok(names.length < PLANTS, `all ${PLANTS} private plants were listed after the demotion`);
      } finally {
        await close();
      }
    });

    it('ends unfinished once its token is revoked', async () => {
      const { store, url, token, tokenId, close } = await setUp();
      try {
        const outcome = await listPausing(url, token, async () => {
          await store.tokens.revoke(tokenId);
          await store.plants.create(OPERATOR, { name: 'created-after-revocation', owner: 'owner' });
        });
        assert.ok(!outcome.complete, 'the listing ended whole after its token was revoked');
        assert.ok(!outcome.text.includes('created-after-revocation'));
        assert.ok(outcome.text.length < PLANTS * NAME.length, 'the whole listing was sent');
      } finally {
        await close();
      }
    });
  });
}
