import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp, type RunningApp } from '../helpers/http-app.js';
import { runCli } from '../helpers/processes.js';
import { sendRaw } from '../helpers/raw-http.js';

// The one source of the version is package.json; read it here independently of src/version.ts.
const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

after(() => cleanupBackends());

const backend = BACKENDS.find((b) => b.name === 'sqlite') ?? BACKENDS[0]!;

describe('the service version', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;

  before(async () => {
    store = await backend.open();
    token = (await seed(store, { users: [{ name: 'alice' }] })).tokens.alice!;
    server = await startApp(store);
  });
  after(() => server?.close());

  it('is a plain semantic version', () => {
    assert.match(PACKAGE_VERSION, /^\d+\.\d+\.\d+$/);
  });

  const cases: Array<[string, string, () => Record<string, string>, number]> = [
    ['a listing', '/plants?limit=1', () => bearer(token) as Record<string, string>, 200],
    ['a missing token', '/plants', () => ({}), 401],
    ['an invalid parameter', '/plants?limit=-1', () => bearer(token) as Record<string, string>, 400],
    ['an unacceptable Accept', '/plants', () => ({ ...(bearer(token) as Record<string, string>), accept: 'text/html' }), 406],
    ['an unknown path', '/nowhere', () => ({}), 404],
    ['the health check', '/healthz', () => ({}), 200],
    ['the OpenAPI document', '/openapi.json', () => ({}), 200],
  ];
  for (const [what, path, headers, status] of cases) {
    it(`is sent in the Plantstore-Version header with ${what} (${status})`, async () => {
      const res = await rawRequest(server.url, path, headers());
      assert.equal(res.status, status, res.text);
      assert.equal(res.headers['plantstore-version'], PACKAGE_VERSION);
    });
  }

  const FILLER = Array.from({ length: 2000 }, (_, i) => `x${i}:1\r\n`).join('');
  // Answers Node or the server write straight to the socket, before any route: each one still has the Error
  // body and the version (a request without Host got Node's bare 400, the others lacked the header).
  const wire: Array<[string, string, number, number]> = [
    ['no Host header', 'GET /plants HTTP/1.1\r\nConnection: close\r\n\r\n', 400, 40003],
    ['two Host headers', 'GET /plants HTTP/1.1\r\nHost: x\r\nhost: y\r\nConnection: close\r\n\r\n', 400, 40003],
    // Node keeps 2000 header lines unless told otherwise: a second Host or Authorization after them went unseen.
    ['two Host headers 2000 lines apart', `GET /plants HTTP/1.1\r\nHost: x\r\n${FILLER}host: y\r\nConnection: close\r\n\r\n`, 400, 40003],
    [
      'two Authorization headers 2000 lines apart',
      `GET /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer a\r\n${FILLER}Authorization: Bearer b\r\nConnection: close\r\n\r\n`,
      400,
      40003,
    ],
    ['a Host that is no host', 'GET /plants HTTP/1.1\r\nHost: a b/c\r\nConnection: close\r\n\r\n', 400, 40003],
    [
      'Content-Length and Transfer-Encoding',
      'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      400,
      40003,
    ],
    ['two Content-Lengths', 'POST /plants HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab', 400, 40003],
    ['an obs-fold header', 'GET /plants HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n', 400, 40003],
    ['a bare LF', 'GET /plants HTTP/1.1\nHost: x\n\n', 400, 40003],
    ['HTTP/1.2', 'GET /plants HTTP/1.2\r\nHost: x\r\n\r\n', 400, 40003],
    ['headers too large', `GET /plants HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 43101],
    ['Expect other than 100-continue', 'GET /plants HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nConnection: close\r\n\r\n', 417, 41701],
    ['CONNECT', 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n', 400, 40003],
  ];
  for (const [what, request, status, code] of wire) {
    it(`is sent, with the Error body, when the answer to ${what} is written to the socket (${status})`, async () => {
      const res = await sendRaw(Number(new URL(server.url).port), request);
      assert.equal(res.status, status, res.text);
      assert.equal(res.headers['plantstore-version'], PACKAGE_VERSION);
      assert.match(res.headers['content-type'] ?? '', /^application\/json/);
      assert.equal((JSON.parse(res.text) as { error: number }).error, code);
    });
  }

  it('is also sent with a 405 and with a streamed listing', async () => {
    const wrongMethod = await rawRequest(server.url, '/plants', {}, 'PUT');
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers['plantstore-version'], PACKAGE_VERSION);
    const streamed = await rawRequest(server.url, '/plants', bearer(token));
    assert.equal(streamed.status, 200);
    assert.equal(streamed.headers['plantstore-version'], PACKAGE_VERSION);
  });

  it("is named in the served OpenAPI document (info.version stays the contract's), which documents the header on every response", async () => {
    const doc = (await rawRequest(server.url, '/openapi.json')).body as {
      info: { version: string; description: string };
      paths: Record<string, Record<string, { responses: Record<string, { headers?: Record<string, { $ref?: string }> }> }>>;
      components: { headers: Record<string, { schema: { type: string } }> };
    };
    assert.equal(doc.info.version, '1.0.0');
    assert.match(doc.info.description, new RegExp(`Plant Store ${PACKAGE_VERSION.replaceAll('.', '\\.')},`));
    assert.equal(doc.components.headers['Plantstore-Version']?.schema.type, 'string');
    const responses = Object.values(doc.paths).flatMap((path) => Object.values(path).flatMap((op) => Object.values(op.responses)));
    assert.ok(responses.length >= 8);
    for (const response of responses)
      assert.equal(response.headers?.['Plantstore-Version']?.$ref, '#/components/headers/Plantstore-Version');
  });

  it('is what plantstore --version prints', async () => {
    const run = await runCli(':memory:', ['--version']);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout.trim(), PACKAGE_VERSION);
  });
});
