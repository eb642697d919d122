import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { Validator } from '@seriousme/openapi-schema-validator';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { mintToken, seed, startApp, type RunningApp } from '../helpers/http-app.js';
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

// Stoplight Prism, a validator we did not write, stands between client and the real server as a validating
// proxy (`prism proxy --errors`) for the contract's own OpenAPI document, not the one the service serves.
// With --errors, a response that breaks the document is replaced by a 500 problem+json listing the
// violations; lesser findings (a status the document does not list) come back in the `sl-violations` header.
//
// The contract documents only 200 and 400 for GET /plants and leaves the behaviour for missing or invalid
// credentials unspecified. So:
// - requests the contract itself calls invalid (no bearer token, a limit that is not an int32) are answered
//   by Prism without reaching the server: they show Prism applies the contract, not how the server behaves;
// - requests it calls valid must come back from the server with a documented status and no violation at all;
// - a valid-looking token the server rejects gets 401, a status the contract does not list: Prism flags
//   exactly that, and nothing else, and the test asserts precisely that one finding.
// The served document (checked in every HTTP test) describes 401 and the other statuses in full.

const CONTRACT = fileURLToPath(new URL('../fixtures/contract-openapi.yaml', import.meta.url));
const UNDOCUMENTED_STATUS = undocumentedStatus('200,400');

const backend = BACKENDS[0]!;

