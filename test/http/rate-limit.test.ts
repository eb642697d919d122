import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Redis } from 'ioredis';
import { clientNetwork } from '../../src/http/client-network.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { assertError } from '../helpers/assertions.js';
import { REDIS_URL, redisUnavailableReason, urlOfMissingDatabase } from '../helpers/redis.js';
import { TcpProxy } from '../helpers/tcp-proxy.js';
import { AUDIENCE, ISSUER, mintJwt, SECRET, secretKey } from '../helpers/jwt.js';
import { bearer, rawRequest, seed, startApp, type AddedPlant, type RawResponse, type RunningApp } from '../helpers/http-app.js';

// Per-token rate limiting over a real socket: in-process counters, counters shared through Redis by two
// instances, and a Redis that is down or does not answer (fail open).

/** The `r` (remaining) and `t` (seconds to reset) of a `RateLimit: "default";r=N;t=S` header. */
function rateLimitOf(res: RawResponse): { r: number; t: number } {
  const match = /^"default";r=(\d+);t=(\d+)$/.exec(String(res.headers.ratelimit));
  assert.ok(match, `RateLimit header was ${res.headers.ratelimit}`);
  return { r: Number(match[1]), t: Number(match[2]) };
}

async function freshStore(): Promise<{ store: Store; tokens: Record<string, string> }> {
  const store = await openStore({ db: ':memory:' });
  const { tokens } = await seed(store, {
    users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }],
    plants: [{ name: 'Fern', owner: 'alice', public: true }],
  });
  return { store, tokens };
}

