import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import type { OutgoingHttpHeaders } from 'node:http';
import { existsSync, readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { loadConfig } from '../../src/config.js';
import type { Store } from '../../src/store/store.js';
import { openStore } from '../../src/store/open-store.js';
import { assertError } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, seed, startApp, type RawResponse, type RunningApp, addPlant } from '../helpers/http-app.js';
import { AUDIENCE, ISSUER, mintJwt, SECRET, secretKey } from '../helpers/jwt.js';
import { adminQuery } from '../helpers/postgres.js';
import { runCli } from '../helpers/processes.js';
import { sendRaw } from '../helpers/raw-http.js';

// "Nothing leaks": tokens at rest, secrets in logs, caching and sniffing of answers, cross-origin reads, and
// hostile plant names on their way from the CLI to a browser.

after(() => cleanupBackends());

const JWT_ENV = { PLANTSTORE_JWT_SECRET: SECRET, PLANTSTORE_JWT_ISSUER: ISSUER, PLANTSTORE_JWT_AUDIENCE: AUDIENCE };

/** Every stored row of every table, as text, read around the Store interface. */
async function dumpDatabase(db: string): Promise<string> {
  if (db.startsWith('postgres')) {
    const schema = new URL(db).searchParams.get('schema')!;
    const tables = await adminQuery<{ table_name: string }>('SELECT table_name FROM information_schema.tables WHERE table_schema = $1', [
      schema,
    ]);
    assert.ok(tables.length >= 5, `tables of ${schema}`);
    const rows: string[] = [];
    for (const { table_name } of tables) {
      for (const row of await adminQuery<{ j: string }>(`SELECT row_to_json(t)::text AS j FROM "${schema}"."${table_name}" t`))
        rows.push(row.j);
    }
    return rows.join('\n');
  }
  const sqlite = new Database(db, { readonly: true });
  try {
    const tables = sqlite.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all() as Array<{ name: string }>;
    const rows = tables.flatMap(({ name }) =>
      (sqlite.prepare(`SELECT * FROM "${name}"`).all() as Array<Record<string, unknown>>).map((row) =>
        // Blobs as hex, the way PostgreSQL shows bytea.
        JSON.stringify(Object.fromEntries(Object.entries(row).map(([k, v]) => [k, Buffer.isBuffer(v) ? `\\x${v.toString('hex')}` : v]))),
      ),
    );
    return rows.join('\n');
  } finally {
    sqlite.close();
  }
}

for (const backend of BACKENDS) {
  describe(`tokens at rest [${backend.name}]`, { skip: backend.skip }, () => {
    it('stores only the SHA-256 of tokens issued by the CLI, never the token or its random part', async () => {
      const db = await backend.freshDb();
      assert.equal((await runCli(db, ['users', 'add', 'alice'])).code, 0);
      const tokens: string[] = [];
      for (const label of ['laptop', 'ci']) {
        const run = await runCli(db, ['tokens', 'create', 'alice', '--label', label, '--expires-in', '30d']);
        assert.equal(run.code, 0, run.stderr);
        tokens.push(run.stdout.trim());
      }
      const dump = await dumpDatabase(db);
      const files = backend.name === 'sqlite' ? [db, `${db}-wal`].filter((f) => existsSync(f)).map((f) => readFileSync(f)) : [];
      for (const token of tokens) {
        assert.match(token, /^pst_[A-Za-z0-9_-]{43}$/);
        const secret = token.slice(4);
        const raw = Buffer.from(secret, 'base64url');
        for (const needle of [token, secret, raw.toString('hex'), secret.slice(0, 16)])
          assert.ok(!dump.includes(needle), `a token leaks into the tables`);
        // The raw file bytes too (free pages and the WAL keep data the tables no longer show).
        for (const file of files) {
          assert.equal(file.indexOf(token), -1, 'token in the database file');
          assert.equal(file.indexOf(raw), -1, 'token bytes in the database file');
        }
        // And the dump can see tokens at all: the hash is there.
        assert.ok(dump.includes(createHash('sha256').update(token).digest('hex')), 'the hash is stored');
      }
    });
  });
}

