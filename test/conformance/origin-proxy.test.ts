import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Validator } from '@seriousme/openapi-schema-validator';
import { generateToken } from '../../src/catalogue/tokens.js';
import { errorCatalogue } from '../../src/http/error-codes.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { seed, startApp, type RunningApp } from '../helpers/http-app.js';
import {
  describeOutcome,
  PRISM_TYPE,
  sendThroughPrism,
  startPrism,
  stopPrism,
  undocumentedStatus,
  type Outcome,
  type Prism,
} from '../helpers/prism.js';

// The same Prism validating proxy as contract-proxy.test.ts, but for the original public document our contract
// was cut from (GET, POST /plants and DELETE /plants/{id}; reconstructed in fixtures/origin-openapi.yaml).
// The original lists only 200/204 and 400: requests it calls valid must come back from the server with no
// violation at all; statuses we added where it is silent (401, 403, 404, 406, 409) must be the one finding
// Prism makes, with our Error body unchanged; requests it calls invalid are answered by Prism itself.

const ORIGIN = fileURLToPath(new URL('../fixtures/origin-openapi.yaml', import.meta.url));

/** Every response of the server carries this header; Prism's own answers do not. */
const SERVER_HEADER = 'plantstore-version';

const PRISM_422 = {
  type: `${PRISM_TYPE}UNPROCESSABLE_ENTITY`,
  title: 'Invalid request',
  status: 422,
  detail: 'Your request is not valid and no HTTP validation response was found in the spec, so Prism is generating this error for you.',
};

after(() => cleanupBackends());

it('the original document, as reconstructed, is a valid OpenAPI 3.1 document', async () => {
  const validator = new Validator();
  const result = await validator.validate(readFileSync(ORIGIN, 'utf8'));
  assert.equal(result.valid, true, `schema errors: ${JSON.stringify(result.errors, null, 2)}`);
  assert.equal(validator.version, '3.1');
});