describe('rate limiting, in-process counters', () => {
  let store: Store;
  let tokens: Record<string, string>;
  let server: RunningApp;
  const get = (token?: string) => rawRequest(server.url, '/plants', token === undefined ? {} : bearer(token));

  before(async () => {
    ({ store, tokens } = await freshStore());
    // A window long enough that three quick requests always fall in the same one, even on a busy machine.
    server = await startApp(store, { config: { rateLimit: '3/3s' } });
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('counts each request against its token, answers 429 with Retry-After over the limit, and resets with the window', async () => {
    for (const remaining of [2, 1, 0]) {
      const res = await get(tokens.alice);
      assert.equal(res.status, 200);
      assert.equal(res.headers['ratelimit-policy'], '"default";q=3;w=3');
      assert.equal(rateLimitOf(res).r, remaining);
    }
    const limited = await get(tokens.alice);
    assertError(limited, 429, 42901);
    const retryAfter = Number(limited.headers['retry-after']);
    assert.ok(Number.isInteger(retryAfter) && retryAfter >= 1 && retryAfter <= 3, `Retry-After was ${limited.headers['retry-after']}`);
    assert.deepEqual(rateLimitOf(limited), { r: 0, t: retryAfter });
    assert.equal(limited.headers['ratelimit-policy'], '"default";q=3;w=3');

    // Another token has a budget of its own.
    const other = await get(tokens.bob);
    assert.equal(other.status, 200);
    assert.equal(rateLimitOf(other).r, 2);

    // Once the window is over, the token is served again with a fresh budget.
    await sleep(retryAfter * 1000 + 100);
    const again = await get(tokens.alice);
    assert.equal(again.status, 200, again.text);
    assert.equal(rateLimitOf(again).r, 2);
  });

  it('counts requests without a valid token against the client address, which then holds back its valid tokens too', async () => {
    assertError(await get(), 401, 40101);
    assertError(await get('pst_not-a-real-token'), 401, 40102);
    const third = await get();
    assertError(third, 401, 40101);
    assert.equal(rateLimitOf(third).r, 0);
    // Over the limit: 429, whether or not a token is sent and whether or not it is valid, so guesses tell nothing.
    assertError(await get(), 429, 42901);
    assertError(await get('pst_another-guess'), 429, 42901);
    const valid = await get(tokens.carol);
    assertError(valid, 429, 42901);
    assert.ok(Number(valid.headers['retry-after']) >= 1);
  });

  it('documents 429 with its headers in the served OpenAPI document', async () => {
    const doc = (await rawRequest(server.url, '/openapi.json')).body as {
      components: { schemas: { Error: { description: string } } };
      paths: Record<
        string,
        { get: { responses: Record<string, { headers?: Record<string, unknown>; content: Record<string, { schema: unknown }> }> } }
      >;
    };
    const responses = doc.paths['/plants']!.get.responses;
    const tooMany = responses['429']!;
    assert.deepEqual(tooMany.content['application/json']!.schema, { $ref: '#/components/schemas/Error' });
    assert.deepEqual(Object.keys(tooMany.headers ?? {}).sort(), ['Plantstore-Version', 'RateLimit', 'RateLimit-Policy', 'Retry-After']);
    assert.ok(responses['200']!.headers?.RateLimit, '200 documents the RateLimit header');
    assert.ok(doc.components.schemas.Error.description.includes('| 42901 | 429 | `rate_limited` |'));
  });
});

describe('the write budget and one plant', () => {
  it('spends it on PATCH /plants/{id} whatever the answer, never on GET /plants/{id} or a malformed change', async () => {
    const store = await openStore({ db: ':memory:' });
    const { tokens, plants } = await seed(store, {
      users: [{ name: 'alice' }, { name: 'bob' }],
      plants: [
        { name: 'Fern', owner: 'alice', public: true },
        { name: 'Ivy', owner: 'bob', public: true },
      ],
    });
    const [fern, ivy] = plants as [AddedPlant, AddedPlant];
    const server = await startApp(store, { config: { writeRateLimit: '3/1m' } });
    const patch = (id: number, body: string, user = 'alice') =>
      rawRequest(server.url, `/plants/${id}`, { ...bearer(tokens[user]!), 'content-type': 'application/merge-patch+json' }, 'PATCH', body);
    const read = (id: number) => rawRequest(server.url, `/plants/${id}`, bearer(tokens.alice!));
    try {
      for (let i = 0; i < 5; i++) assert.equal((await read(fern.id)).status, 200, 'reads spend nothing');
      for (let i = 0; i < 3; i++) assertError(await patch(fern.id, JSON.stringify({ name: '' })), 400, 40005);
      assertError(await patch(fern.id, JSON.stringify({ colour: 'green' })), 400, 40005);
      const changed = await patch(fern.id, JSON.stringify({ tag: 'fern' }));
      assert.equal(changed.status, 200);
      assert.match(String(changed.headers.ratelimit), /"writes";r=2;t=\d+/);
      // Refused after the checks of its form: a change of another's plant, and of none, spend the budget too.
      assertError(await patch(ivy.id, JSON.stringify({ tag: 'mine' })), 403, 40301);
      assertError(await patch(987_654, JSON.stringify({ tag: 'none' })), 404, 40402);
      const refused = await patch(fern.id, JSON.stringify({ tag: null }));
      assertError(refused, 429, 42903);
      assert.match(String(refused.headers['retry-after']), /^[1-9][0-9]*$/);
      assert.deepEqual((await read(fern.id)).body, { id: fern.id, name: 'Fern', tag: 'fern' }, 'the refused change changed nothing');
      assert.equal((await patch(ivy.id, JSON.stringify({ tag: 'his' }), 'bob')).status, 200, "another user's budget is his own");
    } finally {
      await server.close();
      await store.close();
    }
  });
});

describe('client addresses', () => {
  it('counts an IPv4 address as itself and an IPv6 address as its /64 network', () => {
    assert.equal(clientNetwork('203.0.113.9'), '203.0.113.9');
    assert.equal(clientNetwork('::ffff:203.0.113.9'), '203.0.113.9');
    assert.equal(clientNetwork('2001:db8:0:1::1'), '2001:db8:0:1::/64');
    assert.equal(clientNetwork('2001:0db8:0000:0001:ffff:ffff:ffff:ffff'), '2001:db8:0:1::/64');
    assert.equal(clientNetwork('2001:db8::1'), '2001:db8:0:0::/64');
    assert.notEqual(clientNetwork('2001:db8:0:2::1'), clientNetwork('2001:db8:0:1::1'));
  });
});

describe('rate limiting off', () => {
  it('sends no RateLimit headers and never answers 429', async () => {
    const { store, tokens } = await freshStore();
    const server = await startApp(store, { config: { rateLimit: 'off' } });
    try {
      for (let i = 0; i < 5; i++) {
        const res = await rawRequest(server.url, '/plants', bearer(tokens.alice!));
        assert.equal(res.status, 200);
        assert.equal(res.headers.ratelimit, undefined);
      }
    } finally {
      await server.close();
      await store.close();
    }
  });
});

describe('rate limiting shared through Redis', async () => {
  const skip = await redisUnavailableReason();
  // A prefix of this run's own, so parallel runs and other deployments on the same Redis never meet.
  const prefix = `plantstore-test:${randomUUID()}:`;
  let store: Store;
  let tokens: Record<string, string>;
  let servers: RunningApp[] = [];

  before(async () => {
    if (skip) return;
    ({ store, tokens } = await freshStore());
    const config = { rateLimit: '4/30s', redisUrl: REDIS_URL, redisKeyPrefix: prefix };
    servers = [await startApp(store, { config }), await startApp(store, { config })];
  });
  after(async () => {
    for (const server of servers) await server.close();
    await store?.close();
    if (skip) return;
    const redis = new Redis(REDIS_URL);
    try {
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
    } finally {
      redis.disconnect();
    }
  });

  it('two instances share one budget per token', { skip }, async () => {
    const [a, b] = servers as [RunningApp, RunningApp];
    const statuses: number[] = [];
    for (const server of [a, b, a, b, a, b]) statuses.push((await rawRequest(server.url, '/plants', bearer(tokens.alice!))).status);
    assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429]);
    const limited = await rawRequest(b.url, '/plants', bearer(tokens.alice!));
    assertError(limited, 429, 42901);
    assert.ok(Number(limited.headers['retry-after']) >= 1);
    // The other token is untouched, on either instance.
    assert.equal((await rawRequest(a.url, '/plants', bearer(tokens.bob!))).status, 200);

    // The key names a hash of the token, never the token itself.
    const redis = new Redis(REDIS_URL);
    try {
      const keys = await redis.keys(`${prefix}*`);
      assert.equal(keys.length, 2, keys.join(', '));
      for (const key of keys) {
        assert.ok(!key.includes(tokens.alice!) && !key.includes(tokens.bob!), `token in key ${key}`);
      }
      // Every request was counted once, by whichever instance served it: 7 for alice, 1 for bob.
      assert.deepEqual((await redis.mget(...keys)).sort(), ['1', '7']);
    } finally {
      redis.disconnect();
    }
  });
});