describe('secrets never reach the logs', () => {
  let store: Store;
  let server: RunningApp;

  before(async () => {
    store = await openStore({ db: ':memory:' });
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('a whole run at trace level with request logging, failures included, logs no token, JWT or secret', async () => {
    const { tokens } = await seed(store, {
      users: [{ name: 'alice' }, { name: 'bob' }],
      plants: [{ name: 'Fern', owner: 'alice', public: true }],
    });
    const alice = tokens.alice!;
    const expired = (await mintToken(store, 'bob', { expiresAt: new Date(Date.now() - 1000) })).token;
    const revoked = await mintToken(store, 'bob');
    await store.tokens.revoke(revoked.id);
    const unknown = `pst_${'A'.repeat(43)}`;
    const jwt = await mintJwt(secretKey(), { claims: { sub: 'alice' } });
    const wrongKey = await mintJwt(secretKey(`${SECRET}-not-the-same`), { claims: { sub: 'alice' } });
    const expiredJwt = await mintJwt(secretKey(), { claims: { sub: 'alice' }, expiresIn: -3600 });
    const strangerJwt = await mintJwt(secretKey(), { claims: { sub: 'mallory' } });
    const secrets = [alice, tokens.bob!, expired, revoked.token, unknown, jwt, wrongKey, expiredJwt, strangerJwt, SECRET];

    server = await startApp(store, { captureLogs: true, logLevel: 'trace', logRequests: true, env: JWT_ENV });
    const statuses: number[] = [];
    const call = async (path: string, headers: OutgoingHttpHeaders = {}, method = 'GET') => {
      statuses.push((await rawRequest(server.url, path, headers, method)).status);
    };
    for (const token of [alice, expired, revoked.token, unknown, jwt, wrongKey, expiredJwt, strangerJwt])
      await call('/plants?limit=1', bearer(token));
    await call('/plants', { authorization: `Bearer ${alice}x` });
    await call('/plants', { authorization: `bearer\t${alice}` });
    await call('/plants', { authorization: `Basic ${Buffer.from(`alice:${alice}`).toString('base64')}` });
    // Credentials where they do not belong: in the URL and in a cookie.
    await call(`/plants?access_token=${alice}&limit=1`, bearer(alice));
    await call(`/plants?token=${alice}`);
    await call('/plants', { cookie: `session=${alice}` });
    await call('/plants?limit=-1', bearer(alice));
    await call('/plants', { ...bearer(alice), accept: 'text/html' });
    await call('/nowhere', bearer(alice));
    await call('/plants', bearer(alice), 'DELETE');
    // A 5xx: the database goes away under the server, so the error path logs an error with its details.
    await store.close();
    await call('/plants?limit=7', bearer(tokens.bob!));
    await server.close();

    assert.deepEqual(statuses.slice(0, 8), [200, 401, 401, 401, 200, 401, 401, 401]);
    assert.ok(statuses.at(-1)! >= 500, `the last request failed on the server: ${statuses.at(-1)}`);
    const logs = server.logs();
    const lines = logs.split('\n').filter((l) => l !== '');
    // The capture really holds the run: request lines and the server-side error.
    assert.ok(lines.filter((l) => l.includes('incoming request')).length >= statuses.length, 'request lines were logged');
    assert.ok(
      lines.some((l) => (JSON.parse(l) as { level: number }).level >= 50),
      'the failure was logged',
    );
    for (const secret of secrets) {
      assert.ok(!logs.includes(secret), `a secret (${secret.slice(0, 6)}…) appears in the logs`);
      // Neither part of a JWT (its claims name the user and are base64url of JSON), nor a token's random part.
      for (const part of secret.startsWith('pst_') ? [secret.slice(4)] : secret.split('.').slice(1))
        assert.ok(!logs.includes(part), 'part of a secret in the logs');
    }
    assert.ok(!logs.includes(Buffer.from(`alice:${alice}`).toString('base64')), 'Basic credentials in the logs');
  });
});

describe('response headers', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;
  before(async () => {
    store = await openStore({ db: ':memory:' });
    ({
      tokens: { alice: token = '' },
    } = await seed(store, { users: [{ name: 'alice' }], plants: [{ name: 'Fern', owner: 'alice' }] }));
    server = await startApp(store);
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  const assertPrivate = (res: { status: number; headers: Record<string, unknown> }, what: string) => {
    assert.equal(res.headers['cache-control'], 'no-store', `${what}: Cache-Control`);
    assert.equal(res.headers['x-content-type-options'], 'nosniff', `${what}: nosniff`);
  };

  it('every answer, 200 and each error, says Cache-Control: no-store and X-Content-Type-Options: nosniff', async () => {
    const cases: Array<[string, OutgoingHttpHeaders, string, number]> = [
      ['/plants', bearer(token), 'GET', 200],
      ['/plants?limit=1', bearer(token), 'HEAD', 200],
      ['/plants?limit=x', bearer(token), 'GET', 400],
      ['/plants%zz', {}, 'GET', 400],
      ['/plants', {}, 'GET', 401],
      ['/plants', {}, 'HEAD', 401],
      ['/plants', { ...bearer(token), accept: 'text/html' }, 'GET', 406],
      ['/nowhere', {}, 'GET', 404],
      ['/plants', {}, 'PUT', 405],
      ['/openapi.json', {}, 'GET', 200],
      ['/healthz', {}, 'GET', 200],
    ];
    for (const [path, headers, method, status] of cases) {
      const res = await rawRequest(server.url, path, headers, method);
      assert.equal(res.status, status, `${method} ${path}`);
      assertPrivate(res, `${method} ${path} ${status}`);
    }
    // Answers written straight to the socket by the HTTP parser and by server events.
    const port = Number(new URL(server.url).port);
    for (const [request, status] of [
      ['GET /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n', 400],
      [`GET /plants HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(20_000)}\r\n\r\n`, 431],
      ['GET /plants HTTP/1.1\r\nHost: x\r\nExpect: tea\r\nConnection: close\r\n\r\n', 417],
      ['CONNECT 127.0.0.1:443 HTTP/1.1\r\nHost: x\r\n\r\n', 400],
    ] as const) {
      const res = await sendRaw(port, request);
      assert.equal(res.status, status, request.slice(0, 40));
      assertPrivate(res, request.slice(0, 40));
    }
  });

  it('sends no Access-Control-* header by default, on requests or preflights from any origin', async () => {
    const origin = { origin: 'https://evil.example' };
    const responses: RawResponse[] = [
      await rawRequest(server.url, '/plants', { ...bearer(token), ...origin }),
      await rawRequest(server.url, '/plants', origin),
      await rawRequest(
        server.url,
        '/plants',
        { ...origin, 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' },
        'OPTIONS',
      ),
    ];
    for (const res of responses) {
      assert.deepEqual(
        Object.keys(res.headers).filter((h) => h.startsWith('access-control-')),
        [],
        JSON.stringify(res.headers),
      );
    }
    assertError(responses[2]!, 405, 40501);
    assert.equal(responses[2]!.headers.allow, 'GET, HEAD, POST');
  });
});

describe('CORS when configured', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;
  const ALLOWED = 'https://app.example';
  before(async () => {
    store = await openStore({ db: ':memory:' });
    const plants = [
      { name: 'Fern', owner: 'alice' },
      { name: 'Ivy', owner: 'alice' },
    ];
    ({
      tokens: { alice: token = '' },
    } = await seed(store, { users: [{ name: 'alice' }], plants }));
    server = await startApp(store, { env: { PLANTSTORE_CORS_ORIGINS: ` ${ALLOWED}, http://localhost:3000 ` } });
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('lets an allowed origin read answers (errors too) and the headers a page needs', async () => {
    const ok = await rawRequest(server.url, '/plants?limit=1', { ...bearer(token), origin: ALLOWED });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['access-control-allow-origin'], ALLOWED);
    const exposed = String(ok.headers['access-control-expose-headers'])
      .toLowerCase()
      .split(/\s*,\s*/);
    // What a page needs to read: the next page, a version to change against, the rate limit, when to retry, which
    // release answered.
    for (const header of ['link', 'etag', 'ratelimit', 'ratelimit-policy', 'retry-after', 'plantstore-version'])
      assert.ok(exposed.includes(header), header);
    assert.match(String(ok.headers.vary), /\bOrigin\b/i);
    assert.ok(ok.headers.link, 'a next link to read');
    assert.equal(ok.headers['access-control-allow-credentials'], undefined, 'bearer tokens, not cookies');
    const denied = await rawRequest(server.url, '/plants', { origin: 'http://localhost:3000' });
    assert.equal(denied.status, 401);
    assert.equal(denied.headers['access-control-allow-origin'], 'http://localhost:3000');
  });

  it('answers preflights for reads and writes with the Authorization header, from allowed origins only', async () => {
    const preflight = { 'access-control-request-method': 'GET', 'access-control-request-headers': 'authorization' };
    const ok = await rawRequest(server.url, '/plants', { ...preflight, origin: ALLOWED }, 'OPTIONS');
    assert.equal(ok.status, 204);
    assert.equal(ok.headers['access-control-allow-origin'], ALLOWED);
    assert.deepEqual(
      String(ok.headers['access-control-allow-methods'])
        .split(/\s*,\s*/)
        .sort(),
      ['DELETE', 'GET', 'HEAD', 'PATCH', 'POST', 'PUT'],
    );
    assert.match(String(ok.headers['access-control-allow-headers']), /authorization/i);
    // A page changes a plant or its access only as it read it: the conditions may be sent, the ETag read.
    assert.match(String(ok.headers['access-control-allow-headers']), /if-match.*if-none-match/i);
    assert.equal(ok.headers['cache-control'], 'no-store');
    for (const origin of ['https://evil.example', 'https://app.example.evil.example', 'null', `${ALLOWED}/`]) {
      const refused = await rawRequest(server.url, '/plants', { ...preflight, origin }, 'OPTIONS');
      assertError(refused, 405, 40501);
      assert.deepEqual(
        Object.keys(refused.headers).filter((h) => h.startsWith('access-control-')),
        [],
        origin,
      );
      const get = await rawRequest(server.url, '/plants', { ...bearer(token), origin });
      assert.equal(get.status, 200);
      assert.equal(get.headers['access-control-allow-origin'], undefined, origin);
    }
    // Without an Origin it is not a CORS request at all.
    assertError(await rawRequest(server.url, '/plants', {}, 'OPTIONS'), 405, 40501);
  });

  it('takes exact origins from --cors-origins or PLANTSTORE_CORS_ORIGINS, the flag first, and refuses anything else', () => {
    assert.deepEqual(loadConfig({}).app.corsOrigins, []);
    assert.deepEqual(loadConfig({ corsOrigins: 'https://a.example' }, { PLANTSTORE_CORS_ORIGINS: 'https://b.example' }).app.corsOrigins, [
      'https://a.example',
    ]);
    assert.deepEqual(loadConfig({}, { PLANTSTORE_CORS_ORIGINS: 'https://b.example,*' }).app.corsOrigins, ['https://b.example', '*']);
    for (const bad of ['https://a.example/', 'https://a.example/app', 'ftp://a.example', 'a.example', 'https://*.example', 'null']) {
      assert.throws(() => loadConfig({ corsOrigins: bad }), /invalid --cors-origins/, bad);
    }
  });
});

describe('hostile plant names', () => {
  const NAMES = [
    `"double" and 'single' quotes`,
    'semi;colons; DROP TABLE plants;--',
    '<b>bold</b> &amp; <img src=x onerror=alert(1)>',
    '</script><script>alert(document.cookie)</script>',
    'cactus \u{1f335} seedling \u{1f331} farmer \u{1f469}\u200d\u{1f33e}',
    'bell\u0007 escape\u001b[31m del\u007f',
    'tab\tnew\nline\rreturn',
    'line\u2028para\u2029sep',
    'right-to-left \u202eevil',
    'back\\slash \\u0000 not a NUL',
    '{"name":"injected","tag":"x"}',
    '%00%0d%0a',
  ];
  let db: string;
  let server: RunningApp;
  let store: Store;
  let token: string;

  before(async () => {
    db = await BACKENDS.find((b) => b.name === 'sqlite')!.freshDb();
    // Through the operator's import, one record a line, exactly as given.
    const records = [{ type: 'user', name: 'alice' }, ...NAMES.map((name) => ({ type: 'plant', name, tag: name, owner: 'alice' }))];
    const run = await runCli(db, ['import', '-'], records.map((r) => JSON.stringify(r)).join('\n'));
    assert.equal(run.code, 0, run.stderr);
    store = await openStore({ db: db });
    token = (await mintToken(store, 'alice')).token;
    server = await startApp(store);
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('come back byte-exact, JSON-escaped, as application/json with nosniff', async () => {
    const res = await rawRequest(server.url, '/plants', bearer(token));
    assert.equal(res.status, 200);
    assert.match(String(res.headers['content-type']), /^application\/json; charset=utf-8$/);
    assert.equal(res.headers['x-content-type-options'], 'nosniff');
    assert.deepEqual(
      res.body,
      NAMES.map((name) => ({ name, tag: name })),
    );
    // Control characters travel escaped: the raw body has none.
    assert.doesNotMatch(res.text, /[\u0000-\u001f]/);
  });

  it('a NUL or a lone surrogate (which PostgreSQL text or UTF-8 cannot hold) is refused with a clear message', async () => {
    // JSON can carry both; the import refuses the whole file and says why.
    for (const [name, reason] of [
      ['nul\u0000name', /NUL/],
      ['lone \ud800 surrogate', /surrogate/],
    ] as const) {
      const run = await runCli(db, ['import', '-'], JSON.stringify({ type: 'plant', name, owner: 'alice' }));
      assert.notEqual(run.code, 0);
      assert.match(run.stderr, reason);
    }
    await assert.rejects(addPlant(store, { name: 'nul\u0000name', owner: 'alice', public: false }), /NUL/);
    await assert.rejects(addPlant(store, { name: 'ok', tag: 'x\ud800', owner: 'alice', public: false }), /surrogate/);
  });
});
