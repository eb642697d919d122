import assert from 'node:assert/strict';
import { once } from 'node:events';
import type { OutgoingHttpHeaders } from 'node:http';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { generateToken } from '../../src/catalogue/tokens.js';
import { loadConfig } from '../../src/config.js';
import type { Plant } from '../../src/http/schemas.js';
import { startServer } from '../../src/server.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { assertError, assertJsonType, INT32_MAX } from '../helpers/assertions.js';
import { bearer, mintToken, rawRequest, seed, startApp, type RawResponse, type RunningApp } from '../helpers/http-app.js';
import { exchangeRaw, parseResponse, parseResponses, type WireResponse } from '../helpers/raw-http.js';

/** One request on an open keep-alive connection, and its answer (which carries Content-Length). */
function askOn(socket: Socket, path: string): Promise<WireResponse> {
  return new Promise((resolve) => {
    let raw = Buffer.alloc(0);
    const onData = (part: Buffer) => {
      raw = Buffer.concat([raw, part]);
      const end = raw.indexOf('\r\n\r\n');
      const length = /content-length: *(\d+)/i.exec(raw.toString('latin1'));
      if (end < 0 || !length || raw.length < end + 4 + Number(length[1])) return;
      socket.off('data', onData);
      resolve(parseResponse(raw, false));
    };
    socket.on('data', onData);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`);
  });
}

// Black-box tests of the HTTP contract over a real socket, once per storage backend.

function assertPlants(res: RawResponse, expected: Plant[]): void {
  assert.equal(res.status, 200, res.text);
  assertJsonType(res.headers);
  assert.ok(Array.isArray(res.body), 'body is a JSON array');
  assert.deepEqual(res.body, expected);
}

const names = (plants: Plant[]): string[] => plants.map((p) => p.name);

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`GET /plants over HTTP [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    const get = (path: string, headers: OutgoingHttpHeaders = {}, method = 'GET') => rawRequest(server.url, path, headers, method);
    const asUser = (user: string, path = '/plants', extra: OutgoingHttpHeaders = {}) => get(path, { ...bearer(tokens[user]!), ...extra });

    // Catalogue order is insertion order, deliberately not alphabetical.
    const ALL: Plant[] = [
      { name: 'Zebra Plant', tag: 'tropical' }, // bob, private
      { name: 'Aloe vera' }, // bob, public
      { name: 'Monstera', tag: 'tropical' }, // bob, shared with alice
      { name: 'Basil', tag: 'herb' }, // alice, private
      { name: 'Fern' }, // bob, shared with group gardeners (alice, carol)
      { name: 'Cactus', tag: 'succulent' }, // carol, public
      { name: 'Orchid' }, // bob, private
      { name: 'Mint', tag: 'herb' }, // bob, public and shared with alice and gardeners: listed once
      { name: 'Ivy' }, // alice, public
      { name: 'Rose', tag: 'flower' }, // bob, shared with carol
      { name: 'Yucca' }, // alice, private
    ];
    const pick = (...wanted: string[]): Plant[] => ALL.filter((p) => wanted.includes(p.name));
    const ALICE = pick('Aloe vera', 'Monstera', 'Basil', 'Fern', 'Cactus', 'Mint', 'Ivy', 'Yucca');
    const CAROL = pick('Aloe vera', 'Fern', 'Cactus', 'Mint', 'Ivy', 'Rose');
    const DAVE = pick('Aloe vera', 'Cactus', 'Mint', 'Ivy');

    before(async () => {
      store = await backend.open();
      ({ tokens } = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'dave' }, { name: 'root', admin: true }],
        groups: [{ name: 'gardeners', members: ['alice', 'carol'] }],
        plants: [
          { name: 'Zebra Plant', tag: 'tropical', owner: 'bob' },
          { name: 'Aloe vera', owner: 'bob', public: true },
          { name: 'Monstera', tag: 'tropical', owner: 'bob', sharedWith: [{ user: 'alice' }] },
          { name: 'Basil', tag: 'herb', owner: 'alice' },
          { name: 'Fern', owner: 'bob', sharedWith: [{ group: 'gardeners' }] },
          { name: 'Cactus', tag: 'succulent', owner: 'carol', public: true },
          { name: 'Orchid', owner: 'bob' },
          { name: 'Mint', tag: 'herb', owner: 'bob', public: true, sharedWith: [{ user: 'alice' }, { group: 'gardeners' }] },
          { name: 'Ivy', owner: 'alice', public: true, sharedWith: [{ user: 'alice' }] },
          { name: 'Rose', tag: 'flower', owner: 'bob', sharedWith: [{ user: 'carol' }] },
          { name: 'Yucca', owner: 'alice' },
        ],
      }));
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    describe('listing', () => {
      it('answers 200 with a JSON array and application/json', async () => {
        const res = await asUser('alice');
        assert.equal(res.status, 200);
        assertJsonType(res.headers);
        assert.ok(Array.isArray(res.body));
        for (const plant of res.body as unknown[]) {
          assert.equal(typeof plant, 'object');
          assert.equal(typeof (plant as Plant).name, 'string');
        }
      });

      it('lists what each user may see, in catalogue order, each plant once', async () => {
        assertPlants(await asUser('alice'), ALICE);
        assertPlants(await asUser('carol'), CAROL);
        assertPlants(await asUser('dave'), DAVE);
        assertPlants(
          await asUser('bob'),
          ALL.filter((p) => !['Basil', 'Yucca'].includes(p.name)),
        );
        assertPlants(await asUser('root'), ALL);
      });

      it('answers requests that arrive together (pipelined in one write) each with its own page, in order', async () => {
        const visible: Record<string, Plant[]> = { alice: ALICE, carol: CAROL, dave: DAVE, root: ALL };
        const asked = ['alice', 'carol', 'dave', 'alice', 'root', 'carol', 'dave'];
        const request = asked
          .map((user, i) => {
            const close = i === asked.length - 1 ? 'Connection: close\r\n' : '';
            return `GET /plants?limit=${i + 1} HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer ${tokens[user]}\r\n${close}\r\n`;
          })
          .join('');
        const answers = parseResponses(await exchangeRaw(Number(new URL(server.url).port), request));
        assert.equal(answers.length, asked.length);
        for (const [i, answer] of answers.entries()) {
          const plants = visible[asked[i]!]!;
          assert.equal(answer.status, 200, answer.text);
          assert.deepEqual(JSON.parse(answer.text), plants.slice(0, i + 1), `answer ${i}, to ${asked[i]}`);
          assert.equal(answer.headers['link'] !== undefined, plants.length > i + 1, `answer ${i}: a Link exactly when more follow`);
        }
      });

      it('keeps catalogue (insertion) order, not alphabetical order', async () => {
        const res = await asUser('root');
        assert.deepEqual(names(res.body as Plant[]), names(ALL));
        assert.notDeepEqual(names(ALL), [...names(ALL)].sort());
      });

      it('leaves `tag` absent, not null or empty, when a plant has none', async () => {
        const res = await asUser('root');
        assert.doesNotMatch(res.text, /"tag"\s*:\s*null/);
        for (const plant of res.body as Array<Record<string, unknown>>) {
          const expected = ALL.find((p) => p.name === plant.name)!;
          if (expected.tag === undefined)
            assert.ok(!Object.hasOwn(plant, 'tag'), `${plant.name} has a tag field: ${JSON.stringify(plant)}`);
          else assert.equal(plant.tag, expected.tag);
          assert.deepEqual(
            Object.keys(plant).filter((k) => k !== 'name' && k !== 'tag'),
            [],
            'no other fields (no id)',
          );
        }
      });

      it('sets Cache-Control: no-store and X-Content-Type-Options: nosniff', async () => {
        const res = await asUser('alice');
        assert.equal(res.status, 200);
        assert.equal(res.headers['cache-control'], 'no-store');
        assert.equal(res.headers['x-content-type-options'], 'nosniff');
      });

      it('refuses unknown query parameters with 400, naming them, rather than ignoring a filter the client believes works', async () => {
        for (const [query, named] of [
          ['foo=bar', ['"foo"']],
          ['offset=3&sort=name&limit=2', ['"offset"', '"sort"']],
          ['tags=herb', ['"tags"']],
          ['LIMIT=1', ['"LIMIT"']],
          ['limit[]=1', ['"limit[]"']],
          ['limit[0]=1', ['"limit[0]"']],
          ['limit%00=1', ['"limit\\u0000"']],
          ['foo=1&limit=x', ['"foo"']],
        ] as const) {
          const { message } = assertError(await asUser('alice', `/plants?${query}`), 400, 40004);
          for (const name of named) assert.ok(message.includes(name), `${query}: ${message} names ${name}`);
          assert.match(message, /takes only "limit", "cursor", "tag" and "fields"/);
        }
      });
    });

    describe('limit', () => {
      it('limit=k is exactly the first k plants of the unlimited listing', async () => {
        for (const [user, full] of [
          ['alice', ALICE],
          ['root', ALL],
          ['dave', DAVE],
        ] as const) {
          for (let k = 0; k <= full.length + 2; k++) {
            const res = await asUser(user, `/plants?limit=${k}`);
            assertPlants(res, full.slice(0, k));
          }
        }
      });

      it('limit=0 gives an empty array', async () => {
        const res = await asUser('root', '/plants?limit=0');
        assertPlants(res, []);
        assert.equal(res.text, '[]');
      });

      it('a limit larger than the listing gives the whole listing', async () => {
        assertPlants(await asUser('alice', '/plants?limit=1000'), ALICE);
        assertPlants(await asUser('root', `/plants?limit=${ALL.length + 1}`), ALL);
      });

      it('accepts the int32 maximum 2147483647', async () => {
        assertPlants(await asUser('alice', `/plants?limit=${INT32_MAX}`), ALICE);
        assertPlants(await asUser('root', `/plants?limit=${INT32_MAX}`), ALL);
      });

      it('accepts leading zeros ("007" is 7)', async () => {
        assertPlants(await asUser('alice', '/plants?limit=007'), ALICE.slice(0, 7));
        assertPlants(await asUser('alice', '/plants?limit=00'), []);
      });

      it('accepts percent-encoded digits (%31 is 1)', async () => {
        assertPlants(await asUser('alice', '/plants?limit=%31'), ALICE.slice(0, 1));
        assertPlants(await asUser('root', '/plants?limit=%31%30'), ALL.slice(0, 10));
      });

      const invalid: Array<[label: string, query: string]> = [
        ['empty (limit=)', 'limit='],
        ['no "=" (limit)', 'limit'],
        ['negative', 'limit=-1'],
        ['raw plus (decodes to a space)', 'limit=+1'],
        ['encoded plus sign', 'limit=%2B1'],
        ['fraction', 'limit=1.5'],
        ['exponent', 'limit=1e3'],
        ['hex', 'limit=0x10'],
        ['leading space', 'limit=%201'],
        ['trailing space', 'limit=1%20'],
        ['int32 max + 1', 'limit=2147483648'],
        ['huge', 'limit=99999999999999999999'],
        ['letters', 'limit=abc'],
        ['fullwidth digit one', 'limit=%EF%BC%91'],
      ];
      for (const [label, query] of invalid) {
        it(`rejects ${label} (?${query}) with 400 invalid_parameter`, async () => {
          const res = await asUser('root', `/plants?${query}`);
          assertError(res, 400, 40001);
          assert.match((res.body as { message: string }).message, /limit/);
        });
      }

      for (const query of ['limit=1&limit=2', 'limit=1&limit=1', 'limit=&limit=', 'limit=5&limit=abc']) {
        it(`rejects a repeated limit (?${query}) with 400 repeated_parameter`, async () => {
          assertError(await asUser('root', `/plants?${query}`), 400, 40002);
        });
      }
    });

    describe('authentication', () => {
      const challenge = (res: RawResponse): string => {
        const value = res.headers['www-authenticate'];
        assert.equal(typeof value, 'string', 'WWW-Authenticate is present');
        assert.match(value as string, /^Bearer( |$)/, `WWW-Authenticate: ${value}`);
        return value as string;
      };

      /** A 401 with the catalogue code, a Bearer challenge, and no trace of the presented credential. */
      function assertUnauthorized(res: RawResponse, code: number, opts: { tokenPresented: boolean; secret?: string }): void {
        assertError(res, 401, code);
        const value = challenge(res);
        if (opts.tokenPresented) assert.match(value, /error="invalid_token"/);
        else assert.doesNotMatch(value, /error=/);
        if (opts.secret !== undefined) {
          assert.ok(!res.text.includes(opts.secret), 'credential echoed in the body');
          assert.ok(!JSON.stringify(res.headers).includes(opts.secret), 'credential echoed in a header');
        }
        assert.equal(res.headers['x-content-type-options'], 'nosniff');
      }

      it('no Authorization header: 401 missing_credentials, bare challenge', async () => {
        assertUnauthorized(await get('/plants'), 40101, { tokenPresented: false });
      });

      it('another scheme (Basic, Token): 401 missing_credentials, bare challenge', async () => {
        const basic = 'dXNlcjpwYXNzd29yZA==';
        assertUnauthorized(await get('/plants', { authorization: `Basic ${basic}` }), 40101, { tokenPresented: false, secret: basic });
        const { token } = generateToken();
        assertUnauthorized(await get('/plants', { authorization: `Token ${token}` }), 40101, { tokenPresented: false, secret: token });
      });

      // "Bearer" with an empty credential: the client did use the Bearer scheme, so the service treats it as a
      // presented-but-malformed token (40102 with error="invalid_token").
      for (const header of ['Bearer', 'Bearer ']) {
        it(`${JSON.stringify(header)} with no token: 401 invalid_token`, async () => {
          assertUnauthorized(await get('/plants', { authorization: header }), 40102, { tokenPresented: true });
        });
      }

      it('unknown well-formed token: 401 invalid_token', async () => {
        const { token } = generateToken();
        assertUnauthorized(await get('/plants', bearer(token)), 40102, { tokenPresented: true, secret: token });
      });

      for (const malformed of ['pst_short', 'not-a-token-at-all', `pst_${'A'.repeat(44)}`, 'pst_' + '!'.repeat(43)]) {
        it(`malformed token ${JSON.stringify(malformed.slice(0, 20))}: 401 invalid_token`, async () => {
          assertUnauthorized(await get('/plants', bearer(malformed)), 40102, { tokenPresented: true, secret: malformed });
        });
      }

      it('a valid token with trailing junk is not accepted', async () => {
        const secret = tokens.alice!;
        assertUnauthorized(await get('/plants', { authorization: `Bearer ${secret} extra` }), 40102, { tokenPresented: true, secret });
      });

      it('revoked token: works, then 401 revoked_token on the next request', async () => {
        const { token, id } = await mintToken(store, 'alice');
        assertPlants(await get('/plants', bearer(token)), ALICE);
        await store.tokens.revoke(id);
        assertUnauthorized(await get('/plants', bearer(token)), 40104, { tokenPresented: true, secret: token });
        // Other tokens of the same user are unaffected.
        assertPlants(await asUser('alice'), ALICE);
      });

      it('expired token: 401 expired_token', async () => {
        const { token } = await mintToken(store, 'alice', { expiresAt: new Date(Date.now() - 60_000) });
        assertUnauthorized(await get('/plants', bearer(token)), 40103, { tokenPresented: true, secret: token });
      });

      it('a token expiring in the future still works', async () => {
        const { token } = await mintToken(store, 'alice', { expiresAt: new Date(Date.now() + 3_600_000) });
        assertPlants(await get('/plants', bearer(token)), ALICE);
      });

      it('the scheme is case-insensitive (bearer, BEARER)', async () => {
        assertPlants(await get('/plants', { authorization: `bearer ${tokens.alice}` }), ALICE);
        assertPlants(await get('/plants', { authorization: `BEARER ${tokens.alice}` }), ALICE);
      });

      it('checks authentication before parameters: bad token + bad limit is 401, not 400', async () => {
        const { token } = generateToken();
        assertUnauthorized(await get('/plants?limit=abc', bearer(token)), 40102, { tokenPresented: true, secret: token });
        assertUnauthorized(await get('/plants?limit=1&limit=2'), 40101, { tokenPresented: false });
        const expired = await mintToken(store, 'alice', { expiresAt: new Date(Date.now() - 1000) });
        assertUnauthorized(await get('/plants?limit=-1', bearer(expired.token)), 40103, { tokenPresented: true, secret: expired.token });
      });

      it('checks authentication before content negotiation', async () => {
        assertUnauthorized(await get('/plants', { accept: 'text/html' }), 40101, { tokenPresented: false });
      });
    });

    describe('other paths, methods and headers', () => {
      it('unknown path: 404 not_found with an Error body', async () => {
        for (const path of ['/nope', '/plants/1/x', '/PLANTS', '/plants/', '/']) {
          assertError(await get(path), 404, 40401);
          assertError(await asUser('alice', path), 404, 40401);
        }
      });

      for (const method of ['PUT', 'PATCH', 'DELETE']) {
        it(`${method} /plants: 405 with Allow: GET, HEAD, POST`, async () => {
          for (const headers of [{}, bearer(tokens.alice!)]) {
            const res = await get('/plants', headers, method);
            assertError(res, 405, 40501);
            assert.equal(res.headers.allow, 'GET, HEAD, POST');
          }
        });
      }

      it('405 or 404 whatever the body: one no route would take (bad JSON, over the size limit) is never read', async () => {
        const json = { 'content-type': 'application/json' };
        for (const [method, path, headers, body, allow] of [
          ['PUT', '/plants', json, '{', 'GET, HEAD, POST'],
          ['PATCH', '/plants', { 'content-type': 'application/merge-patch+json' }, '{', 'GET, HEAD, POST'],
          ['POST', '/plants/1', json, 'x'.repeat(70_000), 'GET, HEAD, PATCH, DELETE'],
        ] as const) {
          const res = await rawRequest(server.url, path, { ...headers, ...bearer(tokens.alice!) }, method, body);
          assertError(res, 405, 40501);
          assert.equal(res.headers.allow, allow);
        }
        assertError(await rawRequest(server.url, '/nope', json, 'POST', '{'), 404, 40401);
      });

      it('HEAD /plants: 200 with no body', async () => {
        const head = await get('/plants', bearer(tokens.alice!), 'HEAD');
        assert.equal(head.status, 200);
        assert.equal(head.text, '');
        assertJsonType(head.headers);
        assert.equal(head.headers['cache-control'], 'no-store');
      });

      it('HEAD /plants without a token: 401 with no body', async () => {
        const head = await get('/plants', {}, 'HEAD');
        assert.equal(head.status, 401);
        assert.equal(head.text, '');
      });

      for (const accept of ['text/html', 'text/html, application/xml;q=0.9', 'image/png', 'application/json;q=0']) {
        it(`Accept: ${accept} gives 406 not_acceptable`, async () => {
          assertError(await asUser('alice', '/plants', { accept }), 406, 40601);
        });
      }

      for (const accept of [
        'application/json',
        '*/*',
        'application/*',
        'text/html, application/json;q=0.5',
        'text/html;q=0.9, */*;q=0.1',
        // Empty list elements are ignored (RFC 9110 §5.6.1): these name no type, as an empty Accept does.
        '',
        ',',
        ' , ,',
        ', application/json',
      ]) {
        it(`Accept: ${accept} gives 200`, async () => {
          assertPlants(await asUser('alice', '/plants', { accept }), ALICE);
        });
      }

      it('Accept: application/json; charset=utf-8 gives 200 (the exact type the service sends)', async () => {
        assertPlants(await asUser('alice', '/plants', { accept: 'application/json; charset=utf-8' }), ALICE);
      });

      it('/healthz and /readyz answer 200 without authentication', async () => {
        for (const path of ['/healthz', '/readyz']) {
          const res = await get(path);
          assert.equal(res.status, 200, `${path}: ${res.text}`);
          assertJsonType(res.headers);
          assert.equal(typeof (res.body as { status: unknown }).status, 'string');
          assert.equal(res.headers['www-authenticate'], undefined);
        }
      });

      const badPaths = ['/plants%', '/%zz', '/plants%E0%A4%A', '/plants/%', '/%C0%80', '/%ff%fe', '/plants%2'];
      for (const path of badPaths) {
        it(`malformed percent-encoding in the path (${path}): 400 Error body, never 5xx`, async () => {
          for (const headers of [{}, bearer(tokens.alice!)]) {
            const res = await get(path, headers);
            assert.ok(res.status < 500, `${path} gave ${res.status}`);
            assertError(res, 400, 40003);
          }
        });
      }

      it('malformed percent-encoding in the query (a key or a value): 400 bad encoding, after authentication', async () => {
        for (const query of ['%=1', '%zz=1&limit=1', 'tag=%zz', 'tag=%FF', 'limit=%zz', 'tag=a%E2%9C', 'limit=1&tag=%']) {
          assertError(await asUser('alice', `/plants?${query}`), 400, 40003);
          assertError(await get(`/plants?${query}`), 401, 40101);
        }
        // Well-formed escapes, a literal % among them, are parameters as ever.
        assert.equal((await asUser('alice', '/plants?tag=%25zz')).status, 200);
        assert.equal((await asUser('alice', '/plants?tag=%E2%9C%93&limit=1')).status, 200);
        assertError(await asUser('alice', '/plants?%7A=1'), 400, 40004);
      });
    });
  });

  describe(`plant names and tags round-trip byte-exact [${backend.name}]`, () => {
    let store: Store;
    let server: RunningApp;
    let token: string;
    const odd: Plant[] = [
      { name: 'He said "hi"', tag: '"quoted"' },
      { name: "O'Brien's; DROP TABLE plants; --", tag: "'; --" },
      { name: '<script>alert(1)</script>', tag: '<b>&amp;</b>' },
      { name: '🌵 Cactus 🌱', tag: '🌿' },
      { name: 'ctrl \u0001\u0002\u001f\u007f end', tag: '\u0001' },
      { name: 'tab\tnew\nline\r\n', tag: '\t' },
      { name: 'back\\slash \\u0041 /slash' },
      { name: 'e\u0301 vs \u00e9 (not normalised)', tag: 'e\u0301' },
      { name: 'line sep \u2028 para sep \u2029' },
      { name: '%41 %zz + & = ?', tag: '%20' },
      { name: '  padded  ', tag: ' ' },
      { name: '\ufeffbom and \u200b zero width' },
      { name: 'x'.repeat(1024), tag: 'y'.repeat(1024) },
      { name: '中文 العربية עברית' },
    ];

    before(async () => {
      store = await backend.open();
      const seeded = await seed(store, { users: [{ name: 'owner' }], plants: odd.map((p) => ({ ...p, owner: 'owner' })) });
      token = seeded.tokens.owner!;
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('returns names and tags exactly as stored', async () => {
      const res = await rawRequest(server.url, '/plants', bearer(token));
      assertPlants(res, odd);
      assert.match(String(res.headers['content-type']), /charset=utf-8/i);
      // The raw JSON text decodes to the same strings, code unit for code unit.
      const parsed = JSON.parse(res.text) as Plant[];
      for (const [i, plant] of parsed.entries()) {
        assert.equal(plant.name.length, odd[i]!.name.length);
        assert.equal(Buffer.from(plant.name, 'utf8').toString('hex'), Buffer.from(odd[i]!.name, 'utf8').toString('hex'));
      }
    });

    it('returns them exactly under a limit too', async () => {
      assertPlants(await rawRequest(server.url, '/plants?limit=5', bearer(token)), odd.slice(0, 5));
    });
  });

  describe(`readiness when the database is gone [${backend.name}]`, () => {
    let store: Store;
    let server: RunningApp;
    before(async () => {
      store = await backend.open();
      server = await startApp(store);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('/readyz is 200, then 503 with an Error body after the store is closed; /healthz stays 200', async () => {
      assert.equal((await rawRequest(server.url, '/readyz')).status, 200);
      await store.close();
      const res = await rawRequest(server.url, '/readyz');
      assertError(res, 503, 50301);
      assert.equal(res.headers['cache-control'], 'no-store');
      assert.equal((await rawRequest(server.url, '/healthz')).status, 200);
    });
  });

  describe(`readiness while the server shuts down [${backend.name}]`, () => {
    it('/readyz is 503 with Retry-After on a connection still open once shutdown begins', async () => {
      const db = await backend.freshDb();
      const server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent' }));
      const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
      let stopping: Promise<void> | undefined;
      try {
        await once(socket, 'connect');
        // The same kept-alive connection before and after: shutdown keeps an idle one open a moment.
        assert.equal((await askOn(socket, '/readyz')).status, 200);
        stopping = server.stop();
        const res = await askOn(socket, '/readyz');
        assert.equal(res.status, 503);
        assert.equal(res.headers['retry-after'], '1');
        assert.equal((JSON.parse(res.text) as { error: number }).error, 50301);
      } finally {
        socket.destroy();
        await (stopping ?? server.stop());
      }
    });
  });

  describe(`draining on shutdown [${backend.name}]`, () => {
    it('answers a request that arrived before shutdown and outlasts the linger, then closes its connection and stops', async () => {
      const db = await backend.freshDb();
      const server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent', shutdownGraceSeconds: 2 }));
      await server.store.users.add('alice', false);
      const { token } = await mintToken(server.store, 'alice');
      const socket = connect(Number(new URL(server.url).port), '127.0.0.1');
      let stopping: Promise<void> | undefined;
      try {
        await once(socket, 'connect');
        const closed = once(socket, 'close').then(() => true);
        const body = JSON.stringify({ id: 4242, name: 'Slow' });
        const answered = new Promise<Buffer>((resolve) => {
          let raw = Buffer.alloc(0);
          socket.on('data', (part: Buffer) => {
            raw = Buffer.concat([raw, part]);
            if (raw.includes('"Slow"')) resolve(raw);
          });
        });
        socket.write(
          `POST /plants HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer ${token}\r\n` +
            `Content-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body.slice(0, 5)}`,
        );
        await new Promise((resolve) => setTimeout(resolve, 100));
        stopping = server.stop();
        // The rest of the body after the linger (a quarter of the grace, 500 ms): the connection is busy until then.
        await new Promise((resolve) => setTimeout(resolve, 800));
        socket.write(body.slice(5));
        assert.match((await answered).toString('latin1'), /^HTTP\/1\.1 200 /);
        // Answered and idle, the connection is closed (it was kept alive until its timeout, past the grace).
        const soon = new Promise<boolean>((resolve) => setTimeout(resolve, 1_500, false));
        assert.equal(await Promise.race([closed, soon]), true, 'the answered connection stayed open');
        await stopping;
      } finally {
        socket.destroy();
        await (stopping ?? server.stop());
      }
    });
  });

  describe(`logs never contain tokens [${backend.name}]`, () => {
    let store: Store;
    let server: RunningApp;

    before(async () => {
      store = await backend.open();
      server = await startApp(store, { captureLogs: true, logLevel: 'info', logRequests: true });
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    it('over a run of good and bad requests, no token string is logged', async () => {
      const { tokens } = await seed(store, {
        users: [{ name: 'alice' }, { name: 'root', admin: true }],
        plants: [{ name: 'Fern', owner: 'alice' }],
      });
      const revoked = await mintToken(store, 'alice');
      await store.tokens.revoke(revoked.id);
      const expired = await mintToken(store, 'alice', { expiresAt: new Date(Date.now() - 1000) });
      const unknown = generateToken().token;
      const malformed = 'pst_this-is-not-a-real-token-but-is-secret';
      const secrets = [tokens.alice!, tokens.root!, revoked.token, expired.token, unknown, malformed];

      const calls: Array<[string, OutgoingHttpHeaders, string?]> = [
        ['/plants', bearer(tokens.alice!)],
        ['/plants?limit=1', { authorization: `bearer ${tokens.root}` }],
        ['/plants?limit=abc', bearer(tokens.alice!)],
        ['/plants?limit=1&limit=2', bearer(tokens.root!)],
        ['/plants', bearer(revoked.token)],
        ['/plants', bearer(expired.token)],
        ['/plants', bearer(unknown)],
        ['/plants', bearer(malformed)],
        ['/plants', { authorization: `Bearer ${tokens.alice} trailing` }],
        ['/plants', { ...bearer(tokens.alice!), accept: 'text/html' }],
        ['/nope', bearer(tokens.alice!)],
        ['/plants%', bearer(tokens.alice!)],
        ['/plants', bearer(tokens.alice!), 'POST'],
        ['/plants/999', bearer(tokens.root!), 'DELETE'],
        ['/plants', bearer(tokens.alice!), 'PUT'],
        ['/plants', bearer(tokens.alice!), 'HEAD'],
        ['/readyz', bearer(tokens.alice!)],
      ];
      const statuses: number[] = [];
      for (const [path, headers, method] of calls) statuses.push((await rawRequest(server.url, path, headers, method)).status);
      assert.deepEqual(statuses, [200, 200, 400, 400, 401, 401, 401, 401, 401, 406, 404, 400, 400, 404, 405, 200, 200]);

      // Pino writes asynchronously in places; give it a moment, then check the logs are real and clean.
      await new Promise((resolve) => setTimeout(resolve, 50));
      const logs = server.logs();
      const lines = logs.split('\n').filter((l) => l.trim() !== '');
      assert.ok(lines.length >= calls.length, `expected request log lines, got ${lines.length}`);
      for (const line of lines) JSON.parse(line);
      assert.match(logs, /"statusCode":401/, 'request completion lines are logged');
      assert.match(logs, /"url":"\/plants\?limit=abc"/, 'request lines carry the URL');
      assert.match(logs, /"reqId":"req-\d+"/, 'request lines carry the request id');
      for (const secret of secrets) {
        assert.ok(!logs.includes(secret), `a token appears in the logs: ${secret.slice(0, 8)}…`);
        // Nor its base64url body without the prefix.
        assert.ok(!logs.includes(secret.slice(4)), 'a token body appears in the logs');
      }
    });
  });
}