/**
 * Runs `test` against a server whose rate limits count in Redis through a TCP proxy it can stop or black-hole, and
 * removes the counters it left there.
 */
async function behindProxy(
  rateLimit: string,
  test: (app: { proxy: TcpProxy; server: RunningApp; get: () => Promise<RawResponse> }) => Promise<void>,
): Promise<void> {
  const { store, tokens } = await freshStore();
  const target = new URL(REDIS_URL);
  const proxy = new TcpProxy(target.hostname, Number(target.port || 6379));
  await proxy.start();
  const prefix = `plantstore-test:${randomUUID()}:`;
  const server = await startApp(store, {
    captureLogs: true,
    logLevel: 'warn',
    config: { rateLimit, redisUrl: `redis://127.0.0.1:${proxy.port}`, redisKeyPrefix: prefix },
  });
  try {
    await test({ proxy, server, get: () => rawRequest(server.url, '/plants', bearer(tokens.alice!)) });
  } finally {
    await server.close();
    await proxy.stop();
    await store.close();
    const redis = new Redis(REDIS_URL);
    const keys = await redis.keys(`${prefix}*`);
    if (keys.length > 0) await redis.del(...keys);
    redis.disconnect();
  }
}

/** The first answer that was counted again (RateLimit back), asking every 100 ms, at most `tries` more times. */
async function untilCounted(get: () => Promise<RawResponse>, tries: number): Promise<RawResponse> {
  let res = await get();
  for (let i = 0; res.headers.ratelimit === undefined && i < tries; i++) {
    await sleep(100);
    res = await get();
  }
  return res;
}

