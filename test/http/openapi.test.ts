import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createConfig, lintFromString, type NormalizedProblem } from '@redocly/openapi-core';
import { Validator } from '@seriousme/openapi-schema-validator';
import { errorCatalogue } from '../../src/http/error-codes.js';
import { VERSION } from '../../src/version.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { assertError } from '../helpers/assertions.js';
import { bearer, rawRequest, seed, startApp, uncheckedRequest, type RunningApp } from '../helpers/http-app.js';

// The served interface description: a valid OpenAPI 3.1 document, lint-clean under Redocly's recommended
// rules, and saying what the contract says. The document does not depend on the backend, so one is enough.

// eslint-disable-next-line @typescript-eslint/no-explicit-any -- walking an untyped JSON document
type Json = Record<string, any>;

const backend = BACKENDS[0]!;

const format = (p: NormalizedProblem): string =>
  `${p.severity} ${p.ruleId}: ${p.message} at ${p.location.map((l) => l.pointer ?? '?').join(', ')}`;

describe(`served OpenAPI document [${backend.name}]`, () => {
  let store: Store;
  let server: RunningApp;
  let doc: Json;
  let problems: NormalizedProblem[];

  before(async () => {
    store = await backend.open();
    server = await startApp(store);
    const res = await fetch(`${server.url}/openapi.json`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^application\/json/);
    doc = (await res.json()) as Json;
    const config = await createConfig({ extends: ['recommended'] });
    problems = await lintFromString({ source: JSON.stringify(doc, null, 2), absoluteRef: 'openapi.json', config });
  });
  after(async () => {
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('is a valid OpenAPI 3.1 document', async () => {
    assert.equal(doc.openapi, '3.1.0');
    const validator = new Validator();
    const result = await validator.validate(doc);
    assert.equal(result.valid, true, `schema errors: ${JSON.stringify(result.errors, null, 2)}`);
    assert.equal(validator.version, '3.1');
  });

  it('has no error-severity problem under the Redocly recommended ruleset (warnings are printed)', () => {
    for (const p of problems.filter((p) => p.severity !== 'error')) console.log(`redocly ${format(p)}`);
    assert.deepEqual(problems.filter((p) => p.severity === 'error').map(format), []);
  });

  it('carries the contract title and licence, the service version and the contract version it implements', () => {
    assert.equal(doc.info.title, 'OpenAPI Plant Store');
    assert.equal(doc.info.version, '1.0.0', 'info.version is the contract version');
    assert.match(doc.info.description, new RegExp(`Plant Store ${VERSION.replaceAll('.', '\\.')}`));
    assert.match(doc.info.description, /contract\s+version 1\.0\.0/);
    assert.equal(doc.info.license.name, 'MIT');
    if (doc.info.license.identifier !== undefined) assert.equal(doc.info.license.identifier, 'MIT');
    assert.match(doc.info.description, /sample API/i);
  });

  it('describes GET /plants with an optional int32 `limit` query parameter', () => {
    const op = doc.paths['/plants']?.get;
    assert.ok(op, 'GET /plants is described');
    const limit = (op.parameters as Json[]).find((p) => p.name === 'limit');
    assert.ok(limit, 'limit parameter is described');
    assert.equal(limit.in, 'query');
    assert.notEqual(limit.required, true);
    assert.equal(limit.schema.type, 'integer');
    assert.equal(limit.schema.format, 'int32');
    assert.equal(op.requestBody, undefined, 'no request body');
    assert.deepEqual(
      (op.parameters as Json[]).filter((p) => p.in === 'path'),
      [],
      'no path parameters',
    );
    assert.equal(
      Object.keys(doc.paths['/plants'])
        .filter((m) => m !== 'parameters')
        .join(),
      'get,post',
      'GET and POST are described on /plants (HEAD is GET without a body)',
    );
  });

  it('describes both media types a change of a plant is taken in, and the 415 that lists them', () => {
    const patch = doc.paths['/plants/{id}'].patch as Json;
    assert.deepEqual(Object.keys(patch.requestBody.content), ['application/merge-patch+json', 'application/json']);
    for (const media of Object.values<Json>(patch.requestBody.content)) {
      assert.deepEqual(media.schema, { $ref: '#/components/schemas/PlantPatch' });
    }
    assert.ok(patch.responses['415'].headers['Accept-Patch'], 'the 415 lists Accept-Patch');
  });

  it("describes POST /plants and DELETE /plants/{id} with the original document's shapes", () => {
    const post = doc.paths['/plants'].post as Json;
    assert.deepEqual(post.requestBody.content['application/json'].schema, { $ref: '#/components/schemas/NewPlant' });
    assert.equal(post.requestBody.required, true);
    assert.deepEqual(post.responses['200'].content['application/json'].schema, { $ref: '#/components/schemas/Plant' });
    for (const status of ['400', '401', '409', '415']) {
      assert.deepEqual(post.responses[status].content['application/json'].schema, { $ref: '#/components/schemas/Error' }, status);
    }
    const newPlant = doc.components.schemas.NewPlant as Json;
    assert.deepEqual(newPlant.allOf[0], { $ref: '#/components/schemas/Plant' });
    assert.deepEqual(newPlant.allOf[1].required, ['id']);
    assert.equal(newPlant.allOf[1].properties.id.type, 'integer');
    assert.equal(newPlant.allOf[1].properties.id.format, 'int64');
    const del = doc.paths['/plants/{id}'].delete as Json;
    const id = (del.parameters as Json[])[0]!;
    assert.equal(id.in, 'path');
    assert.equal(id.required, true);
    assert.equal(id.schema.format, 'int64');
    assert.equal(del.responses['204'].content, undefined, '204 has no body');
    for (const status of ['400', '401', '403', '404']) {
      assert.deepEqual(del.responses[status].content['application/json'].schema, { $ref: '#/components/schemas/Error' }, status);
    }
  });

  it('declares the new-plant webhook with the NewPlant body and the Standard Webhooks headers', () => {
    const hook = doc.webhooks['/plant/webhook'].post as Json;
    assert.deepEqual(hook.requestBody.content['application/json'].schema, { $ref: '#/components/schemas/NewPlant' });
    assert.deepEqual(
      (hook.parameters as Json[]).map((p) => [p.name, p.in, p.required]),
      [
        ['webhook-id', 'header', true],
        ['webhook-timestamp', 'header', true],
        ['webhook-signature', 'header', true],
      ],
    );
    assert.ok(hook.responses['200']);
  });

  it('declares the plant events an endpoint chooses, each in the envelope with its sequence, beside the new-plant webhook', () => {
    assert.deepEqual(Object.keys(doc.webhooks), ['/plant/webhook', 'plant.created', 'plant.updated', 'plant.deleted']);
    const newPlant = doc.webhooks['/plant/webhook'].post as Json;
    for (const type of ['plant.created', 'plant.updated', 'plant.deleted']) {
      const hook = doc.webhooks[type].post as Json;
      assert.deepEqual(hook.parameters, newPlant.parameters, `${type}: the same signature headers`);
      assert.match(hook.description, new RegExp(`webhooks add URL --events ${type.replace('.', '\\.')}`), type);
      assert.match(hook.description, /largest `sequence`/, type);
      const schema = hook.requestBody.content['application/json'].schema as Json;
      assert.deepEqual(schema.required, ['type', 'timestamp', 'sequence', 'data'], type);
      assert.equal(schema.properties.type.const, type);
      assert.deepEqual([schema.properties.timestamp.type, schema.properties.timestamp.format], ['string', 'date-time']);
      assert.deepEqual([schema.properties.sequence.type, schema.properties.sequence.format], ['integer', 'int64']);
      assert.match(schema.properties.sequence.description, /per plant id, keep the event with the largest sequence/);
      assert.deepEqual(schema.properties.data.allOf, [{ $ref: '#/components/schemas/NewPlant' }]);
      assert.ok(hook.responses['200']);
    }
  });

  it('GET /plants answers 200 with an array of Plant and 400 with Error, both application/json', () => {
    const responses = doc.paths['/plants'].get.responses as Json;
    const ok = responses['200'].content['application/json'].schema;
    assert.equal(ok.type, 'array');
    assert.deepEqual(ok.items, { $ref: '#/components/schemas/Plant' });
    assert.deepEqual(responses['400'].content['application/json'].schema, { $ref: '#/components/schemas/Error' });
    for (const [status, response] of Object.entries(responses)) {
      if (status === '200') continue;
      assert.deepEqual(
        response.content?.['application/json']?.schema,
        { $ref: '#/components/schemas/Error' },
        `${status} has the Error body`,
      );
    }
  });

  it('declares on every operation the answers given before any route runs: 408, 414, 417 and 431, with the Error body', () => {
    for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
      for (const [method, operation] of Object.entries(item)) {
        if ((operation as Json).responses === undefined) continue;
        for (const status of ['408', '414', '417', '431']) {
          assert.deepEqual(
            (operation as Json).responses[status]?.content?.['application/json']?.schema,
            { $ref: '#/components/schemas/Error' },
            `${method.toUpperCase()} ${path} ${status}`,
          );
        }
      }
    }
  });

  it('declares the rate limit headers on every answer a protected operation gives once routed, and on no other', async () => {
    const transport = ['408', '414', '417', '431'];
    for (const [path, item] of Object.entries(doc.paths as Record<string, Json>)) {
      for (const [method, operation] of Object.entries(item)) {
        const op = operation as Json;
        if (op.responses === undefined) continue;
        const open = Array.isArray(op.security) && op.security.length === 0;
        for (const [status, response] of Object.entries(op.responses as Record<string, Json>)) {
          const declared = ['RateLimit', 'RateLimit-Policy'].filter((name) => response.headers?.[name] !== undefined);
          const expected = open || transport.includes(status) ? [] : ['RateLimit', 'RateLimit-Policy'];
          assert.deepEqual(declared, expected, `${method.toUpperCase()} ${path} ${status}`);
        }
      }
    }
    // And they are sent so, refusals included: a rate-limited service's answers, each checked against the document.
    const { tokens } = await seed(store, { users: [{ name: 'rita' }] });
    const limited = await startApp(store, { config: { rateLimit: '1000/1m' } });
    try {
      const as = bearer(tokens.rita!);
      for (const [method, target, headers, body] of [
        ['GET', '/plants/999999', as],
        ['GET', '/plants/x', as],
        ['GET', '/plants/999999', { ...as, accept: 'text/html' }],
        ['DELETE', '/plants/999999', { ...as, 'content-type': 'application/json', 'content-length': '7' }, '{"a":1}'],
        ['PUT', '/plants/999999/access/users/rita', as],
      ] as const) {
        const res = await rawRequest(limited.url, target, headers, method, body);
        assert.ok(res.status >= 400, `${method} ${target}: ${res.status}`);
        assert.match(
          String(res.headers.ratelimit),
          /^"default";r=\d+;t=\d+(, "writes";r=\d+;t=\d+)?$/,
          `${method} ${target} ${res.status}`,
        );
        assert.ok(res.headers['ratelimit-policy'], `${method} ${target} ${res.status}`);
      }
    } finally {
      await limited.close();
    }
  });

  it("names in a response's description only codes of the catalogue sent with that response's status", () => {
    const statusOf = new Map<number, number>(Object.values(errorCatalogue).map((e) => [e.code, e.status]));
    const wrong: string[] = [];
    for (const [path, item] of Object.entries(doc.paths as Json)) {
      for (const [method, operation] of Object.entries(item as Json)) {
        for (const [status, response] of Object.entries(((operation as Json).responses ?? {}) as Json)) {
          for (const [, code] of String((response as Json).description).matchAll(/\bcode (\d{5})\b/g)) {
            if (statusOf.get(Number(code)) !== Number(status)) wrong.push(`${method.toUpperCase()} ${path} ${status}: code ${code}`);
          }
        }
      }
    }
    assert.deepEqual(wrong, []);
  });

  it('defines Plant (name required string, tag optional string) and Error (error int32, message string, both required)', () => {
    const { Plant, Error } = doc.components.schemas as Json;
    assert.equal(Plant.type, 'object');
    assert.deepEqual(Plant.required, ['name']);
    assert.equal(Plant.properties.name.type, 'string');
    assert.equal(Plant.properties.tag.type, 'string');
    assert.deepEqual(Object.keys(Plant.properties).sort(), ['name', 'tag']);
    assert.equal(Error.type, 'object');
    assert.deepEqual([...Error.required].sort(), ['error', 'message']);
    assert.equal(Error.properties.error.type, 'integer');
    assert.equal(Error.properties.error.format, 'int32');
    assert.equal(Error.properties.message.type, 'string');
  });

  it('declares bearerAuth (HTTP bearer) and requires it for the whole service', () => {
    assert.deepEqual(doc.components.securitySchemes.bearerAuth, { type: 'http', scheme: 'bearer' });
    assert.deepEqual(doc.security, [{ bearerAuth: [] }]);
    // /plants does not override the global requirement away.
    const opSecurity = doc.paths['/plants'].get.security;
    assert.ok(opSecurity === undefined || JSON.stringify(opSecurity) === JSON.stringify([{ bearerAuth: [] }]));
  });

  it('serves HTML docs at /docs with scripts and styles only from its own origin', async () => {
    const res = await fetch(`${server.url}/docs`, { redirect: 'follow' });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/html/);
    const pageUrl = new URL(res.url);
    assert.equal(pageUrl.origin, server.url, 'a redirect stays on the same origin');
    const html = await res.text();
    assert.match(html, /<html/i);

    const scripts = [...html.matchAll(/<script\b[^>]*\bsrc\s*=\s*["']([^"']+)["']/gi)].map((m) => m[1]!);
    const styles = [...html.matchAll(/<link\b[^>]*\bhref\s*=\s*["']([^"']+)["'][^>]*>/gi)]
      .filter((m) => /rel\s*=\s*["']?stylesheet/i.test(m[0]))
      .map((m) => m[1]!);
    assert.ok(scripts.length > 0, 'the page loads scripts');
    assert.ok(styles.length > 0, 'the page loads stylesheets');
    // No absolute or protocol-relative reference to another origin, anywhere in the page.
    for (const m of html.matchAll(/(?:src|href)\s*=\s*["']((?:https?:)?\/\/[^"']*)["']/gi)) {
      assert.equal(new URL(m[1]!, pageUrl).origin, pageUrl.origin, `external reference in /docs: ${m[1]}`);
    }
    assert.doesNotMatch(html, /@import\s+(url\()?["']?(https?:)?\/\//i);

    for (const ref of [...scripts, ...styles]) {
      const url = new URL(ref, pageUrl);
      assert.equal(url.origin, pageUrl.origin, `${ref} is served from another origin`);
      const asset = await fetch(url);
      assert.equal(asset.status, 200, `${ref} is served`);
      const body = await asset.text();
      if (styles.includes(ref)) {
        assert.doesNotMatch(body, /@import\s+(url\()?["']?(https?:)?\/\//i, `${ref} imports an external stylesheet`);
      }
    }

    // The static files' own refusals keep their status, with the Error body.
    const asset = new URL(styles[0]!, pageUrl).pathname;
    assertError(await uncheckedRequest(server.url, asset, { 'if-match': '"not-this-one"' }), 412, 41203);
    assertError(await uncheckedRequest(server.url, asset, { range: 'bytes=99999999-' }), 416, 41601);

    // If a Content-Security-Policy is sent, it allows no external origin for scripts or styles.
    const csp = res.headers.get('content-security-policy');
    if (csp !== null) {
      for (const directive of csp.split(';').map((d) => d.trim())) {
        if (/^(default-src|script-src|style-src)\b/.test(directive)) {
          assert.doesNotMatch(directive, /https?:|\*/, `CSP allows external origins: ${directive}`);
        }
      }
    }
  });

  it("answers the docs' paths as their routes say: 405 with Allow for other methods, 404 for a missing file", async () => {
    const css = '/docs/static/swagger-ui.css';
    for (const path of ['/docs', '/docs/', '/docs/json', css, '/docs/static/missing.css', '/docs/static/']) {
      for (const method of ['POST', 'PUT', 'DELETE']) {
        const res = await uncheckedRequest(server.url, path, {}, method);
        assertError(res, 405, 40501);
        assert.equal(res.headers.allow, 'GET, HEAD', `${method} ${path}`);
      }
    }
    assertError(await uncheckedRequest(server.url, '/docs/static/missing.css'), 404, 40401);
    assert.equal((await uncheckedRequest(server.url, '/docs/static/missing.css', {}, 'HEAD')).status, 404);
    assert.equal((await uncheckedRequest(server.url, css)).status, 200);
    // A path that climbs out of the files' folder finds no file there either (the file server's own answer is a 403).
    for (const climb of [
      '/docs/static/%2e%2e/%2e%2e/package.json',
      '/docs/static/..%2f..%2fpackage.json',
      '/docs/static/%2E%2E/index.html',
    ]) {
      assert.match(assertError(await uncheckedRequest(server.url, climb), 404, 40401).message, /^No such path: GET /, climb);
    }
    // The files' folder leads to the page, not to Swagger UI's own copy of it (which asks for a document not served).
    const folder = await uncheckedRequest(server.url, '/docs/static/');
    assert.equal(folder.status, 302);
    assert.equal(new URL(String(folder.headers.location), `${server.url}/docs/static/`).pathname, '/docs/');
  });

  it("compares a docs file's weak ETag strongly for If-Match (never met but by *), weakly for If-None-Match", async () => {
    const css = '/docs/static/swagger-ui.css';
    const etag = String((await uncheckedRequest(server.url, css)).headers.etag);
    assert.match(etag, /^W\//, "a file's ETag is weak");
    for (const ifMatch of [etag, etag.slice(2), `"other", ${etag}`]) {
      assertError(await uncheckedRequest(server.url, css, { 'if-match': ifMatch }), 412, 41203);
    }
    assert.equal((await uncheckedRequest(server.url, css, { 'if-match': '*' })).status, 200);
    assert.equal((await uncheckedRequest(server.url, css, { 'if-none-match': etag.slice(2) })).status, 304);
  });
});
