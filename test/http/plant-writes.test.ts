import assert from 'node:assert/strict';
import type { OutgoingHttpHeaders } from 'node:http';
import { connect } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RunningApp, addPlant } from '../helpers/http-app.js';
import { exchangeRaw, parseResponses } from '../helpers/raw-http.js';

// POST /plants and DELETE /plants/{id} over a real socket, once per backend; every answer is checked against
// the served document by rawRequest.

after(() => cleanupBackends());

const JSON_BODY = { 'content-type': 'application/json' };

for (const backend of BACKENDS) {
  describe(`plant writes over HTTP [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    let bobsPublicId: PlantId;
    let bobsPrivateId: PlantId;
    const create = (user: string, body: unknown, headers: OutgoingHttpHeaders = JSON_BODY) =>
      rawRequest(
        server.url,
        '/plants',
        { ...bearer(tokens[user]!), ...headers },
        'POST',
        typeof body === 'string' ? body : JSON.stringify(body),
      );
    const remove = (user: string, id: number | string) => rawRequest(server.url, `/plants/${id}`, bearer(tokens[user]!), 'DELETE');
    const names = async (user: string) => {
      const res = await rawRequest(server.url, '/plants', bearer(tokens[user]!));
      assert.equal(res.status, 200, res.text);
      return (res.body as Array<{ name: string }>).map((p) => p.name);
    };

    before(async () => {
      store = await backend.open();
      const seeded = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'root', admin: true }],
        plants: [
          { name: 'Aloe', owner: 'bob', public: true },
          { name: 'Orchid', owner: 'bob' },
        ],
      });
      tokens = seeded.tokens;
      [bobsPublicId, bobsPrivateId] = seeded.plants.map((p) => p.id) as [PlantId, PlantId];
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('creates a plant the caller owns and sees next, private to others', async () => {
      const res = await create('alice', { id: 5001, name: 'Fern', tag: 'fern' });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, { name: 'Fern', tag: 'fern' });
      assert.ok((await names('alice')).includes('Fern'));
      assert.ok(!(await names('carol')).includes('Fern'));
      assert.ok((await names('root')).includes('Fern'));
      // Catalogue order is the order plants were added, whatever ids they were given.
      assert.equal((await names('root')).at(-1), 'Fern');
      const listed = await store.plants.list({ owner: 'alice' });
      assert.deepEqual(
        listed.map((p) => [p.id, p.name, p.public]),
        [[5001, 'Fern', false]],
      );
    });

    it('answers a repeated create with 200 and creates nothing more; another plant on the id is a 409', async () => {
      const body = { id: 5002, name: 'Basil' };
      assert.equal((await create('alice', body)).status, 200);
      assert.equal((await create('alice', body)).status, 200);
      assert.equal((await names('alice')).filter((n) => n === 'Basil').length, 1);
      assertError(await create('bob', body), 409, 40901);
      assertError(await create('alice', { id: 5002, name: 'Basil', tag: 'herb' }), 409, 40901);
      assertError(await create('alice', { id: bobsPrivateId, name: 'Mine now' }), 409, 40901);
    });

    it('creates nothing when If-Match names tags or If-None-Match is *: the plant list has no version (412)', async () => {
      const body = { id: 5020, name: 'Conditional' };
      for (const conditions of [{ 'if-match': '"v1"' }, { 'if-match': 'W/"v1", "v2"' }, { 'if-none-match': '*' }]) {
        assertError(await create('alice', body, { ...JSON_BODY, ...conditions }), 412, 41204);
      }
      assertError(await create('alice', body, { ...JSON_BODY, 'if-match': 'v1' }), 400, 40003);
      assert.ok(!(await names('alice')).includes('Conditional'));
      assert.equal((await create('alice', body, { ...JSON_BODY, 'if-match': '*', 'if-none-match': '"v1"' })).status, 200);
      assert.ok((await names('alice')).includes('Conditional'));
    });

    it('answers Expect: 100-continue with 100 only for a body it will read: too large or unauthenticated, the refusal at once', async () => {
      const port = Number(new URL(server.url).port);
      /** Sends the head, then `body` once a 100 came; resolves with everything read until the socket ends. */
      const exchange = (head: string, body = '') =>
        new Promise<string>((resolve, reject) => {
          const socket = connect(port, '127.0.0.1', () => socket.write(head));
          let read = '';
          socket.on('data', (chunk: Buffer) => {
            const first = read === '';
            read += chunk.toString('latin1');
            if (first && read.startsWith('HTTP/1.1 100 Continue\r\n\r\n')) socket.write(body);
          });
          socket.on('error', reject).on('close', () => resolve(read));
        });
      const post = (headers: string, length: number) =>
        `POST /plants HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: ${length}\r\n${headers}Connection: close\r\n\r\n`;
      const auth = `Authorization: Bearer ${tokens.alice}\r\n`;
      const tooLarge = await exchange(post(auth, 10_000_000));
      assert.match(tooLarge, /^HTTP\/1\.1 413 /, 'no 100 before the refusal');
      assert.match(await exchange(post('', 10)), /^HTTP\/1\.1 401 /);
      const body = JSON.stringify({ id: 5030, name: 'Continued' });
      const created = await exchange(post(auth, Buffer.byteLength(body)), body);
      assert.match(created, /^HTTP\/1\.1 100 Continue\r\n\r\nHTTP\/1\.1 200 /);
      assert.ok((await names('alice')).includes('Continued'));
    });

    it('answers concurrent repeats of one create with 200 each and makes one plant', async () => {
      const body = { id: 5010, name: 'Retried', tag: 'r' };
      const answers = await Promise.all(Array.from({ length: 8 }, () => create('alice', body)));
      assert.deepEqual(
        answers.map((res) => res.status),
        Array<number>(8).fill(200),
      );
      assert.equal((await names('alice')).filter((n) => n === 'Retried').length, 1);
    });

    it('refuses a body that is not a NewPlant with 400 and says why', async () => {
      const cases: Array<[unknown, RegExp]> = [
        [{ id: 5003, name: 'X', owner: 'bob' }, /owner/],
        [{ id: 5003, name: 'X', public: true }, /public/],
        // A missing id says how to choose one.
        [
          { name: 'X' },
          /^the request body is missing "id": identification number of the plant, chosen by the client; unique in the store, a whole number from 1 to 9007199254740991$/,
        ],
        [{ id: 5003 }, /"name"/],
        [{ id: 0, name: 'X' }, /id/],
        [{ id: 1.5, name: 'X' }, /id/],
        [{ id: '5003', name: 'X' }, /id/],
        [{ id: 2 ** 53, name: 'X' }, /id/],
        // Fractions a double cannot hold, which JSON parsers read as whole ids.
        [
          '{"id": 4503599627370496.5, "name": "X"}',
          /^the request body is refused: the number 4503599627370496\.5 is not a whole number, though JSON parsers read it as 4503599627370496: ids are whole numbers from 1 to 9007199254740991$/,
        ],
        ['{"name": "X 1.5", "id": 5003.0000000000000000001}', /the number 5003\.0000000000000000001 is not a whole number/],
        ['{"id": 50030000000000000000001e-19, "name": "X"}', /the number 50030000000000000000001e-19 is not a whole number/],
        [{ id: 5003, name: 'X', tag: 7 }, /tag/],
        [{ id: 5003, name: '' }, /name/],
        [[{ id: 5003, name: 'X' }], /object/],
        // Not JSON: the service's words, with where it breaks.
        ['{"id": 5003,', /^the request body is not valid JSON: /],
        ['{"id": 5003, "name": "X",}', /^the request body is not valid JSON: it breaks at line 1, column 26, near /],
        ['{"id": 5003,\n "name": X}', /^the request body is not valid JSON: unexpected 'X'/],
        ['', /^the request body is empty: send a JSON object$/],
        ['{"id": 5003, "name": "X", "__proto__": {"x": 1}}', /"__proto__" or "constructor" key/],
      ];
      for (const [body, message] of cases) {
        const { message: said } = assertError(await create('alice', body), 400, 40005);
        assert.match(said, message, JSON.stringify(body));
      }
      assert.ok(!(await names('root')).includes('X'));
    });

    it('takes an id written with a zero fraction or an exponent, as JSON Schema does', async () => {
      for (const [id, text] of [
        [5011, '5011.000'],
        [5012, '5.012e3'],
        [5013, '501300e-2'],
      ] as const) {
        const res = await create('alice', `{"id": ${text}, "name": "Whole ${text}"}`);
        assert.equal(res.status, 200, res.text);
        const read = await rawRequest(server.url, `/plants/${id}`, bearer(tokens.alice!));
        assert.deepEqual(read.body, { id, name: `Whole ${text}` });
      }
    });

    it('answers 415 for a body that is not JSON, 401 without a token, 413 for a huge body', async () => {
      assertError(await create('alice', 'id=5004&name=X', { 'content-type': 'application/x-www-form-urlencoded' }), 415, 41501);
      assertError(await create('alice', 'hello', { 'content-type': 'text/plain' }), 415, 41501);
      assertError(await rawRequest(server.url, '/plants', JSON_BODY, 'POST', JSON.stringify({ id: 5004, name: 'X' })), 401, 40101);
      assertError(await create('alice', { id: 5004, name: 'X'.repeat(70_000) }), 413, 41301);
    });

    it('lets the owner delete, 204 then 404; the plant is gone from every listing', async () => {
      assert.equal((await create('carol', { id: 6001, name: 'Cactus' })).status, 200);
      const res = await remove('carol', 6001);
      assert.equal(res.status, 204);
      assert.equal(res.text, '');
      assert.ok(!(await names('carol')).includes('Cactus'));
      assert.ok(!(await names('root')).includes('Cactus'));
      assertError(await remove('carol', 6001), 404, 40402);
    });

    it('deletes with an empty JSON body, {} or null, as clients send them, and refuses a body that says more', async () => {
      const withBody = (id: number, body: string) =>
        // With its length: Node's client sends a DELETE's body without one, which reads as the next request.
        rawRequest(
          server.url,
          `/plants/${id}`,
          { ...bearer(tokens.carol!), ...JSON_BODY, 'content-length': Buffer.byteLength(body) },
          'DELETE',
          body,
        );
      for (const [i, body] of ['', '{}', 'null'].entries()) {
        assert.equal((await create('carol', { id: 6040 + i, name: 'Chive' })).status, 200);
        assert.equal((await withBody(6040 + i, body)).status, 204, JSON.stringify(body));
      }
      // A body meant for another operation (a create's, say) deletes nothing.
      assert.equal((await create('carol', { id: 6043, name: 'Chive' })).status, 200);
      for (const body of ['{"id":6043,"name":"Chive"}', '[6043]', '6043']) {
        const refused = assertError(await withBody(6043, body), 400, 40005);
        assert.equal(refused.message, 'the request body is refused: this operation takes none (send no body, or {})');
      }
      assert.equal((await remove('carol', 6043)).status, 204, 'the plant was still there');
    });

    it('runs pipelined writes and reads in the order sent: each request sees the ones before it', async () => {
      const port = Number(new URL(server.url).port);
      const auth = `Host: localhost\r\nAuthorization: Bearer ${tokens.alice}\r\n`;
      for (const id of [6101, 6102, 6103, 6104, 6105]) {
        const body = JSON.stringify({ id, name: `Piped ${id}` });
        const request =
          `POST /plants HTTP/1.1\r\n${auth}Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}` +
          `GET /plants/${id} HTTP/1.1\r\n${auth}\r\n` +
          `GET /plants HTTP/1.1\r\n${auth}\r\n` +
          `DELETE /plants/${id} HTTP/1.1\r\n${auth}\r\n` +
          `GET /plants/${id} HTTP/1.1\r\n${auth}Connection: close\r\n\r\n`;
        const answers = parseResponses(await exchangeRaw(port, request));
        assert.deepEqual(
          answers.map((a) => a.status),
          [200, 200, 200, 204, 404],
          answers.map((a) => a.text).join(' | '),
        );
        assert.ok((JSON.parse(answers[2]!.text) as Array<{ name: string }>).some((p) => p.name === `Piped ${id}`));
      }
      assert.ok(!(await names('alice')).some((name) => name.startsWith('Piped')));
    });

    it('deletes with If-Match only at the version named: 412 with the current ETag otherwise, and the plant stays', async () => {
      const read = (id: number) => rawRequest(server.url, `/plants/${id}`, bearer(tokens.carol!));
      const removeIf = (id: number, ifMatch: string) =>
        rawRequest(server.url, `/plants/${id}`, { ...bearer(tokens.carol!), 'if-match': ifMatch }, 'DELETE');
      assert.equal((await create('carol', { id: 6201, name: 'Yucca' })).status, 200);
      const first = (await read(6201)).headers.etag as string;
      const changed = await rawRequest(
        server.url,
        '/plants/6201',
        { ...bearer(tokens.carol!), 'content-type': 'application/merge-patch+json' },
        'PATCH',
        JSON.stringify({ tag: 'desert' }),
      );
      assert.equal(changed.status, 200, changed.text);
      const current = changed.headers.etag as string;
      assert.notEqual(current, first);

      const stale = assertError(await removeIf(6201, first), 412, 41202);
      assert.match(stale.message, /no longer at the version If-Match names/);
      assertError(await removeIf(6201, `W/${current}`), 412, 41202);
      assertError(await removeIf(6201, 'garbage'), 400, 40003);
      assert.equal((await read(6201)).status, 200, 'the plant stays');
      assert.equal((await removeIf(6201, first)).headers.etag, current);

      assert.equal((await removeIf(6201, `"other", ${current}`)).status, 204);
      assertError(await read(6201), 404, 40402);
      assertError(await removeIf(6201, current), 404, 40402);
      assert.ok(!(await names('carol')).includes('Yucca'));

      assert.equal((await create('carol', { id: 6202, name: 'Agave' })).status, 200);
      assert.equal((await removeIf(6202, '*')).status, 204);
      // Whose plant it is comes first: another's is a 403 or 404 whatever If-Match says.
      assertError(
        await rawRequest(server.url, `/plants/${bobsPublicId}`, { ...bearer(tokens.carol!), 'if-match': '"x"' }, 'DELETE'),
        403,
        40301,
      );
    });

    it('a delete at a version and a change of the plant at once: one of them, never both', async () => {
      for (let id = 6301; id <= 6310; id++) {
        assert.equal((await create('carol', { id, name: 'Racing' })).status, 200);
        const etag = (await rawRequest(server.url, `/plants/${id}`, bearer(tokens.carol!))).headers.etag as string;
        const [changed, deleted] = await Promise.all([
          rawRequest(
            server.url,
            `/plants/${id}`,
            { ...bearer(tokens.carol!), 'content-type': 'application/merge-patch+json' },
            'PATCH',
            JSON.stringify({ name: 'Renamed' }),
          ),
          rawRequest(server.url, `/plants/${id}`, { ...bearer(tokens.carol!), 'if-match': etag }, 'DELETE'),
        ]);
        const outcome = `${changed.status} ${deleted.status}`;
        assert.ok(outcome === '200 412' || outcome === '404 204', `change and delete of plant ${id}: ${outcome}`);
        const after = await rawRequest(server.url, `/plants/${id}`, bearer(tokens.carol!));
        assert.equal(after.status, deleted.status === 204 ? 404 : 200);
      }
    });

    it('answers 403 to a user who sees the plant but does not own it, 404 to one who cannot see it', async () => {
      assertError(await remove('alice', bobsPublicId), 403, 40301);
      assertError(await remove('alice', bobsPrivateId), 404, 40402);
      await store.grants.add(bobsPrivateId, { user: 'alice' });
      assertError(await remove('alice', bobsPrivateId), 403, 40301);
      assertError(await remove('alice', 999_999), 404, 40402);
      assert.ok((await names('bob')).includes('Orchid'));
    });

    it('lets an admin delete any plant, including one added by the CLI with its printed id', async () => {
      const added = await addPlant(store, { name: 'Ivy', owner: 'bob', public: false });
      assert.equal((await remove('root', added.id)).status, 204);
      assert.ok(!(await names('bob')).includes('Ivy'));
    });

    it('answers another method on a plant with 405 and Allow: GET, HEAD, PATCH, DELETE', async () => {
      for (const method of ['PUT', 'POST']) {
        const res = await rawRequest(server.url, `/plants/${bobsPublicId}`, bearer(tokens.alice!), method);
        assertError(res, 405, 40501);
        assert.equal(res.headers.allow, 'GET, HEAD, PATCH, DELETE');
      }
    });

    it('refuses a malformed id with 400', async () => {
      for (const id of ['abc', '0', '-1', '1.5', '1e3', '99999999999999999999']) assertError(await remove('alice', id), 400, 40001);
    });

    it('numbers a plant added without an id after the largest id ever used', async () => {
      assert.equal((await create('alice', { id: 900_000, name: 'Big' })).status, 200);
      const added = await addPlant(store, { name: 'Next', owner: 'alice', public: false });
      assert.equal(added.id, 900_001);
    });
  });
}