describe('rate limiting through Redis that goes away and comes back', async () => {
  const skip = await redisUnavailableReason();

  it('serves uncounted while Redis is away, with one warning, and counts again once it is back', { skip }, () =>
    behindProxy('2/60s', async ({ proxy, server, get }) => {
      assert.equal(rateLimitOf(await get()).r, 1);

      await proxy.stop();
      for (let i = 0; i < 3; i++) {
        const res = await get();
        assert.equal(res.status, 200, res.text);
        assert.equal(res.headers.ratelimit, undefined);
      }
      assert.equal(
        server
          .logs()
          .split('\n')
          .filter((line) => line.includes('rate limit counters unreachable')).length,
        1,
      );

      await proxy.start();
      // ioredis reconnects on its own, within its back-off of at most 2 s.
      assert.deepEqual(rateLimitOf(await untilCounted(get, 100)).r, 0, 'counting resumed where it stopped');
      assertError(await get(), 429, 42901);
    }),
  );

  it('serves uncounted within the command timeout when its connection is silently dropped, and counts again on a new one', { skip }, () =>
    behindProxy('3/60s', async ({ proxy, get }) => {
      assert.equal(rateLimitOf(await get()).r, 2);
      // A NAT or firewall forgets the connection: it stays open, and nothing sent on it arrives or comes back.
      assert.ok(proxy.blackhole() >= 1);
      const dropped = await get();
      assert.equal(dropped.status, 200, dropped.text);
      assert.equal(dropped.headers.ratelimit, undefined, 'uncounted once the command times out');
      // The dropped connection is replaced, not waited on for good (the kernel would give up on it after minutes).
      assert.equal(rateLimitOf(await untilCounted(get, 30)).r, 1, 'counting resumed where it stopped, on a new connection');
      assert.equal(rateLimitOf(await get()).r, 0);
      assertError(await get(), 429, 42901);
    }),
  );
});

describe('rate limiting through Redis that refuses the database of the URL', async () => {
  const skip = await redisUnavailableReason();

  it('serves uncounted, as if Redis were away, with one error, and never counts in database 0', { skip }, async () => {
    const { store, tokens } = await freshStore();
    const prefix = `plantstore-test:${randomUUID()}:`;
    const server = await startApp(store, {
      captureLogs: true,
      logLevel: 'warn',
      config: { rateLimit: '1/60s', writeRateLimit: 'off', redisUrl: await urlOfMissingDatabase(), redisKeyPrefix: prefix },
    });
    // Database 0, where ioredis goes on when the server refuses the SELECT.
    const zero = new URL(REDIS_URL);
    zero.pathname = '/0';
    const redis = new Redis(zero.toString());
    try {
      for (let i = 0; i < 3; i++) {
        const res = await rawRequest(server.url, '/plants', bearer(tokens.alice!));
        assert.equal(res.status, 200, res.text);
        assert.equal(res.headers.ratelimit, undefined, 'nothing counted');
      }
      assert.deepEqual(await redis.keys(`${prefix}*`), [], 'no counter in the database the URL does not name');
      const lines = server.logs().split('\n');
      const refusals = lines.filter((line) => line.includes('Redis refuses to select database'));
      assert.equal(refusals.length, 1, server.logs());
      assert.match(refusals[0]!, /"level":50.*ERR DB index is out of range/);
      assert.ok(server.logs().includes('Redis not reachable at start'), 'at start, Redis counts as away');
    } finally {
      await server.close();
      await store.close();
      const keys = await redis.keys(`${prefix}*`);
      if (keys.length > 0) await redis.del(...keys);
      redis.disconnect();
    }
  });
});

