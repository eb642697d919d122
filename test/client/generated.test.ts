import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CLIENT_DIR, generateClientFiles } from '../../scripts/generate-client.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { startApp, type RunningApp } from '../helpers/http-app.js';

// The client's committed document and types must be what the generator makes from the app as it is now;
// otherwise the client would type calls against an API the service no longer has.

const STALE = 'is stale against the served OpenAPI document: run `npm run client:generate` and commit the result';

describe('generated client files', () => {
  let dir: string;
  let written: string[];

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plantstore-client-'));
    written = await generateClientFiles(dir);
  });
  after(() => rm(dir, { recursive: true, force: true }));

  for (const name of ['openapi.json', 'src/schema.d.ts']) {
    it(`client/${name} is byte-for-byte what the generator makes`, async () => {
      assert.ok(written.includes(join(dir, name)), `the generator writes ${name}`);
      const fresh = await readFile(join(dir, name));
      const committed = await readFile(join(CLIENT_DIR, name)).catch(() => Buffer.alloc(0));
      assert.ok(fresh.length > 0, `the generator wrote an empty ${name}`);
      assert.ok(committed.equals(fresh), `client/${name} ${STALE}`);
    });
  }
});

describe(`client/openapi.json and the document served over HTTP [${BACKENDS[0]!.name}]`, () => {
  let store: Store;
  let server: RunningApp;

  before(async () => {
    store = await BACKENDS[0]!.open();
    server = await startApp(store);
  });
  after(async () => {
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('are the same document', async () => {
    const res = await fetch(`${server.url}/openapi.json`);
    assert.equal(res.status, 200);
    const committed: unknown = JSON.parse(await readFile(join(CLIENT_DIR, 'openapi.json'), 'utf8'));
    assert.deepEqual(committed, await res.json(), `client/openapi.json ${STALE}`);
  });
});
