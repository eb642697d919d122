import assert from 'node:assert/strict';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { rawRequest, servedDocumentValidator, startApp, type RunningApp } from '../helpers/http-app.js';
import type { CheckedResponse, ResponseValidator } from '../helpers/openapi-responses.js';

// The check that every HTTP test's responses go through must be able to fail: fed deliberately wrong
// responses, it names what is wrong; and the shared request helper rejects a server that sends one.

const backend = BACKENDS[0]!;
const JSON_TYPE = 'application/json; charset=utf-8';

const response = (over: Partial<CheckedResponse> & { body?: unknown }): CheckedResponse => {
  const { body, ...rest } = over;
  return {
    method: 'GET',
    target: '/plants',
    status: 200,
    headers: { 'content-type': JSON_TYPE },
    text: body === undefined ? '[]' : JSON.stringify(body),
    ...rest,
  };
};
const headers = (extra: IncomingHttpHeaders): IncomingHttpHeaders => ({ 'content-type': JSON_TYPE, ...extra });

describe('response validator against the served OpenAPI document', () => {
  let store: Store;
  let server: RunningApp;
  let validate: ResponseValidator;
  let documentText: string;

  before(async () => {
    store = await backend.open();
    server = await startApp(store);
    validate = await servedDocumentValidator(server.url);
    documentText = await (await fetch(`${server.url}/openapi.json`)).text();
  });
  after(async () => {
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('accepts responses that conform', () => {
    const good: CheckedResponse[] = [
      response({ body: [{ name: 'Fern' }, { name: 'Mint', tag: 'herb' }] }),
      response({
        target: '/plants?limit=1',
        headers: headers({ link: '</plants?limit=1&cursor=cDE>; rel="next"' }),
        body: [{ name: 'Fern' }],
      }),
      response({ status: 400, body: { error: 40001, message: 'bad limit' } }),
      response({
        status: 401,
        headers: headers({
          'www-authenticate': 'Bearer realm="plantstore", error="invalid_token", error_description="The access token is malformed"',
        }),
        body: { error: 40102, message: 'The access token is malformed' },
      }),
      response({ method: 'HEAD', text: '' }),
      response({ target: '/nope', status: 404, body: { error: 40401, message: 'No such path' } }),
      response({ method: 'PUT', status: 405, headers: headers({ allow: 'GET, HEAD, POST' }), body: { error: 40501, message: 'no' } }),
      response({ target: '/healthz', body: { status: 'ok' } }),
    ];
    for (const res of good) assert.deepEqual(validate(res), [], `${res.method} ${res.target} ${res.status}`);
  });

  const wrong: Array<[label: string, res: CheckedResponse, expected: RegExp]> = [
    ['a plant without a name', response({ body: [{ tag: 'herb' }] }), /body\/0 must have required property 'name'/],
    ['a non-string tag', response({ body: [{ name: 'Fern', tag: 5 }] }), /body\/0\/tag must be string/],
    ['an object where the array belongs', response({ body: { name: 'Fern' } }), /body must be array/],
    ['a body that is not JSON', response({ text: '[{"name":' }), /body is not JSON/],
    [
      'an undescribed content type',
      response({ headers: { 'content-type': 'text/html' }, text: '<p>' }),
      /Content-Type text\/html is not described/,
    ],
    ['no content type at all', response({ headers: {} }), /no Content-Type/],
    [
      'an undescribed status',
      response({ status: 418, body: { error: 41801, message: 'teapot' } }),
      /status 418 is not described for GET \/plants/,
    ],
    ['an Error whose code is a string', response({ status: 400, body: { error: '40001', message: 'x' } }), /body\/error must be integer/],
    [
      'an Error code beyond int32',
      response({ status: 400, body: { error: 2 ** 31, message: 'x' } }),
      /body\/error must match format "int32"/,
    ],
    ['an Error without a message', response({ status: 401, body: { error: 40101 } }), /must have required property 'message'/],
    [
      'a Link header of another form',
      response({ headers: headers({ link: '<http://elsewhere/>; rel="prev"' }) }),
      /header Link .* must match pattern/,
    ],
    [
      'a WWW-Authenticate header of another scheme',
      response({ status: 401, headers: headers({ 'www-authenticate': 'Basic realm="x"' }), body: { error: 40101, message: 'x' } }),
      /header WWW-Authenticate .* must match pattern/,
    ],
    ['a HEAD response with a body', response({ method: 'HEAD' }), /HEAD or 200 response has a body/],
    [
      '200 on an undescribed path',
      response({ target: '/admin' }),
      /GET \/admin is not described by the document, so it should be answered with a 4xx error, not 200/,
    ],
    [
      'a 404 without the Error body',
      response({ target: '/nope', status: 404, body: { message: 'gone' } }),
      /must have required property 'error'/,
    ],
    [
      '200 for an undescribed method',
      response({ method: 'DELETE', body: [] }),
      /has no DELETE operation, so the answer should be 405, not 200/,
    ],
    [
      '405 with an Allow header that omits GET',
      response({ method: 'PUT', status: 405, headers: headers({ allow: 'HEAD, POST' }), body: { error: 40501, message: 'no' } }),
      /Allow "HEAD, POST" lacks GET/,
    ],
  ];
  for (const [label, res, expected] of wrong) {
    it(`reports ${label}`, () => {
      const violations = validate(res);
      assert.ok(violations.length > 0, `no violation reported for ${label}`);
      assert.match(violations.join('\n'), expected);
    });
  }

  it('makes rawRequest reject a server whose response breaks the document, with the violation in the message', async () => {
    // A stand-in server: the real served document, and a /plants answer that breaks it.
    const fake: Server = createServer((req, res) => {
      if (req.url === '/openapi.json') {
        res.writeHead(200, { 'content-type': JSON_TYPE }).end(documentText);
      } else {
        res.writeHead(200, { 'content-type': JSON_TYPE }).end('[{"name":"Fern"},{"tag":"no name"}]');
      }
    });
    await new Promise<void>((resolve) => fake.listen(0, '127.0.0.1', resolve));
    try {
      const url = `http://127.0.0.1:${(fake.address() as AddressInfo).port}`;
      await assert.rejects(rawRequest(url, '/plants'), (err: Error) => {
        assert.equal(err.name, 'AssertionError');
        assert.match(err.message, /GET \/plants \(status 200\) does not conform to the served OpenAPI document/);
        assert.match(err.message, /body\/1 must have required property 'name'/);
        return true;
      });
      // And the real server's answer to the same request passes.
      assert.equal((await rawRequest(server.url, '/plants')).status, 401);
    } finally {
      await new Promise((resolve) => fake.close(resolve));
    }
  });
});