describe('rate limiting when Redis is down or does not answer', () => {
  let store: Store;
  let tokens: Record<string, string>;
  let silent: Server;
  let closedPort: number;
  const held = new Set<Socket>();

  before(async () => {
    ({ store, tokens } = await freshStore());
    // A port that was free a moment ago: nothing listens there.
    const probe = createServer();
    await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
    closedPort = (probe.address() as { port: number }).port;
    await new Promise((resolve) => probe.close(resolve));
    // Accepts connections and never answers: a hung Redis.
    silent = createServer((socket) => {
      held.add(socket);
      socket.on('error', () => {});
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
  });
  after(async () => {
    for (const socket of held) socket.destroy();
    await new Promise((resolve) => silent.close(resolve));
    await store?.close();
  });

  for (const [what, url] of [
    ['refuses connections', () => `redis://127.0.0.1:${closedPort}`],
    ['does not answer', () => `redis://127.0.0.1:${(silent.address() as { port: number }).port}`],
  ] as const) {
    it(`serves requests without limiting (fail open) and logs a warning when Redis ${what}`, async () => {
      const server = await startApp(store, {
        captureLogs: true,
        logLevel: 'warn',
        config: { rateLimit: '1/60s', redisUrl: url(), redisKeyPrefix: `plantstore-test:${randomUUID()}:` },
      });
      try {
        for (let i = 0; i < 3; i++) {
          const res = await rawRequest(server.url, '/plants', bearer(tokens.alice!));
          assert.equal(res.status, 200, res.text);
          assert.equal(res.headers.ratelimit, undefined, 'no RateLimit header when nothing was counted');
        }
        const warnings = server
          .logs()
          .split('\n')
          .filter((line) => line.includes('rate limit counters unreachable'));
        assert.equal(warnings.length, 1, `one warning, not one per request:\n${server.logs()}`);
        assert.ok(server.logs().includes('Redis not reachable at start'), 'a warning at start');
        assert.ok(!server.logs().includes(tokens.alice!), 'the token is not logged');
      } finally {
        await server.close();
      }
    });
  }
});

describe('rate limiting JWTs', () => {
  const B64URL = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_';

  /** The four spellings of a JWT whose 32-byte signature's last base64url character carries two unused bits. */
  function spellings(token: string): string[] {
    const last = token.at(-1)!;
    const value = B64URL.indexOf(last) & ~3;
    return [0, 1, 2, 3].map((low) => token.slice(0, -1) + B64URL[value | low]!);
  }

  it('counts a JWT by what it identifies, not by its spelling: four spellings share one budget', async () => {
    const store = await openStore({ db: ':memory:' });
    await seed(store, { users: [{ name: 'alice' }] });
    const server = await startApp(store, {
      config: { rateLimit: '4/1m', jwtIssuer: ISSUER, jwtAudience: AUDIENCE },
      env: { PLANTSTORE_JWT_SECRET: SECRET },
    });
    try {
      const variants = spellings(await mintJwt(secretKey(), { claims: { sub: 'alice' } }));
      assert.equal(new Set(variants).size, 4);
      for (const variant of variants)
        assert.equal((await rawRequest(server.url, '/plants', bearer(variant))).status, 200, 'every spelling verifies');
      for (const variant of variants) assertError(await rawRequest(server.url, '/plants', bearer(variant)), 429, 42901);
      // Another token of the same subject is the same identity: it shares the budget too.
      assertError(
        await rawRequest(server.url, '/plants', bearer(await mintJwt(secretKey(), { claims: { sub: 'alice', jti: 'other' } }))),
        429,
        42901,
      );
    } finally {
      await server.close();
      await store.close();
    }
  });
});
