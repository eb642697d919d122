import assert from 'node:assert/strict';
import type { OutgoingHttpHeaders } from 'node:http';
import { after, before, describe, it } from 'node:test';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RunningApp } from '../helpers/http-app.js';

// GET and PATCH /plants/{id} over a real socket, once per backend; every answer is checked against the served
// document by rawRequest.

after(() => cleanupBackends());

const MERGE_PATCH = { 'content-type': 'application/merge-patch+json' };

for (const backend of BACKENDS) {
  describe(`one plant over HTTP [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    let ids: Record<string, PlantId>;
    const read = (user: string, id: number | string, headers: OutgoingHttpHeaders = {}) =>
      rawRequest(server.url, `/plants/${id}`, { ...bearer(tokens[user]!), ...headers });
    const change = (user: string, id: number | string, body: unknown, headers: OutgoingHttpHeaders = MERGE_PATCH) =>
      rawRequest(
        server.url,
        `/plants/${id}`,
        { ...bearer(tokens[user]!), ...headers },
        'PATCH',
        typeof body === 'string' ? body : JSON.stringify(body),
      );
    const listing = async (user: string) => {
      const res = await rawRequest(server.url, '/plants', bearer(tokens[user]!));
      assert.equal(res.status, 200, res.text);
      return res.body as Array<{ name: string; tag?: string }>;
    };

    before(async () => {
      store = await backend.open();
      const seeded = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'dave' }, { name: 'root', admin: true }],
        groups: [{ name: 'gardeners', members: ['dave'] }],
        plants: [
          { name: 'Aloe', tag: 'succulent', owner: 'bob', public: true },
          { name: 'Orchid', owner: 'bob' },
          { name: 'Fern', tag: 'fern', owner: 'alice', sharedWith: [{ user: 'carol' }, { group: 'gardeners' }] },
          { name: 'Basil', tag: 'herb', owner: 'alice' },
          { name: 'Mint', tag: 'herb', owner: 'alice' },
        ],
      });
      tokens = seeded.tokens;
      ids = Object.fromEntries(seeded.plants.map((p) => [p.name, p.id]));
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('reads a plant the caller sees, with its id and an ETag; 404 alike for one hidden and for none', async () => {
      const res = await read('alice', ids.Fern!);
      assert.equal(res.status, 200, res.text);
      // Id first, as a listing with ids and an event show it.
      assert.equal(res.text, JSON.stringify({ id: ids.Fern, name: 'Fern', tag: 'fern' }));
      assert.match(String(res.headers['content-type']), /^application\/json; charset=utf-8$/);
      assert.match(String(res.headers.etag), /^"[A-Za-z0-9_-]+"$/);
      // Grantees, group members, admins and (for a public plant) everyone see it; the same ETag for all.
      for (const user of ['carol', 'dave', 'root']) assert.equal((await read(user, ids.Fern!)).headers.etag, res.headers.etag, user);
      assert.deepEqual((await read('carol', ids.Aloe!)).body, { id: ids.Aloe, name: 'Aloe', tag: 'succulent' });
      assert.deepEqual((await read('alice', ids.Orchid!)).status, 404);
      const hidden = assertError(await read('bob', ids.Fern!), 404, 40402);
      const none = assertError(await read('bob', 987_654), 404, 40402);
      assert.equal(hidden.message.replace(String(ids.Fern), 'N'), none.message.replace('987654', 'N'));
    });

    it('answers If-None-Match with 304 while the plant is unchanged', async () => {
      const { headers } = await read('alice', ids.Basil!);
      const etag = String(headers.etag);
      const same = await read('alice', ids.Basil!, { 'if-none-match': etag });
      assert.equal(same.status, 304);
      assert.equal(same.text, '');
      assert.equal(same.headers.etag, etag);
      assert.equal(same.headers['content-length'], undefined);
      // HEAD answers as GET does; its 304 has no Content-Length either, since the 200's would not be 0.
      const head = await rawRequest(server.url, `/plants/${ids.Basil}`, { ...bearer(tokens.alice!), 'if-none-match': etag }, 'HEAD');
      assert.equal(head.status, 304);
      assert.equal(head.headers.etag, etag);
      assert.equal(head.headers['content-length'], undefined);
      const whole = await rawRequest(server.url, `/plants/${ids.Basil}`, bearer(tokens.alice!), 'HEAD');
      assert.equal(whole.status, 200);
      assert.equal(whole.headers['content-length'], String(Buffer.byteLength((await read('alice', ids.Basil!)).text)));
      assert.equal((await read('alice', ids.Basil!, { 'if-none-match': `W/${etag}` })).status, 304);
      assert.equal((await read('alice', ids.Basil!, { 'if-none-match': '*' })).status, 304);
      assert.equal((await read('alice', ids.Basil!, { 'if-none-match': '"other", "else"' })).status, 200);
      assertError(await read('alice', ids.Basil!, { 'if-none-match': 'not-a-tag' }), 400, 40003);
      // Empty list elements are ignored (RFC 9110 §5.6.1.2); a list of none is still malformed.
      assert.equal((await read('alice', ids.Basil!, { 'if-none-match': `, "other", , ${etag},` })).status, 304);
      assertError(await read('alice', ids.Basil!, { 'if-none-match': ', ,' }), 400, 40003);
      // A hidden plant is a 404 whatever the header says.
      assertError(await read('bob', ids.Basil!, { 'if-none-match': '*' }), 404, 40402);
    });

    it('refuses a bad id, no token and an Accept without JSON', async () => {
      assertError(await read('alice', 0), 400, 40001);
      assertError(await read('alice', 'abc'), 400, 40001);
      assertError(await rawRequest(server.url, `/plants/${ids.Fern}`), 401, 40101);
      assertError(await read('alice', ids.Fern!, { accept: 'text/html' }), 406, 40601);
    });

    it('changes the name and tag for the owner; the plant keeps its id, place and shares', async () => {
      const before = await listing('carol');
      const res = await change('alice', ids.Fern!, { name: 'Maidenhair fern' });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, { id: ids.Fern, name: 'Maidenhair fern', tag: 'fern' });
      assert.equal(res.headers.etag, (await read('alice', ids.Fern!)).headers.etag);
      // Every viewer's next listing has the new name in the old place; grantees still see it.
      const after = await listing('carol');
      assert.deepEqual(
        after.map((p) => p.name),
        before.map((p) => (p.name === 'Fern' ? 'Maidenhair fern' : p.name)),
      );
      assert.ok((await listing('dave')).some((p) => p.name === 'Maidenhair fern'));
      assert.ok((await listing('root')).some((p) => p.name === 'Maidenhair fern'));
      // `"tag": null` removes the tag; plain JSON is taken too.
      const untagged = await change('alice', ids.Fern!, { tag: null }, { 'content-type': 'application/json' });
      assert.deepEqual(untagged.body, { id: ids.Fern, name: 'Maidenhair fern' });
      assert.deepEqual(
        (await listing('carol')).find((p) => p.name === 'Maidenhair fern'),
        { name: 'Maidenhair fern' },
      );
      // An admin may change anyone's plant; an empty patch changes nothing.
      assert.deepEqual((await change('root', ids.Fern!, { tag: 'fern' })).body, { id: ids.Fern, name: 'Maidenhair fern', tag: 'fern' });
      assert.deepEqual((await change('alice', ids.Fern!, {})).body, { id: ids.Fern, name: 'Maidenhair fern', tag: 'fern' });
    });

    it('answers 403 to one who sees the plant but does not own it, 404 to one who does not see it', async () => {
      assertError(await change('carol', ids.Fern!, { name: 'Mine' }), 403, 40301);
      assertError(await change('dave', ids.Fern!, { name: 'Mine' }), 403, 40301);
      assertError(await change('carol', ids.Aloe!, { name: 'Mine' }), 403, 40301);
      assertError(await change('bob', ids.Fern!, { name: 'Mine' }), 404, 40402);
      assertError(await change('bob', 987_654, { name: 'Mine' }), 404, 40402);
      assert.equal(((await read('alice', ids.Fern!)).body as { name: string }).name, 'Maidenhair fern');
    });

    it('changes only while If-Match names the current version: 412 with the current ETag otherwise', async () => {
      const { headers } = await read('alice', ids.Mint!);
      const etag = String(headers.etag);
      const changed = await change('alice', ids.Mint!, { name: 'Peppermint' }, { ...MERGE_PATCH, 'if-match': etag });
      assert.equal(changed.status, 200, changed.text);
      const stale = assertError(await change('alice', ids.Mint!, { name: 'Spearmint' }, { ...MERGE_PATCH, 'if-match': etag }), 412, 41202);
      assert.match(stale.message, /If-Match/);
      const current = (await change('alice', ids.Mint!, {}, { ...MERGE_PATCH })).headers.etag;
      const refused = await change('alice', ids.Mint!, { name: 'Spearmint' }, { ...MERGE_PATCH, 'if-match': etag });
      assert.equal(refused.headers.etag, current);
      // A weak tag never matches; `*` matches any version; a malformed header is a 400.
      assertError(await change('alice', ids.Mint!, { name: 'Spearmint' }, { ...MERGE_PATCH, 'if-match': `W/${current}` }), 412, 41202);
      assert.equal((await change('alice', ids.Mint!, { name: 'Spearmint' }, { ...MERGE_PATCH, 'if-match': '*' })).status, 200);
      assertError(await change('alice', ids.Mint!, { name: 'X' }, { ...MERGE_PATCH, 'if-match': 'nope' }), 400, 40003);
      assert.equal(((await read('alice', ids.Mint!)).body as { name: string }).name, 'Spearmint');
    });

    it('evaluates If-Match on a read and If-None-Match on a change or a delete (RFC 9110 §13.2.2)', async () => {
      const etag = String((await read('alice', ids.Basil!)).headers.etag);
      // A read answers only while If-Match holds: 412 with the current ETag otherwise.
      assert.equal((await read('alice', ids.Basil!, { 'if-match': etag })).status, 200);
      const stale = assertError(await read('alice', ids.Basil!, { 'if-match': '"elsewhen"' }), 412, 41202);
      assert.match(stale.message, /If-Match/);
      assert.equal((await read('alice', ids.Basil!, { 'if-match': '"elsewhen"' })).headers.etag, etag);
      assertError(await read('alice', ids.Basil!, { 'if-match': `W/${etag}` }), 412, 41202);
      // If-Match is evaluated first: one that fails is a 412 even where If-None-Match would be a 304.
      assertError(await read('alice', ids.Basil!, { 'if-match': '"elsewhen"', 'if-none-match': etag }), 412, 41202);
      // A change or a delete is made only while If-None-Match does not name the version: `*` names any.
      const named = assertError(await change('alice', ids.Basil!, { name: 'X' }, { ...MERGE_PATCH, 'if-none-match': etag }), 412, 41202);
      assert.match(named.message, /If-None-Match/);
      assertError(await change('alice', ids.Basil!, { name: 'X' }, { ...MERGE_PATCH, 'if-none-match': `W/${etag}` }), 412, 41202);
      assertError(await change('alice', ids.Basil!, { name: 'X' }, { ...MERGE_PATCH, 'if-none-match': '*' }), 412, 41202);
      const remove = (headers: OutgoingHttpHeaders) =>
        rawRequest(server.url, `/plants/${ids.Basil!}`, { ...bearer(tokens.alice!), ...headers }, 'DELETE');
      assertError(await remove({ 'if-none-match': '*' }), 412, 41202);
      assertError(await remove({ 'if-none-match': `"x", ${etag}` }), 412, 41202);
      assertError(await remove({ 'if-none-match': 'nope' }), 400, 40003);
      assert.deepEqual((await read('alice', ids.Basil!)).body, { id: ids.Basil, name: 'Basil', tag: 'herb' }, 'nothing changed');
      // Another version: the change is made.
      const changed = await change('alice', ids.Basil!, { tag: 'herb' }, { ...MERGE_PATCH, 'if-none-match': '"elsewhen"' });
      assert.equal(changed.status, 200, changed.text);
    });

    it('refuses a body that is not a PlantPatch with 400, another media type with 415', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{ name: null }, /name/],
        [{ name: '' }, /name/],
        [{ name: 'a\u0007b' }, /control/],
        [{ tag: '' }, /tag/],
        [{ tag: 7 }, /tag/],
        [{ id: 12 }, /id/],
        [{ owner: 'bob' }, /owner/],
        [[{ name: 'X' }], /object/],
        ['{"name": "X",', /^the request body is not valid JSON: /],
        ['', /^the request body is empty/],
      ];
      for (const [body, message] of cases) {
        const { message: said } = assertError(await change('alice', ids.Basil!, body), 400, 40005);
        assert.match(said, message, JSON.stringify(body));
      }
      assertError(await change('alice', ids.Basil!, 'name=X', { 'content-type': 'text/plain' }), 415, 41501);
      // JSON Patch is another format: the 415 names the types a change is taken in (RFC 5789 §2.2).
      const jsonPatch = await change('alice', ids.Basil!, [{ op: 'replace', path: '/name', value: 'X' }], {
        'content-type': 'application/json-patch+json',
      });
      assert.match(assertError(jsonPatch, 415, 41501).message, /application\/merge-patch\+json/);
      assert.equal(jsonPatch.headers['accept-patch'], 'application/merge-patch+json, application/json');
      assertError(await change('alice', ids.Basil!, { name: 'X' }, { 'content-type': 'application/x-www-form-urlencoded' }), 415, 41501);
      // The merge-patch type is a change's only.
      assertError(
        await rawRequest(
          server.url,
          '/plants',
          { ...bearer(tokens.alice!), ...MERGE_PATCH },
          'POST',
          JSON.stringify({ id: 8001, name: 'X' }),
        ),
        415,
        41501,
      );
      assertError(await change('alice', ids.Basil!, { name: 'X'.repeat(70_000) }), 413, 41301);
      assert.deepEqual((await read('alice', ids.Basil!)).body, { id: ids.Basil, name: 'Basil', tag: 'herb' });
    });
  });
}
