import assert from 'node:assert/strict';
import type { OutgoingHttpHeaders } from 'node:http';
import { after, before, describe, it } from 'node:test';
import fc from 'fast-check';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RunningApp } from '../helpers/http-app.js';
import { plainSql } from '../helpers/plain-sql.js';

// The access of one plant over a real socket, once per backend: its owner makes a plant created over HTTP public,
// shares it with a user and a group, lists who has access and takes it back; each step is in the affected users'
// next GET /plants. Every answer is checked against the served document by rawRequest.

after(() => cleanupBackends());

const JSON_BODY = { 'content-type': 'application/json' };

for (const backend of BACKENDS) {
  describe(`plant access over HTTP [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    let bobsSharedId: number;
    const as = (user: string, headers: OutgoingHttpHeaders = {}) => ({ ...bearer(tokens[user]!), ...headers });
    const access = (user: string, id: number) => rawRequest(server.url, `/plants/${id}/access`, as(user));
    const replace = (user: string, id: number, body: unknown, headers: OutgoingHttpHeaders = {}) =>
      rawRequest(server.url, `/plants/${id}/access`, as(user, { ...JSON_BODY, ...headers }), 'PUT', JSON.stringify(body));
    const grantee = (user: string, id: number, method: 'PUT' | 'DELETE', path: string, headers: OutgoingHttpHeaders = {}) =>
      rawRequest(server.url, `/plants/${id}/access/${path}`, as(user, headers), method);
    const names = async (user: string) => {
      const res = await rawRequest(server.url, '/plants', bearer(tokens[user]!));
      assert.equal(res.status, 200, res.text);
      return (res.body as Array<{ name: string }>).map((p) => p.name);
    };
    const create = async (user: string, id: number, name: string) => {
      const res = await rawRequest(server.url, '/plants', as(user, JSON_BODY), 'POST', JSON.stringify({ id, name }));
      assert.equal(res.status, 200, res.text);
    };

    before(async () => {
      db = await backend.freshDb();
      store = await openStore({ db });
      const seeded = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'dave' }, { name: 'root', admin: true }],
        groups: [{ name: 'friends', members: ['carol'] }, { name: 'empty' }],
        plants: [{ name: 'Ivy', owner: 'bob', sharedWith: [{ user: 'alice' }] }],
      });
      tokens = seeded.tokens;
      bobsSharedId = seeded.plants[0]!.id;
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('lets the owner of a plant created over HTTP make it public, share it, list who has access and take it back', async () => {
      await create('alice', 7001, 'Fern');
      let res = await access('alice', 7001);
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, { public: false, users: [], groups: [] });
      assert.ok(!(await names('dave')).includes('Fern'));

      res = await replace('alice', 7001, { public: true, users: [], groups: [] });
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, { public: true, users: [], groups: [] });
      assert.ok((await names('dave')).includes('Fern'), 'public: every user sees it at once');

      res = await replace('alice', 7001, { public: false, users: [], groups: [] });
      assert.ok(!(await names('dave')).includes('Fern'), 'private again');

      res = await grantee('alice', 7001, 'PUT', 'users/dave');
      assert.equal(res.status, 204, res.text);
      assert.ok((await names('dave')).includes('Fern'), 'shared with dave');
      res = await grantee('alice', 7001, 'PUT', 'groups/friends');
      assert.equal(res.status, 204, res.text);
      assert.ok((await names('carol')).includes('Fern'), 'shared with a group carol is in');

      res = await access('alice', 7001);
      assert.deepEqual(res.body, { public: false, users: ['dave'], groups: ['friends'] });

      res = await grantee('alice', 7001, 'DELETE', 'users/dave');
      assert.equal(res.status, 204, res.text);
      assert.ok(!(await names('dave')).includes('Fern'), 'no longer shared with dave');
      res = await grantee('alice', 7001, 'DELETE', 'groups/friends');
      assert.ok(!(await names('carol')).includes('Fern'), 'no longer shared with friends');
      assert.deepEqual((await access('alice', 7001)).body, { public: false, users: [], groups: [] });
    });

    it('is idempotent: sharing or unsharing again, or putting the same access, changes nothing and answers the same', async () => {
      await create('alice', 7002, 'Moss');
      const first = await grantee('alice', 7002, 'PUT', 'users/bob');
      const again = await grantee('alice', 7002, 'PUT', 'users/bob');
      assert.equal(again.status, 204);
      assert.equal(again.headers.etag, first.headers.etag);
      const body = { public: false, users: ['bob', 'carol'], groups: ['empty'] };
      const put1 = await replace('alice', 7002, body);
      const put2 = await replace('alice', 7002, { ...body, users: ['carol', 'bob'] });
      assert.deepEqual(put2.body, body, 'names come back sorted');
      assert.equal(put2.headers.etag, put1.headers.etag);
      assert.equal((await grantee('alice', 7002, 'DELETE', 'users/dave')).status, 204, 'never shared with dave: nothing to do');
      assert.deepEqual((await access('alice', 7002)).body, body);
    });

    it('lists names in code-point order, as UTF-8 bytes and the databases sort them, whichever way they were given', async () => {
      // In UTF-16 an astral character (a surrogate pair, 0xD800-0xDFFF) sorts before U+E000-U+FFFF; by code point after.
      const names = ['\u{1F600}', '\uFFFC', '\u{10000}', '\uE000', 'z'];
      const sorted = ['z', '\uE000', '\uFFFC', '\u{10000}', '\u{1F600}'];
      const utf8Order = (a: string, b: string) => Buffer.compare(Buffer.from(a), Buffer.from(b));
      assert.deepEqual(names.toSorted(utf8Order), sorted);
      for (const name of names) {
        await store.users.add(name, false);
        await store.groups.add(name);
      }
      await create('alice', 7017, 'Yarrow');
      const put = await replace('alice', 7017, { public: false, users: names, groups: names.toReversed() });
      assert.equal(put.status, 200, put.text);
      assert.deepEqual(put.body, { public: false, users: sorted, groups: sorted });
      assert.deepEqual((await access('alice', 7017)).body, put.body, 'read back from the database');
      // Shared one at a time, in another order: the same access, so the same version.
      await replace('alice', 7017, { public: false, users: [], groups: [] });
      for (const name of names.toReversed()) {
        assert.equal((await grantee('alice', 7017, 'PUT', `users/${encodeURIComponent(name)}`)).status, 204);
        assert.equal((await grantee('alice', 7017, 'PUT', `groups/${encodeURIComponent(name)}`)).status, 204);
      }
      const read = await access('alice', 7017);
      assert.deepEqual(read.body, put.body);
      assert.equal(read.headers.etag, put.headers.etag);
    });

    it('takes an empty JSON body on a share or unshare, which take none, as clients send one, and refuses one that says more', async () => {
      await create('alice', 7016, 'Reed');
      for (const method of ['PUT', 'DELETE'] as const) {
        for (const body of ['', '{}', 'null', ' { } ']) {
          // With its length: Node's client sends a DELETE's body without one, which reads as the next request.
          const headers = as('alice', { ...JSON_BODY, 'content-length': Buffer.byteLength(body) });
          const res = await rawRequest(server.url, '/plants/7016/access/users/bob', headers, method, body);
          assert.equal(res.status, 204, `${method} ${JSON.stringify(body)}: ${res.text}`);
        }
      }
      assert.deepEqual((await access('alice', 7016)).body, { public: false, users: [], groups: [] });
      // The whole access sent to one grantee's operation: meant for another, so nothing is done.
      for (const body of ['{"public":true,"users":["bob"],"groups":[]}', '[]', '"bob"', '0']) {
        const refused = await rawRequest(server.url, '/plants/7016/access/users/bob', as('alice', JSON_BODY), 'PUT', body);
        assert.equal(
          assertError(refused, 400, 40005).message,
          'the request body is refused: this operation takes none (send no body, or {})',
        );
      }
      assert.deepEqual((await access('alice', 7016)).body, { public: false, users: [], groups: [] });
    });

    it('answers 403 to a user who sees the plant but does not own it, and 404 to one who does not see it, or for no plant', async () => {
      // alice sees Ivy (shared with her); dave does not.
      assertError(await access('alice', bobsSharedId), 403, 40301);
      assertError(await replace('alice', bobsSharedId, { public: true, users: [], groups: [] }), 403, 40301);
      assertError(await grantee('alice', bobsSharedId, 'PUT', 'users/alice'), 403, 40301);
      assertError(await grantee('alice', bobsSharedId, 'DELETE', 'users/alice'), 403, 40301);
      assertError(await access('dave', bobsSharedId), 404, 40402);
      assertError(await replace('dave', bobsSharedId, { public: true, users: [], groups: [] }), 404, 40402);
      assertError(await grantee('dave', bobsSharedId, 'PUT', 'users/dave'), 404, 40402);
      assertError(await grantee('dave', bobsSharedId, 'DELETE', 'groups/friends'), 404, 40402);
      assertError(await access('bob', 999_999), 404, 40402);
      // A stranger's refusal says nothing of names: the plant is refused first.
      assertError(await grantee('dave', bobsSharedId, 'PUT', 'users/nobody'), 404, 40402);
      // A name no user or group can have is a malformed parameter, refused as such whoever asks, for any plant.
      for (const [user, id] of [
        ['dave', bobsSharedId],
        ['alice', bobsSharedId],
        ['bob', 999_999],
      ] as const) {
        const { message } = assertError(await grantee(user, id, 'PUT', `users/${'u'.repeat(1025)}`), 400, 40001);
        assert.equal(message, 'path parameter "name" must not have more than 1024 characters');
      }
      assert.ok(!(await names('dave')).includes('Ivy'), 'nothing changed');
      assert.deepEqual((await access('bob', bobsSharedId)).body, { public: false, users: ['alice'], groups: [] });
    });

    it('lets an admin read and change the access of any plant', async () => {
      assert.deepEqual((await access('root', bobsSharedId)).body, { public: false, users: ['alice'], groups: [] });
      assert.equal((await grantee('root', bobsSharedId, 'PUT', 'users/dave')).status, 204);
      assert.ok((await names('dave')).includes('Ivy'));
      assert.equal((await grantee('root', bobsSharedId, 'DELETE', 'users/dave')).status, 204);
      assert.ok(!(await names('dave')).includes('Ivy'));
    });

    it('refuses names of no user or group, naming them, and changes nothing', async () => {
      await create('alice', 7003, 'Sage');
      const user = assertError(await grantee('alice', 7003, 'PUT', 'users/nobody'), 404, 40403);
      assert.match(user.message, /no user named "nobody"/);
      assertError(await grantee('alice', 7003, 'PUT', 'groups/nobody'), 404, 40404);
      assertError(await grantee('alice', 7003, 'DELETE', 'users/nobody'), 404, 40403);
      // Refused as without a precondition, whatever version one names (RFC 9110 §13.2.1).
      assertError(await grantee('alice', 7003, 'PUT', 'users/nobody', { 'if-match': '"stale"' }), 404, 40403);
      assertError(await replace('alice', 7003, { public: true, users: ['zed'], groups: [] }, { 'if-match': '"stale"' }), 422, 42201);
      const body = assertError(await replace('alice', 7003, { public: true, users: ['bob', 'zed'], groups: ['ghosts'] }), 422, 42201);
      // The schema's most names fit the body limit when they are of a usual length: read, then found unknown.
      const many = Array.from({ length: 1000 }, (_, i) => `${'n'.repeat(66)}${String(i).padStart(4, '0')}`);
      const unknown = assertError(await replace('alice', 7003, { public: false, users: many, groups: many }), 422, 42201);
      assert.match(unknown.message, /^no user named "n+0000"; .*; and 1980 more that nobody has$/);
      assert.ok(unknown.message.length < 2000, `${unknown.message.length} characters`);
      assert.equal(body.message, 'no user named "zed"; no group named "ghosts"');
      assert.deepEqual((await access('alice', 7003)).body, { public: false, users: [], groups: [] });
      // Names no user can have are refused before any lookup; a name is matched exactly (no case folding).
      assertError(await grantee('alice', 7003, 'PUT', 'users/a%00b'), 400, 40001);
      assertError(await grantee('alice', 7003, 'PUT', 'users/Bob'), 404, 40403);
      // A name as long as names may be is a name, not an unknown path.
      assertError(await grantee('alice', 7003, 'PUT', `users/${'n'.repeat(1024)}`), 404, 40403);
      assertError(await replace('alice', 7003, { public: false, users: [' bob'], groups: [] }), 400, 40005);
    });

    it('takes an access of hundreds of long names, its checks run in turns of their own, as any other', async () => {
      // Over 64 KiB, a body goes on to its checks in a later turn of the event loop than its parse, and its names to
      // their lookups in another (json-bodies.ts): the answers must be those of a small body.
      const long = Array.from({ length: 300 }, (_, i) => `${'l'.repeat(296)}${String(i).padStart(4, '0')}`);
      for (const name of long) await store.users.add(name, false);
      await create('alice', 7020, 'Yarrow');
      const body = { public: false, users: long, groups: ['friends'] };
      assert.ok(JSON.stringify(body).length > 64 * 1024);
      const put = await replace('alice', 7020, body);
      assert.equal(put.status, 200, put.text);
      assert.deepEqual(put.body, body);
      assert.deepEqual((await access('alice', 7020)).body, body);
      assert.ok((await names('carol')).includes('Yarrow'));
      const unknown = assertError(await replace('alice', 7020, { ...body, users: [...long.slice(1), 'zed'] }), 422, 42201);
      assert.equal(unknown.message, 'no user named "zed"');
      const malformed = assertError(await replace('alice', 7020, { ...body, users: [...long, ' zed'] }), 400, 40005);
      assert.equal(malformed.message, 'user name must not start or end with white space');
      assert.deepEqual((await access('alice', 7020)).body, body);
    });

    it('gives no new user or group the name "." or "..", and still shares with one named so before, over a raw request', async () => {
      await assert.rejects(store.users.add('..', false), /^DomainError: user name must not be "\.\.": a URL path cannot carry it/);
      await assert.rejects(store.groups.add('.'), /^DomainError: group name must not be "\.": a URL path cannot carry it/);
      // Stored before the rule: a raw request carries the name as it is (fetch would drop the segment).
      await plainSql(db, `INSERT INTO users (name, is_admin, created_at, name_key) VALUES ('.', 0, 0, '.'), ('..', 0, 0, '..')`);
      await plainSql(db, `INSERT INTO groups (name, created_at) VALUES ('.', 0), ('..', 0)`);
      await create('alice', 7018, 'Wort');
      const paths = ['users/.', 'users/%2E%2E', 'groups/%2e', 'groups/..'];
      for (const path of paths) assert.equal((await grantee('alice', 7018, 'PUT', path)).status, 204, path);
      assert.deepEqual((await access('alice', 7018)).body, { public: false, users: ['.', '..'], groups: ['.', '..'] });
      for (const path of paths) assert.equal((await grantee('alice', 7018, 'DELETE', path)).status, 204, path);
      assert.deepEqual((await access('alice', 7018)).body, { public: false, users: [], groups: [] });
    });

    it('refuses a body that is not a PlantAccess', async () => {
      await create('alice', 7004, 'Rue');
      assertError(await replace('alice', 7004, { public: false, users: [] }), 400, 40005);
      assertError(await replace('alice', 7004, { public: false, users: ['bob', 'bob'], groups: [] }), 400, 40005);
      assertError(await replace('alice', 7004, { public: 'yes', users: [], groups: [] }), 400, 40005);
      assertError(await replace('alice', 7004, { public: false, users: [], groups: [], owner: 'bob' }), 400, 40005);
      assertError(await access('alice', 0), 400, 40001);
    });

    it('bounds the work of a body of many names: over 1,000 refused by their count, a repeat named', async () => {
      await create('alice', 7006, 'Sorrel');
      // 16,000 repeats of one name fit in 64 KiB; reporting every repeat once cost seconds of the event loop.
      const counted = assertError(await replace('alice', 7006, { public: false, users: Array(16_000).fill('a'), groups: [] }), 400, 40005);
      assert.equal(counted.message, 'field "users" must not have more than 1000 items (it has 16000)');
      const names = [...Array.from({ length: 999 }, (_, i) => `u${i}`), 'u7'];
      const repeated = assertError(await replace('alice', 7006, { public: false, users: [], groups: names }), 400, 40005);
      assert.equal(repeated.message, 'field "groups" must not have duplicate items: "u7" is given more than once');
      // Arrays nested where names belong: hashing them for repeats overflowed the stack (500) at 5,000 deep. A body
      // is refused past four levels before it is parsed; within them the schema names what is wrong.
      const nested = (depth: number) => `{"public":false,"users":${'['.repeat(depth)}${']'.repeat(depth)},"groups":[]}`;
      const deep = await rawRequest(server.url, '/plants/7006/access', as('alice', JSON_BODY), 'PUT', nested(5000));
      assert.equal(assertError(deep, 400, 40005).message, 'the request body nests deeper than 4 levels, more than any operation takes');
      const shallow = await rawRequest(server.url, '/plants/7006/access', as('alice', JSON_BODY), 'PUT', nested(3));
      assert.equal(assertError(shallow, 400, 40005).message, 'field "users.0" must be string');
      // Brackets inside names are text, past escaped quotes and backslashes; those after a name's end are not.
      const tricky = ['a"[[[[[[', 'b\\"{{{{{{\\'];
      const quoted = JSON.stringify({ public: false, users: tricky, groups: [] });
      const inNames = await rawRequest(server.url, '/plants/7006/access', as('alice', JSON_BODY), 'PUT', quoted);
      assert.equal(assertError(inNames, 422, 42201).message, tricky.map((name) => `no user named "${name}"`).join('; '));
      const afterName = `{"public":false,"users":[${JSON.stringify('a\\')},[[[[[]]]]]],"groups":[]}`;
      const nestedAfter = await rawRequest(server.url, '/plants/7006/access', as('alice', JSON_BODY), 'PUT', afterName);
      assert.equal(
        assertError(nestedAfter, 400, 40005).message,
        'the request body nests deeper than 4 levels, more than any operation takes',
      );
    });

    it('refuses a body for its nesting exactly when it nests past four levels, whatever its strings hold', async () => {
      await create('alice', 7008, 'Tansy');
      const depth = (value: unknown): number =>
        value !== null && typeof value === 'object' ? 1 + Math.max(0, ...Object.values(value).map(depth)) : 0;
      // Strings made of the characters the scan must read past: quotes, backslashes, brackets and separators.
      const unit = fc.constantFrom('"', '\\', '[', ']', '{', '}', ',', ':', 'a');
      await fc.assert(
        fc.asyncProperty(fc.jsonValue({ maxDepth: 5, stringUnit: unit }), async (value) => {
          const body = JSON.stringify({ public: false, users: [value], groups: [] });
          const answer = await rawRequest(server.url, '/plants/7008/access', as('alice', JSON_BODY), 'PUT', body);
          const refused = /nests deeper/.test(String((answer.body as { message?: string }).message));
          assert.equal(refused, 2 + depth(value) > 4, body);
        }),
        { numRuns: 150 },
      );
    });

    it("names in each operation's documented 400 the codes it answers for the mistakes it lists, and no other", async () => {
      await create('alice', 7019, 'Vetch');
      const doc = (await rawRequest(server.url, '/openapi.json')).body as {
        components: { schemas: { Error: { description: string } } };
        paths: Record<string, Record<string, { responses: Record<string, { description: string }> }>>;
      };
      const empty = JSON.stringify({ public: false, users: [], groups: [] });
      // The malformed requests every access operation can get, at `path` of plant 7019; `body` is a good one, if any.
      const mistakes = (method: string, path: (id: string) => string, body?: string) => {
        const send =
          (target: string, headers: OutgoingHttpHeaders = {}, text = body) =>
          () =>
            rawRequest(server.url, target, as('alice', body === undefined ? headers : { ...JSON_BODY, ...headers }), method, text);
        return [
          send(path('0')),
          send(path('x')),
          send(`${path('7019')}?x=1`),
          send(`${path('7019')}?x=%zz`),
          send(path('7019'), { 'if-match': 'v1' }),
          send(path('7019'), { 'if-none-match': 'v1' }),
          ...(body === undefined ? [] : [send(path('7019'), {}, '{"public":false}'), send(path('7019'), {}, '{not json')]),
        ];
      };
      const operations: Array<[string, string, Array<() => Promise<{ status: number; text: string }>>]> = [
        ['get', '/plants/{id}/access', mistakes('GET', (id) => `/plants/${id}/access`)],
        ['put', '/plants/{id}/access', mistakes('PUT', (id) => `/plants/${id}/access`, empty)],
      ];
      for (const what of ['users', 'groups']) {
        for (const method of ['PUT', 'DELETE']) {
          const path = (id: string) => `/plants/${id}/access/${what}/bob`;
          const badName = () => rawRequest(server.url, `/plants/7019/access/${what}/a%00b`, as('alice'), method);
          const aBody = () =>
            rawRequest(
              server.url,
              `/plants/7019/access/${what}/bob`,
              as('alice', { ...JSON_BODY, 'content-length': 15 }),
              method,
              '{"public":true}',
            );
          operations.push([method.toLowerCase(), `/plants/{id}/access/${what}/{name}`, [...mistakes(method, path), badName, aBody]]);
        }
      }
      for (const [method, path, requests] of operations) {
        const answered = new Set<number>();
        for (const request of requests) {
          const res = await request();
          assert.equal(res.status, 400, `${method} ${path}: ${res.text}`);
          answered.add((JSON.parse(res.text) as { error: number }).error);
        }
        const documented = doc.paths[path]![method]!.responses['400']!.description;
        const named = new Set([...documented.matchAll(/\bcode (\d{5})\b/g)].map((m) => Number(m[1])));
        assert.deepEqual([...named].sort(), [...answered].sort(), `${method.toUpperCase()} ${path}: ${documented}`);
      }
      // An invalid id or name is a path parameter's: the catalogue says 40001 is for those too.
      assert.match(doc.components.schemas.Error.description, /\| 40001 \| 400 \| `invalid_parameter` \| A query or path parameter /);
    });

    it('changes the access only while it is at the version If-Match names (412 otherwise, with the current ETag)', async () => {
      await create('alice', 7005, 'Thyme');
      const read = await access('alice', 7005);
      const tag = read.headers.etag!;
      assert.match(tag, /^"[A-Za-z0-9_-]+"$/);
      // Another editor changes it first.
      assert.equal((await grantee('alice', 7005, 'PUT', 'users/bob')).status, 204);
      const stale = await replace('alice', 7005, { public: true, users: [], groups: [] }, { 'if-match': tag });
      assert.match(assertError(stale, 412, 41201).message, /read it again \(GET \/plants\/7005\/access, or this answer's ETag\)/);
      const current = stale.headers.etag!;
      assert.notEqual(current, tag);
      assert.deepEqual((await access('alice', 7005)).body, { public: false, users: ['bob'], groups: [] }, 'nothing changed');
      assertError(await grantee('alice', 7005, 'DELETE', 'users/bob', { 'if-match': tag }), 412, 41201);
      // A weak tag never matches (strong comparison); the current tag, one of a list, or * does.
      assertError(await grantee('alice', 7005, 'PUT', 'users/carol', { 'if-match': `W/${current}` }), 412, 41201);
      const ok = await replace('alice', 7005, { public: true, users: ['bob'], groups: [] }, { 'if-match': `"x", ${current}` });
      assert.equal(ok.status, 200, ok.text);
      assert.equal((await grantee('alice', 7005, 'PUT', 'users/carol', { 'if-match': '*' })).status, 204);
      // Not entity tags at all: the request is malformed (400), not a precondition that failed.
      for (const malformed of ['v1', current.slice(1, -1), `${current} x`, 'W/abc', '"a""b"']) {
        const refused = assertError(await grantee('alice', 7005, 'PUT', 'users/dave', { 'if-match': malformed }), 400, 40003);
        assert.match(refused.message, /^If-Match must be \* or entity tags in double quotes/, malformed);
      }
      assert.equal((await access('alice', 7005)).headers.etag, (await access('root', 7005)).headers.etag, 'one version whoever reads');
    });

    it('answers a read 304 on If-None-Match and 412 on If-Match, and refuses a change If-None-Match names', async () => {
      await create('alice', 7007, 'Sage');
      const tag = (await access('alice', 7007)).headers.etag!;
      const read = (headers: OutgoingHttpHeaders) => rawRequest(server.url, '/plants/7007/access', as('alice', headers));
      const unchanged = await read({ 'if-none-match': tag });
      assert.equal(unchanged.status, 304);
      assert.equal(unchanged.headers.etag, tag);
      assert.equal((await read({ 'if-none-match': '"elsewhen"' })).status, 200);
      assert.equal((await read({ 'if-match': tag })).status, 200);
      assertError(await read({ 'if-match': '"elsewhen"' }), 412, 41201);
      // Another user sees no plant, whatever the preconditions.
      assertError(await rawRequest(server.url, '/plants/7007/access', as('bob', { 'if-none-match': tag })), 404, 40402);
      // A write while If-None-Match names the version, or `*`: 412 and nothing changes.
      assertError(await replace('alice', 7007, { public: true, users: [], groups: [] }, { 'if-none-match': '*' }), 412, 41201);
      const named = assertError(await grantee('alice', 7007, 'PUT', 'users/bob', { 'if-none-match': tag }), 412, 41201);
      assert.match(named.message, /If-None-Match/);
      assertError(await grantee('alice', 7007, 'PUT', 'groups/friends', { 'if-none-match': '*' }), 412, 41201);
      assert.equal((await access('alice', 7007)).headers.etag, tag, 'nothing changed');
      assert.equal((await grantee('alice', 7007, 'PUT', 'users/bob', { 'if-none-match': '"elsewhen"' })).status, 204);
    });

    it('is refused without a token, as every plant operation is', async () => {
      assertError(await rawRequest(server.url, `/plants/${bobsSharedId}/access`), 401, 40101);
      assertError(await rawRequest(server.url, `/plants/${bobsSharedId}/access/users/alice`, {}, 'PUT'), 401, 40101);
    });
  });
}