describe('the server behind a Prism validation proxy for the contract document', () => {
  let store: Store;
  let server: RunningApp;
  let prism: Prism;
  let tokens: Record<string, string>;
  let expired: string;

  const send = (path: string, headers: Record<string, string> = {}): Promise<Outcome> => sendThroughPrism(prism, path, { headers });
  const as = (user: string): Record<string, string> => ({ authorization: `Bearer ${tokens[user]}` });

  /** Forwarded, answered by the server with a status the contract documents, and not a single violation. */
  const assertConforms = (o: Outcome, status: 200 | 400): void => {
    assert.deepEqual(o.violations, [], describeOutcome(o));
    assert.equal(o.status, status, describeOutcome(o));
    assert.match(o.contentType, /^application\/json(;|$)/, describeOutcome(o));
  };

  /** Answered by Prism itself, because the request breaks the contract: nothing in it is about a response. */
  const assertRejectedByPrism = (o: Outcome, status: number): void => {
    assert.equal(o.status, status, describeOutcome(o));
    assert.match(o.contentType, /^application\/problem\+json/, describeOutcome(o));
    assert.ok(String((o.body as { type?: string }).type).startsWith(PRISM_TYPE), describeOutcome(o));
    const responseViolations = o.violations.filter((v) => v.location[0] === 'response');
    assert.deepEqual(responseViolations, [], describeOutcome(o));
  };

  before(async () => {
    store = await backend.open();
    ({ tokens } = await seed(store, {
      users: [{ name: 'alice' }, { name: 'bob' }, { name: 'root', admin: true }],
      plants: [
        { name: 'Fern', owner: 'alice' },
        { name: 'Mint', tag: 'herb', owner: 'bob', public: true },
        { name: 'Monstera', tag: 'tropical', owner: 'bob', sharedWith: [{ user: 'alice' }] },
        { name: 'Orchid', owner: 'bob' },
        { name: 'Łódź ivy 🌿', tag: '"quoted"\\', owner: 'alice' },
      ],
    }));
    expired = (await mintToken(store, 'alice', { expiresAt: new Date(Date.now() - 60_000) })).token;
    server = await startApp(store);
    prism = await startPrism(CONTRACT, server.url);
  });
  after(async () => {
    await stopPrism(prism);
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('the contract document itself is a valid OpenAPI 3.1 document', async () => {
    const validator = new Validator();
    const result = await validator.validate(readFileSync(CONTRACT, 'utf8'));
    assert.equal(result.valid, true, `schema errors: ${JSON.stringify(result.errors, null, 2)}`);
    assert.equal(validator.version, '3.1');
  });

  describe('valid requests: a documented status and no violation', () => {
    it('without limit, for a user and for an admin', async () => {
      const alice = await send('/plants', as('alice'));
      assertConforms(alice, 200);
      assert.deepEqual(
        (alice.body as Array<{ name: string }>).map((p) => p.name),
        ['Fern', 'Mint', 'Monstera', 'Łódź ivy 🌿'],
      );
      const root = await send('/plants', as('root'));
      assertConforms(root, 200);
      assert.equal((root.body as unknown[]).length, 5);
    });

    it('limit=0, 1, 3, the int32 maximum, and with leading zeros', async () => {
      for (const [limit, count] of [
        ['0', 0],
        ['1', 1],
        ['3', 3],
        ['2147483647', 4],
        ['002', 2],
      ] as const) {
        const o = await send(`/plants?limit=${limit}`, as('alice'));
        assertConforms(o, 200);
        assert.equal((o.body as unknown[]).length, count, `limit=${limit}`);
      }
    });

    it('following the next-page link, whose cursor the contract does not know', async () => {
      let path: string | undefined = '/plants?limit=2';
      const names: string[] = [];
      while (path !== undefined) {
        const o = await send(path, as('alice'));
        assertConforms(o, 200);
        names.push(...(o.body as Array<{ name: string }>).map((p) => p.name));
        path = /^<([^>]+)>; rel="next"$/.exec(o.headers.get('link') ?? '')?.[1];
      }
      assert.deepEqual(names, ['Fern', 'Mint', 'Monstera', 'Łódź ivy 🌿']);
    });

    it('an explicit Accept: application/json; an unknown query parameter is a documented 400 with the Error body', async () => {
      assertConforms(await send('/plants', { ...as('bob'), accept: 'application/json' }), 200);
      assertConforms(await send('/plants?foo=bar&limit=1', as('bob')), 400);
    });

    // Prism reads 1e3 as the integer 1000; the server takes only plain digits, and says so with a documented 400.
    it('a limit the contract allows but the server refuses (negative, exponent), and a bad cursor: 400 with the Error body', async () => {
      for (const query of ['limit=-1', 'limit=1e3', 'cursor=!!', 'cursor=zzzz']) {
        const o = await send(`/plants?${query}`, as('alice'));
        assertConforms(o, 400);
      }
    });
  });

  describe('requests the contract calls invalid: Prism answers them itself', () => {
    it('no credentials, or another scheme: 401 from Prism', async () => {
      assertRejectedByPrism(await send('/plants'), 401);
      assertRejectedByPrism(await send('/plants', { authorization: 'Basic YWxpY2U6c2VjcmV0' }), 401);
    });

    it('a limit that is not an int32: 422 from Prism', async () => {
      for (const limit of ['abc', '1.5', '2147483648', '-2147483649']) {
        assertRejectedByPrism(await send(`/plants?limit=${limit}`, as('alice')), 422);
      }
    });
  });

  describe('statuses the contract leaves unspecified', () => {
    it('a token the server does not accept: 401 with the Error body, and Prism flags only the unlisted status', async () => {
      for (const token of ['pst_unknownunknownunknownunknownunknownunknown', 'not-a-token', expired]) {
        const o = await send('/plants', { authorization: `Bearer ${token}` });
        assert.equal(o.status, 401, describeOutcome(o));
        assert.deepEqual(o.violations, [{ location: ['response'], severity: 'Warning', message: UNDOCUMENTED_STATUS }], describeOutcome(o));
        assert.match(o.contentType, /^application\/json(;|$)/);
        const body = o.body as { error: unknown; message: unknown };
        assert.deepEqual(Object.keys(body).sort(), ['error', 'message']);
        assert.ok(Number.isInteger(body.error) && typeof body.message === 'string', o.text);
      }
    });
  });
});