for (const backend of BACKENDS) {
  describe(`the server behind a Prism validation proxy for the original document [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let prism: Prism;
    let tokens: Record<string, string>;
    /** Public ids of the seeded plants, by name. */
    const ids: Record<string, number> = {};

    const as = (user: string): Record<string, string> => ({ authorization: `Bearer ${tokens[user]}` });
    const get = (path: string, headers: Record<string, string>) => sendThroughPrism(prism, path, { headers });
    const post = (headers: Record<string, string>, body: unknown) =>
      sendThroughPrism(prism, '/plants', {
        method: 'POST',
        headers: { ...headers, 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      });
    const del = (id: number | string, headers: Record<string, string>) =>
      sendThroughPrism(prism, `/plants/${id}`, { method: 'DELETE', headers });

    /** Forwarded and answered by the server with a status the original lists, and not a single violation. */
    const assertConforms = (o: Outcome, status: 200 | 204 | 400): void => {
      assert.deepEqual(o.violations, [], describeOutcome(o));
      assert.equal(o.status, status, describeOutcome(o));
      assert.notEqual(o.headers.get(SERVER_HEADER), null, describeOutcome(o));
      if (status === 204) assert.deepEqual([o.contentType, o.text], ['', ''], describeOutcome(o));
      else assert.match(o.contentType, /^application\/json(;|$)/, describeOutcome(o));
    };

    /** Answered by the server with a status the original does not list: Prism's one finding, and our Error body. */
    const assertUnlisted = (o: Outcome, status: number, code: number, listed: '200,400' | '204,400'): void => {
      assert.equal(o.status, status, describeOutcome(o));
      assert.deepEqual(
        o.violations,
        [{ location: ['response'], severity: 'Warning', message: undocumentedStatus(listed) }],
        describeOutcome(o),
      );
      assert.notEqual(o.headers.get(SERVER_HEADER), null, describeOutcome(o));
      assert.match(o.contentType, /^application\/json(;|$)/, describeOutcome(o));
      const body = o.body as { error: unknown; message: unknown };
      assert.deepEqual(Object.keys(body).sort(), ['error', 'message'], o.text);
      assert.equal(body.error, code, o.text);
      assert.equal(typeof body.message, 'string', o.text);
    };

    /** Answered by Prism without reaching the server. */
    const assertAnsweredByPrism = (o: Outcome, status: number, body: unknown, contentType = 'application/problem+json'): void => {
      assert.equal(o.status, status, describeOutcome(o));
      assert.equal(o.contentType, contentType, describeOutcome(o));
      assert.equal(o.headers.get(SERVER_HEADER), null, describeOutcome(o));
      assert.deepEqual(o.body, body, describeOutcome(o));
    };

    before(async () => {
      store = await backend.open();
      const seeded = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'root', admin: true }],
        plants: [
          { name: 'Fern', owner: 'alice' },
          { name: 'Basil', tag: 'herb', owner: 'alice' },
          { name: 'Mint', tag: 'herb', owner: 'bob', public: true },
          { name: 'Monstera', tag: 'tropical', owner: 'bob', sharedWith: [{ user: 'alice' }, { user: 'carol' }] },
          { name: 'Orchid', owner: 'bob' },
        ],
      });
      tokens = seeded.tokens;
      for (const plant of seeded.plants) ids[plant.name] = plant.id;
      server = await startApp(store);
      prism = await startPrism(ORIGIN, server.url);
    });
    after(async () => {
      await stopPrism(prism);
      await server?.close();
      await store?.close();
    });

    describe('valid requests: a listed status and no violation', () => {
      // carol only reads, and sees no plant any other case writes or deletes.
      it('GET /plants without limit and with limit=0, 1, 2', async () => {
        const all = await get('/plants', as('carol'));
        assertConforms(all, 200);
        assert.deepEqual(all.body, [
          { name: 'Mint', tag: 'herb' },
          { name: 'Monstera', tag: 'tropical' },
        ]);
        for (const [limit, names] of [
          ['0', []],
          ['1', ['Mint']],
          ['2', ['Mint', 'Monstera']],
        ] as const) {
          const o = await get(`/plants?limit=${limit}`, as('carol'));
          assertConforms(o, 200);
          assert.deepEqual(
            (o.body as Array<{ name: string }>).map((p) => p.name),
            names,
            `limit=${limit}`,
          );
        }
      });

      it('POST /plants with a fresh id: 200 and the Plant; the same POST again: 200 and the same Plant', async () => {
        for (let attempt = 1; attempt <= 2; attempt++) {
          const o = await post(as('alice'), { id: 1001, name: 'Thyme', tag: 'herb' });
          assertConforms(o, 200);
          assert.deepEqual(o.body, { name: 'Thyme', tag: 'herb' }, `attempt ${attempt}`);
        }
        const untagged = await post(as('bob'), { id: 1002, name: 'Łódź ivy 🌿' });
        assertConforms(untagged, 200);
        assert.deepEqual(untagged.body, { name: 'Łódź ivy 🌿' });
      });

      it("DELETE /plants/{id} of the caller's own plant, and an admin's delete of another's: 204, no body", async () => {
        assertConforms(await del(ids.Fern!, as('alice')), 204);
        assertConforms(await del(ids.Basil!, as('root')), 204);
        // A plant created through Prism is deleted through it too.
        assertConforms(await post(as('bob'), { id: 1003, name: 'Sage' }), 200);
        assertConforms(await del(1003, as('bob')), 204);
      });

      // NewPlant has no additionalProperties restriction and Prism reads int64 as ±(2^53 - 1); the server takes
      // only id, name and tag, and ids from 1, and says so with the listed 400.
      it('a body the original allows but the server refuses (an extra field, an id below 1): 400 with the Error body', async () => {
        for (const body of [
          { id: 1004, name: 'Rose', owner: 'bob' },
          { id: 0, name: 'Rose' },
          { id: -5, name: 'Rose' },
        ]) {
          const o = await post(as('alice'), body);
          assertConforms(o, 400);
          assert.equal((o.body as { error: unknown }).error, errorCatalogue.invalid_body.code, o.text);
        }
        const zero = await del(0, as('alice'));
        assertConforms(zero, 400);
        assert.equal((zero.body as { error: unknown }).error, errorCatalogue.invalid_parameter.code, zero.text);
      });
    });

    describe('statuses the original does not list: Prism flags only that, and the body is our Error', () => {
      it("POST with the id of another user's plant: 409", async () => {
        assertUnlisted(
          await post(as('alice'), { id: ids.Mint!, name: 'Mint', tag: 'herb' }),
          409,
          errorCatalogue.plant_id_taken.code,
          '200,400',
        );
      });

      it('DELETE of a plant the caller sees but does not own: 403', async () => {
        assertUnlisted(await del(ids.Mint!, as('alice')), 403, errorCatalogue.not_owner.code, '204,400');
        assertUnlisted(await del(ids.Monstera!, as('alice')), 403, errorCatalogue.not_owner.code, '204,400');
      });

      it('DELETE of an unknown id, or of a plant the caller cannot see: 404', async () => {
        assertUnlisted(await del(999_999, as('alice')), 404, errorCatalogue.plant_not_found.code, '204,400');
        assertUnlisted(await del(ids.Orchid!, as('alice')), 404, errorCatalogue.plant_not_found.code, '204,400');
      });

      it('a well-formed token the server does not know, on every operation: 401', async () => {
        const unknown = { authorization: `Bearer ${generateToken().token}` };
        const code = errorCatalogue.invalid_token.code;
        assertUnlisted(await get('/plants', unknown), 401, code, '200,400');
        assertUnlisted(await post(unknown, { id: 1005, name: 'Aloe' }), 401, code, '200,400');
        assertUnlisted(await del(ids.Orchid!, unknown), 401, code, '204,400');
      });

      it('an Accept header that rules out JSON: 406 (Prism forwards it)', async () => {
        assertUnlisted(
          await get('/plants', { ...as('carol'), accept: 'application/xml' }),
          406,
          errorCatalogue.not_acceptable.code,
          '200,400',
        );
      });
    });

    describe('requests the original calls invalid: Prism answers them itself', () => {
      it('a body that is not a NewPlant: 422 problem+json naming the failed rule', async () => {
        const cases: Array<[unknown, unknown[]]> = [
          [
            { name: 'Rose' },
            [{ location: ['body'], severity: 'Error', code: 'required', message: "Request body must have required property 'id'" }],
          ],
          [
            { id: 1006 },
            [{ location: ['body'], severity: 'Error', code: 'required', message: "Request body must have required property 'name'" }],
          ],
          [
            { id: '1006', name: 'Rose' },
            [{ location: ['body', 'id'], severity: 'Error', code: 'type', message: 'Request body property id must be integer' }],
          ],
          [
            { id: 2 ** 53, name: 'Rose' },
            [
              {
                location: ['body', 'id'],
                severity: 'Error',
                code: 'maximum',
                message: 'Request body property id must be <= 9007199254740991',
              },
            ],
          ],
          [[{ id: 1006, name: 'Rose' }], [{ location: ['body'], severity: 'Error', code: 'type', message: 'Request body must be object' }]],
        ];
        for (const [body, validation] of cases) {
          const o = await post(as('alice'), body);
          assertAnsweredByPrism(o, 422, { ...PRISM_422, validation });
        }
      });

      it('no body, or not JSON: 422 problem+json', async () => {
        const empty = await sendThroughPrism(prism, '/plants', {
          method: 'POST',
          headers: { ...as('alice'), 'content-type': 'application/json' },
        });
        assertAnsweredByPrism(empty, 422, {
          ...PRISM_422,
          validation: [{ severity: 'Error', code: 'required', message: 'Body parameter is required' }],
        });
        const text = await sendThroughPrism(prism, '/plants', {
          method: 'POST',
          headers: { ...as('alice'), 'content-type': 'text/plain' },
          body: JSON.stringify({ id: 1006, name: 'Rose' }),
        });
        // The media type mismatch is a 422 whose finding carries the number 415 as its code.
        assertAnsweredByPrism(text, 422, {
          ...PRISM_422,
          validation: [{ severity: 'Error', code: 415, message: 'Supported content types: application/json' }],
        });
      });

      // Prism's HTTP layer parses the body before any validation: its own 400, neither problem+json nor our Error.
      it('a JSON body that does not parse: 400 from Prism with a body of its own', async () => {
        const o = await post(as('alice'), '{"id":');
        assertAnsweredByPrism(o, 400, { error: { code: 'invalid_json', message: 'Invalid JSON' } }, 'application/json; charset=utf-8');
        assert.deepEqual(o.violations, []);
      });

      it('a path id that is not an integer, or beyond 2^53 - 1: 422 problem+json', async () => {
        assertAnsweredByPrism(await del('abc', as('alice')), 422, {
          ...PRISM_422,
          validation: [{ location: ['path', 'id'], severity: 'Error', code: 'type', message: 'Request path parameter id must be integer' }],
        });
        // The int64 maximum itself: Prism bounds int64 by what a JSON number holds exactly.
        assertAnsweredByPrism(await del('9223372036854775807', as('alice')), 422, {
          ...PRISM_422,
          validation: [
            {
              location: ['path', 'id'],
              severity: 'Error',
              code: 'maximum',
              message: 'Request path parameter id must be <= 9007199254740991',
            },
          ],
        });
      });

      it('no credentials, or another scheme: 401 problem+json', async () => {
        const prism401 = {
          type: `${PRISM_TYPE}UNAUTHORIZED`,
          title: 'Invalid security scheme used',
          status: 401,
          detail:
            'Your request does not fullfil the security requirements and no HTTP unauthorized response was found in the spec, so Prism is generating this error for you.',
          headers: { 'WWW-Authenticate': 'Bearer' },
        };
        const refused: Array<Record<string, string>> = [{}, { authorization: 'Basic YWxpY2U6c2VjcmV0' }];
        for (const headers of refused) {
          for (const o of [
            await get('/plants', headers),
            await post(headers, { id: 1007, name: 'Rose' }),
            await del(ids.Orchid!, headers),
          ]) {
            assertAnsweredByPrism(o, 401, prism401);
            assert.equal(o.headers.get('www-authenticate'), 'Bearer');
          }
        }
      });
    });

    // Runs last: every write above that the server accepted, and none that Prism or the server refused.
    it('the store holds exactly what the accepted creates and deletes leave', async () => {
      const plants = (await store.plants.list({})).map(({ id, name, owner }) => ({ id, name, owner })).sort((a, b) => a.id - b.id);
      assert.deepEqual(plants, [
        { id: ids.Mint, name: 'Mint', owner: 'bob' },
        { id: ids.Monstera, name: 'Monstera', owner: 'bob' },
        { id: ids.Orchid, name: 'Orchid', owner: 'bob' },
        { id: 1001, name: 'Thyme', owner: 'alice' },
        { id: 1002, name: 'Łódź ivy 🌿', owner: 'bob' },
      ]);
    });
  });
}
