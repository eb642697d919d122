import assert from 'node:assert/strict';
import type { OutgoingHttpHeaders } from 'node:http';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RawResponse, type RunningApp } from '../helpers/http-app.js';
import { connectPostgres } from '../helpers/plain-sql.js';

// What clients of POST and DELETE /plants meet besides the happy path, as generated clients, browsers and attackers
// send it: each answer is the one the README documents, with the Error body, on every backend.

after(() => cleanupBackends());

const JSON_BODY = { 'content-type': 'application/json' };

for (const backend of BACKENDS) {
  describe(`writes answer what clients expect [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    let nextId = 7000;
    const create = (user: string, body: unknown, headers: OutgoingHttpHeaders = JSON_BODY, path = '/plants', app = server) =>
      rawRequest(app.url, path, { ...bearer(tokens[user]!), ...headers }, 'POST', typeof body === 'string' ? body : JSON.stringify(body));
    const remove = (user: string, path: string, headers: OutgoingHttpHeaders = {}, app = server) =>
      rawRequest(app.url, path, { ...bearer(tokens[user]!), ...headers }, 'DELETE');
    const patch = (user: string, id: number, change: unknown) =>
      rawRequest(
        server.url,
        `/plants/${id}`,
        { ...bearer(tokens[user]!), 'content-type': 'application/merge-patch+json' },
        'PATCH',
        JSON.stringify(change),
      );

    before(async () => {
      db = await backend.freshDb();
      store = await openStore({ db });
      tokens = (await seed(store, { users: [{ name: 'alice' }, { name: 'bob' }, { name: 'writer' }, { name: 'refused' }] })).tokens;
      server = await startApp(store, { config: { corsOrigins: 'https://app.example' } });
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('refuses a query parameter on POST and DELETE with 400 naming it, and writes nothing', async () => {
      const id = nextId++;
      const created = assertError(await create('alice', { id, name: 'Ghost' }, JSON_BODY, '/plants?_method=DELETE'), 400, 40004);
      assert.match(created.message, /"_method"/);
      assert.equal((await create('alice', { id, name: 'Real' })).status, 200);
      assert.match(assertError(await remove('alice', `/plants/${id}?force=true`), 400, 40004).message, /"force"/);
      assert.equal((await remove('alice', `/plants/${id}`)).status, 204);
    });

    it('deletes on a DELETE sent with Content-Type: application/json and no body', async () => {
      const id = nextId++;
      assert.equal((await create('alice', { id, name: 'Doomed' })).status, 200);
      assert.equal((await remove('alice', `/plants/${id}`, JSON_BODY)).status, 204);
      assertError(await remove('alice', `/plants/${id}`, JSON_BODY), 404, 40402);
    });

    it('refuses control characters in a name or tag with 400 and writes nothing', async () => {
      for (const [name, tag] of [
        ['bell\u0007', undefined],
        ['\u001b[31mred', undefined],
        ['two\nlines', undefined],
        ['tab\tbed', undefined],
        ['del\u007f', undefined],
        ['csi\u009b31mred', undefined],
        ['next line\u0085', undefined],
        ['Fine', '\u0001'],
        ['Fine', 'c1\u0080'],
      ]) {
        const said = assertError(await create('bob', { id: nextId++, name, ...(tag === undefined ? {} : { tag }) }), 400, 40005);
        assert.match(said.message, /control characters/);
      }
      const listed = await rawRequest(server.url, '/plants', bearer(tokens.bob!));
      assert.deepEqual(listed.body, []);
    });

    it('counts a name or tag in characters, as the document does, and bounds a tag to 2048 bytes of UTF-8', async () => {
      // Astral characters are two UTF-16 units each: 1024 of them are 1024 characters, within the bound.
      const herbs = '\u{1F33F}'.repeat(1024);
      const astral = await create('bob', { id: nextId++, name: herbs, tag: '\u{1F33F}'.repeat(512) });
      assert.equal(astral.status, 200, astral.text);
      assert.match(assertError(await create('bob', { id: nextId++, name: `${herbs}x` }), 400, 40005).message, /1024 characters/);
      // A tag keys PostgreSQL's indexes, whose entries it bounds at 2704 bytes: 683 CJK characters (2049 bytes)
      // were a 500 there before, and are a 400 on either backend; a plant name of 1024 is not indexed and fits.
      const cjk = (n: number) => Array.from({ length: n }, (_, i) => String.fromCodePoint(0x4e00 + ((i * 7919) % 20000))).join('');
      const said = assertError(await create('bob', { id: nextId++, name: 'Tea', tag: cjk(683) }), 400, 40005);
      assert.match(said.message, /tag is longer than 2048 bytes/);
      for (const plant of [
        { name: 'Tea', tag: cjk(682) },
        { name: cjk(1024), tag: 'tea' },
      ]) {
        const res = await create('bob', { id: nextId++, ...plant });
        assert.equal(res.status, 200, res.text);
      }
      const id = nextId++;
      assert.equal((await create('bob', { id, name: 'Tea' })).status, 200);
      assertError(await patch('bob', id, { tag: cjk(1000) }), 400, 40005);
    });

    it('says what to send with a 415, and refuses a body of thousands of fields by naming them', async () => {
      const said = assertError(await create('alice', 'id=1&name=x', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 41501);
      assert.match(said.message, /application\/json/);
      // A coded body is not decoded: 415 with the coding taken (RFC 9110 §15.5.16), not its bytes refused as JSON.
      const body = { id: nextId++, name: 'Zipped' };
      const coded = await create('alice', body, { ...JSON_BODY, 'content-encoding': 'gzip' });
      assert.match(assertError(coded, 415, 41501).message, /must not be encoded \(Content-Encoding: "gzip"\)/);
      assert.equal(coded.headers['accept-encoding'], 'identity');
      assert.equal((await create('alice', body, { ...JSON_BODY, 'content-encoding': 'Identity' })).status, 200);
      const flood = Object.fromEntries(Array.from({ length: 1500 }, (_, i) => [`f${i}`, 0]));
      const refused = assertError(await create('alice', { id: nextId++, name: 'x', ...flood }), 400, 40005);
      assert.match(refused.message, /"f0", "f1", "f2", "f3", "f4" and 1495 more/);
      assertError(await create('alice', { id: nextId++, name: 'x'.repeat(33 * 1024) }), 413, 41301);
    });

    it('takes JSON as UTF-8 only: other bytes are a 400 and another charset a 415, never text made up', async () => {
      const id = nextId++;
      const latin1 = Buffer.concat([Buffer.from(`{"id":${id},"name":"caf`), Buffer.from([0xe9]), Buffer.from('"}')]);
      const post = (body: Buffer, contentType: string) =>
        rawRequest(server.url, '/plants', { ...bearer(tokens.alice!), 'content-type': contentType }, 'POST', body);
      assert.match(assertError(await post(latin1, 'application/json'), 400, 40005).message, /not UTF-8/);
      const said = assertError(await post(latin1, 'application/json; charset=iso-8859-1'), 415, 41501);
      assert.match(said.message, /must be UTF-8 \(it says charset="iso-8859-1"\)/);
      // A lone surrogate's bytes (CESU-8) are no UTF-8 either.
      const surrogate = Buffer.concat([Buffer.from(`{"id":${id},"name":"x`), Buffer.from([0xed, 0xa0, 0x80]), Buffer.from('"}')]);
      assertError(await post(surrogate, 'application/json'), 400, 40005);
      const patch = await rawRequest(
        server.url,
        `/plants/${id}`,
        { ...bearer(tokens.alice!), 'content-type': 'application/merge-patch+json' },
        'PATCH',
        Buffer.concat([Buffer.from('{"name":"'), Buffer.from([0xff, 0xfe]), Buffer.from('"}')]),
      );
      assertError(patch, 400, 40005);
      assertError(await rawRequest(server.url, `/plants/${id}`, bearer(tokens.alice!)), 404, 40402);
      const utf8 = Buffer.from(JSON.stringify({ id, name: 'café' }));
      for (const contentType of ['application/json; charset=utf-8', 'application/json;charset="UTF-8"', 'application/json; charset=utf8']) {
        const res = await post(utf8, contentType);
        assert.equal(res.status, 200, `${contentType}: ${res.text}`);
        assert.deepEqual(res.body, { name: 'café' });
      }
    });

    it('refuses a megabyte body of deep nesting or countless keys before parsing it, and parses a full access', async () => {
      const id = nextId++;
      assert.equal((await create('alice', { id, name: 'Shared' })).status, 200);
      const put = (body: string) => rawRequest(server.url, `/plants/${id}/access`, { ...bearer(tokens.alice!), ...JSON_BODY }, 'PUT', body);
      const depth = 300_000;
      const nested = `{"public":false,"users":${'['.repeat(depth)}${']'.repeat(depth)},"groups":[]}`;
      assert.match(assertError(await put(nested), 400, 40005).message, /nests deeper than 4 levels/);
      const keys = `{${Array.from({ length: 80_000 }, (_, i) => `"f${i}":1`).join(',')}}`;
      assert.match(assertError(await put(keys), 400, 40005).message, /holds more than 4096 keys/);
      // The largest access there is: a thousand names each way, of brackets and commas in strings too.
      const names = Array.from({ length: 1000 }, (_, i) => `[n,${i}]${'x'.repeat(400)}`);
      const full = await put(JSON.stringify({ public: false, users: names, groups: names }));
      assertError(full, 422, 42201);
    });

    it("counts creates and deletes against the user's own budget: past it 429 with Retry-After, reads and others go on", async () => {
      const limited = await startApp(store, { config: { writeRateLimit: '3/1m' } });
      try {
        const ids = [nextId++, nextId++];
        assert.equal((await create('writer', { id: ids[0], name: 'one' }, JSON_BODY, '/plants', limited)).status, 200);
        assert.equal((await create('writer', { id: ids[1], name: 'two' }, JSON_BODY, '/plants', limited)).status, 200);
        assert.equal((await remove('writer', `/plants/${ids[0]}`, {}, limited)).status, 204);
        const refused = await create('writer', { id: nextId++, name: 'three' }, JSON_BODY, '/plants', limited);
        assertError(refused, 429, 42903);
        assert.match(String(refused.headers['retry-after']), /^[1-9][0-9]*$/);
        assert.match(String(refused.headers.ratelimit), /"writes";r=0;t=\d+/);
        assertError(await remove('writer', `/plants/${ids[1]}`, {}, limited), 429, 42903);
        assert.equal((await rawRequest(limited.url, '/plants', bearer(tokens.writer!))).status, 200, 'reads keep their own budget');
        const bobs = await create('bob', { id: nextId++, name: "bob's" }, JSON_BODY, '/plants', limited);
        assert.equal(bobs.status, 200, "another user's budget is his own");
      } finally {
        await limited.close();
      }
    });

    it('spends no write budget on a write refused as malformed (400, 415), by the schema or by the rules of names and If-Match', async () => {
      const limited = await startApp(store, { config: { writeRateLimit: '2/1m' } });
      try {
        for (let i = 0; i < 5; i++) {
          assertError(await create('refused', { name: 'no id' }, JSON_BODY, '/plants', limited), 400, 40005);
          assertError(
            await create('refused', 'id=1', { 'content-type': 'application/x-www-form-urlencoded' }, '/plants', limited),
            415,
            41501,
          );
          assertError(await remove('refused', '/plants/0', {}, limited), 400, 40001);
          // Refused by the rules of names and of If-Match rather than by the schema: malformed all the same.
          assertError(await create('refused', { id: 424_242, name: 'bell\u0007' }, JSON_BODY, '/plants', limited), 400, 40005);
          const share = (path: string, headers: Record<string, string> = {}) =>
            rawRequest(limited.url, path, { ...bearer(tokens.refused!), ...headers }, 'PUT');
          assert.equal((await share('/plants/424242/access/users/%20spaced')).status, 400);
          assertError(await share('/plants/424242/access/users/bob', { 'if-match': 'v1' }), 400, 40003);
          const replaced = await rawRequest(
            limited.url,
            '/plants/424242/access',
            { ...bearer(tokens.refused!), ...JSON_BODY },
            'PUT',
            JSON.stringify({ public: false, users: ['group:x'], groups: [] }),
          );
          assert.equal(replaced.status, 400, replaced.text);
        }
        assert.equal((await create('refused', { id: nextId++, name: 'first' }, JSON_BODY, '/plants', limited)).status, 200);
        assert.equal((await create('refused', { id: nextId++, name: 'second' }, JSON_BODY, '/plants', limited)).status, 200);
        assertError(await create('refused', { id: nextId++, name: 'third' }, JSON_BODY, '/plants', limited), 429, 42903);
      } finally {
        await limited.close();
      }
    });

    it('answers a browser preflight for POST and DELETE with Authorization and Content-Type', async () => {
      for (const method of ['POST', 'DELETE']) {
        const res = await rawRequest(
          server.url,
          '/plants',
          {
            origin: 'https://app.example',
            'access-control-request-method': method,
            'access-control-request-headers': 'authorization, content-type',
          },
          'OPTIONS',
        );
        assert.equal(res.status, 204);
        assert.equal(res.headers['access-control-allow-origin'], 'https://app.example');
        assert.match(String(res.headers['access-control-allow-methods']), new RegExp(method));
        assert.match(
          String(res.headers['access-control-allow-headers']).toLowerCase(),
          /authorization.*content-type|content-type.*authorization/,
        );
      }
    });

    it('answers 405 with the methods of the path and 404 for no path, with CORS on as without', async () => {
      const token = bearer(tokens.alice!);
      for (const [method, path, allow] of [
        ['PUT', '/plants/1', 'GET, HEAD, PATCH, DELETE'],
        ['POST', '/plants/1/access', 'GET, HEAD, PUT'],
        ['GET', '/plants/1/access/users/bob', 'PUT, DELETE'],
        // Not a preflight (no Origin): the CORS plugin passes it on.
        ['OPTIONS', '/plants/1', 'GET, HEAD, PATCH, DELETE'],
      ] as const) {
        const res = await rawRequest(server.url, path, token, method);
        assertError(res, 405, 40501);
        assert.equal(res.headers.allow, allow, `${method} ${path}`);
      }
      for (const path of ['/nonexistent', '/', '/plants/1/x']) assertError(await rawRequest(server.url, path, token), 404, 40401);
    });

    it('answers exactly one 204 to concurrent deletes of one plant, from two instances', async () => {
      const other = await openStore({ db });
      const second = await startApp(other);
      try {
        for (let round = 0; round < 10; round++) {
          const id = nextId++;
          assert.equal((await create('alice', { id, name: `contested ${round}` })).status, 200);
          const answers = await Promise.all(
            [server, second, server, second].map((app) => rawRequest(app.url, `/plants/${id}`, bearer(tokens.alice!), 'DELETE')),
          );
          assert.deepEqual(answers.map((r) => r.status).sort(), [204, 404, 404, 404], `round ${round}`);
        }
      } finally {
        await second.close();
        await other.close();
      }
    });

    it('answers 503 with Retry-After when the database is locked by another writer for too long', { timeout: 30_000 }, async () => {
      const blocker = await lockPlants(db);
      try {
        const res = await create('bob', { id: nextId++, name: 'Blocked' });
        assertError(res, 503, 50301);
        assert.equal(res.headers['retry-after'], '1');
      } finally {
        await blocker.release();
      }
      assert.equal((await create('bob', { id: nextId++, name: 'Unblocked' })).status, 200);
    });

    // PostgreSQL's lock of the table here holds up reads too; SQLite's write lock holds up no reader.
    it(
      'reads a plant and its access while a change of it waits for another writer',
      { timeout: 30_000, skip: backend.name !== 'sqlite' },
      async () => {
        const id = nextId++;
        assert.equal((await create('alice', { id, name: 'Waited on' })).status, 200);
        const blocker = await lockPlants(db);
        let settled = false;
        let patched: Promise<RawResponse> | undefined;
        try {
          patched = patch('alice', id, { tag: 'first' });
          void patched.finally(() => (settled = true));
          const queued = patch('alice', id, { tag: 'second' });
          await new Promise((resolve) => setTimeout(resolve, 200));
          const read = await rawRequest(server.url, `/plants/${id}`, bearer(tokens.alice!));
          const access = await rawRequest(server.url, `/plants/${id}/access`, bearer(tokens.alice!));
          assert.equal(read.status, 200, read.text);
          assert.equal(access.status, 200, access.text);
          assert.equal(settled, false, 'the reads were answered while the change still waited');
          await blocker.release();
          assert.equal((await queued).status, 200);
        } finally {
          await blocker.release().catch(() => {});
        }
        assert.equal((await patched).status, 200);
      },
    );

    it(
      "bounds a queued change's wait for the write lock from when it was asked, not from when the one before gave up",
      { timeout: 30_000, skip: backend.name !== 'sqlite' },
      async () => {
        const id = nextId++;
        assert.equal((await create('alice', { id, name: 'Contested' })).status, 200);
        const blocker = await lockPlants(db);
        try {
          const changes = ['first', 'second'].map((tag) => patch('alice', id, { tag }));
          // Past one wait (5 s) and short of two: the second gives up too, having waited as long as the first.
          await new Promise((resolve) => setTimeout(resolve, 7_000));
          await blocker.release();
          for (const answer of await Promise.all(changes)) assertError(answer, 503, 50301);
        } finally {
          await blocker.release().catch(() => {});
        }
      },
    );
  });
}

/**
 * Holds a write lock on the plants that a write waits for past its bound: SQLite's write lock (5 s), or a PostgreSQL
 * table lock (the statement timeout: 5 s by default).
 */
async function lockPlants(db: string): Promise<{ release(): Promise<void> }> {
  if (!db.startsWith('postgres')) {
    const sqlite = new BetterSqlite3(db);
    sqlite.exec('BEGIN IMMEDIATE');
    return {
      release: async () => {
        sqlite.exec('ROLLBACK');
        sqlite.close();
      },
    };
  }
  const client = await connectPostgres(db);
  await client.query('BEGIN');
  await client.query('LOCK TABLE plants IN ACCESS EXCLUSIVE MODE');
  return {
    release: async () => {
      await client.query('ROLLBACK');
      await client.end();
    },
  };
}
