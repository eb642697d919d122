import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { generateToken } from '../../src/catalogue/tokens.js';
import { loadConfig, type ConfigInput } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { assertError, eventually, settleChangeFeed } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, seed, uncheckedRequest, addPlant, type AddedPlant } from '../helpers/http-app.js';
import { BIN, runCli } from '../helpers/processes.js';
import { delta, parseSamples, sampleValue, type Sample } from '../helpers/prometheus.js';
import { sendRaw } from '../helpers/raw-http.js';
import { newWebhookSecret } from '../../src/webhooks/signing.js';
import { startReceiver } from '../helpers/webhook-receiver.js';

const PACKAGE_VERSION = (JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { version: string }).version;

/** The production server (public listener and admin listener) on free ports, over an already open store. */
function serve(store: Store, extra: ConfigInput = {}): Promise<RunningServer> {
  const config = loadConfig({ db: `(test ${store.health.backend} store)`, port: 0, logLevel: 'silent', ...extra }, {});
  return startServer(config, store);
}

async function scrape(url: string): Promise<Sample[]> {
  const res = await fetch(url);
  assert.equal(res.status, 200);
  assert.match(res.headers.get('content-type') ?? '', /^text\/plain; version=0\.0\.4/);
  return parseSamples(await res.text());
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`Prometheus metrics on the admin listener [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningServer;
    let tokens: Record<string, string>;
    let plants: AddedPlant[];
    let expired: string;
    let revoked: string;

    before(async () => {
      store = await backend.open();
      ({ tokens, plants } = await seed(store, {
        users: [{ name: 'alice' }, { name: 'bob' }],
        plants: [
          { name: 'Fern', owner: 'bob', public: true },
          { name: 'Basil', tag: 'herb', owner: 'alice' },
        ],
      }));
      expired = (await mintToken(store, 'alice', { expiresAt: new Date(Date.now() - 60_000) })).token;
      const toRevoke = await mintToken(store, 'alice');
      await store.tokens.revoke(toRevoke.id);
      revoked = toRevoke.token;
      server = await serve(store, { metricsPort: 0, webhookAllowPrivate: true });
      await settleChangeFeed(store);
    });

    after(() => server?.stop());

    it('listens on its own port, on 127.0.0.1 by default, and the public port has no /metrics', async () => {
      assert.ok(server.metricsUrl, 'an admin URL is reported');
      assert.match(server.metricsUrl, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      assert.notEqual(new URL(server.metricsUrl).port, new URL(server.url).port);
      for (const path of ['/metrics', '/metrics/', '/metrics?x=1']) {
        assertError(await rawRequest(server.url, path), 404, 40401);
      }
      // The admin listener serves nothing else either.
      assertError(await uncheckedRequest(new URL(server.metricsUrl).origin, '/plants', bearer(tokens.alice!)), 404, 40401);
    });

    it('counts requests by route pattern and status, times them, and counts auth failures by reason', async () => {
      const before = await scrape(server.metricsUrl!);
      const plants = (headers = {}) => rawRequest(server.url, '/plants?limit=5', headers);
      for (let i = 0; i < 3; i++) assert.equal((await plants(bearer(tokens.alice!))).status, 200);
      assert.equal((await plants()).status, 401);
      assert.equal((await plants(bearer(generateToken().token))).status, 401);
      assert.equal((await plants(bearer(expired))).status, 401);
      assert.equal((await plants(bearer(revoked))).status, 401);
      assert.equal((await plants({ authorization: 'Bearer ' })).status, 401);
      assert.equal((await rawRequest(server.url, '/no/such/path/12345')).status, 404);
      assert.equal((await rawRequest(server.url, '/plants', {}, 'DELETE')).status, 405);
      const after = await scrape(server.metricsUrl!);

      const requests = (labels: Record<string, string>) => delta(before, after, 'plantstore_http_requests_total', labels);
      assert.equal(requests({ method: 'GET', route: '/plants', status: '200' }), 3);
      assert.equal(requests({ method: 'GET', route: '/plants', status: '401' }), 5);
      assert.equal(requests({ method: 'GET', route: '(unmatched)', status: '404' }), 1);
      assert.equal(requests({ method: 'DELETE', route: '(unmatched)', status: '405' }), 1);
      // Route patterns only: no raw path or query string ever becomes a label value.
      for (const sample of after) {
        for (const value of Object.values(sample.labels)) assert.doesNotMatch(value, /no\/such|limit=|12345/, `${sample.name} ${value}`);
      }

      const count = (labels: Record<string, string>) => delta(before, after, 'plantstore_http_request_duration_seconds_count', labels);
      assert.equal(count({ method: 'GET', route: '/plants' }), 8);
      assert.ok(delta(before, after, 'plantstore_http_request_duration_seconds_sum', { method: 'GET', route: '/plants' }) > 0);
      const inf = delta(before, after, 'plantstore_http_request_duration_seconds_bucket', { method: 'GET', route: '/plants', le: '+Inf' });
      assert.equal(inf, 8, 'every observation is in the +Inf bucket');
      const buckets = after.filter((s) => s.name === 'plantstore_http_request_duration_seconds_bucket' && s.labels.route === '/plants');
      assert.ok(buckets.length > 5, 'several buckets');
      const counts = buckets.map((s) => s.value);
      assert.deepEqual(
        counts,
        [...counts].sort((a, b) => a - b),
        'buckets are cumulative',
      );

      const failures = (reason: string) => delta(before, after, 'plantstore_auth_failures_total', { reason });
      assert.equal(failures('missing_credentials'), 1);
      assert.equal(failures('unknown'), 1);
      assert.equal(failures('expired'), 1);
      assert.equal(failures('revoked'), 1);
      assert.equal(failures('malformed'), 1);
      // Every reason is exported from the start, at zero until it happens.
      assert.equal(sampleValue(after, 'plantstore_auth_failures_total', { reason: 'bad_signature' }), 0);
    });

    it('counts and times reads and changes of one plant under the one route pattern of every plant', async () => {
      const [fern, basil] = plants as [AddedPlant, AddedPlant];
      const path = (plant: AddedPlant) => `/plants/${plant.id}`;
      const before = await scrape(server.metricsUrl!);
      const read = await rawRequest(server.url, path(basil), bearer(tokens.alice!));
      assert.equal(read.status, 200);
      const etag = String(read.headers.etag);
      assert.equal((await rawRequest(server.url, path(basil), { ...bearer(tokens.alice!), 'if-none-match': etag })).status, 304);
      assert.equal((await rawRequest(server.url, path(basil), bearer(tokens.bob!))).status, 404, "alice's private plant");
      assert.equal((await rawRequest(server.url, '/plants/987654', bearer(tokens.alice!))).status, 404);
      const patch = (plant: AddedPlant, token: string, change: object) =>
        rawRequest(
          server.url,
          path(plant),
          { ...bearer(token), 'content-type': 'application/merge-patch+json' },
          'PATCH',
          JSON.stringify(change),
        );
      assert.equal((await patch(basil, tokens.alice!, { tag: 'kitchen herb' })).status, 200);
      assert.equal((await patch(basil, tokens.alice!, { tag: 'herb' })).status, 200);
      assert.equal((await patch(fern, tokens.alice!, { name: 'Not mine' })).status, 403, "bob's public plant");
      const after = await scrape(server.metricsUrl!);

      const requests = (labels: Record<string, string>) => delta(before, after, 'plantstore_http_requests_total', labels);
      const route = '/plants/:id';
      assert.equal(requests({ method: 'GET', route, status: '200' }), 1);
      assert.equal(requests({ method: 'GET', route, status: '304' }), 1);
      assert.equal(requests({ method: 'GET', route, status: '404' }), 2);
      assert.equal(requests({ method: 'PATCH', route, status: '200' }), 2);
      assert.equal(requests({ method: 'PATCH', route, status: '403' }), 1);
      const count = (method: string) => delta(before, after, 'plantstore_http_request_duration_seconds_count', { method, route });
      assert.equal(count('GET'), 4);
      assert.equal(count('PATCH'), 3);
      // The label is the pattern as a person reads it: never a plant's id, nor the rule the pattern gives its id.
      const routes = new Set(after.flatMap((sample) => (sample.labels.route === undefined ? [] : [sample.labels.route])));
      assert.ok(routes.has('/plants/:id') && routes.has('/plants'), [...routes].join(' '));
      for (const label of routes) assert.ok(label === '(unmatched)' || !/[0-9()]/.test(label), label);
    });

    it('counts token and page cache hits and misses, and times the hot-path queries', async () => {
      await settleChangeFeed(store);
      const before = await scrape(server.metricsUrl!);
      // A token and a page never seen before: the first request misses both caches, the next two hit.
      const { token } = await mintToken(store, 'bob');
      await settleChangeFeed(store);
      for (let i = 0; i < 3; i++) assert.equal((await rawRequest(server.url, '/plants?limit=7', bearer(token))).status, 200);
      const after = await scrape(server.metricsUrl!);

      const cache = (name: string, cache: string) => delta(before, after, name, { cache });
      assert.equal(cache('plantstore_cache_misses_total', 'token'), 1);
      assert.equal(cache('plantstore_cache_hits_total', 'token'), 2);
      assert.equal(cache('plantstore_cache_misses_total', 'page'), 1);
      assert.equal(cache('plantstore_cache_hits_total', 'page'), 2);
      assert.equal(sampleValue(after, 'plantstore_cache_hits_total', { cache: 'jwt_user' }), 0);

      const queries = (query: string) => delta(before, after, 'plantstore_db_query_duration_seconds_count', { query });
      // One read takes the token and the page it asks for.
      assert.equal(queries('find_token_with_page'), 1, 'only the cache miss reads the token, and its page with it');
      assert.equal(queries('find_token') + queries('visible_plants'), 0);
      assert.ok(delta(before, after, 'plantstore_db_query_duration_seconds_sum', { query: 'find_token_with_page' }) > 0);
    });

    it('a change drops only the cached answers it can affect', async () => {
      await store.users.add('carol', false);
      const { token } = await mintToken(store, 'carol');
      await settleChangeFeed(store);
      const get = async () => assert.equal((await rawRequest(server.url, '/plants?limit=5', bearer(token))).status, 200);
      await get();
      /** Token and page misses over one request after `change`. */
      const missesAfter = async (change: () => Promise<unknown>) => {
        await change();
        await settleChangeFeed(store);
        const before = await scrape(server.metricsUrl!);
        await get();
        const after = await scrape(server.metricsUrl!);
        const misses = (cache: string) => delta(before, after, 'plantstore_cache_misses_total', { cache });
        return { token: misses('token'), page: misses('page') };
      };
      assert.deepEqual(await missesAfter(async () => {}), { token: 0, page: 0 }, 'nothing changed');
      assert.deepEqual(
        await missesAfter(() => addPlant(store, { name: 'Fern', owner: 'bob', public: false })),
        { token: 0, page: 0 },
        "another user's plant",
      );
      // Carol's pages change; her token's answer (her id and admin flag) does not.
      assert.deepEqual(
        await missesAfter(() => addPlant(store, { name: 'Ivy', owner: 'carol', public: false })),
        { token: 0, page: 1 },
        'her own plant',
      );
      assert.deepEqual(await missesAfter(() => store.users.setAdmin('carol', true)), { token: 1, page: 1 }, 'her admin flag');
      assert.deepEqual(await missesAfter(() => store.users.setAdmin('carol', false)), { token: 1, page: 1 }, 'her admin flag back');
    });

    it('reports the version, the backend, default process metrics and (PostgreSQL) the pool', async () => {
      const samples = await scrape(server.metricsUrl!);
      assert.equal(sampleValue(samples, 'plantstore_info', { version: PACKAGE_VERSION, backend: backend.name }), 1);
      assert.ok((sampleValue(samples, 'process_cpu_user_seconds_total') ?? 0) > 0);
      assert.ok((sampleValue(samples, 'nodejs_heap_size_used_bytes') ?? 0) > 0);
      // Every hot-path query has its series from the start: one the store times without one would fail its request.
      for (const query of ['ping', 'find_token', 'find_token_with_page', 'find_user', 'visible_plants', 'all_plants', 'filtered_plants']) {
        assert.notEqual(sampleValue(samples, 'plantstore_db_query_duration_seconds_count', { query }), undefined, query);
      }
      const pool = (name: string) => sampleValue(samples, name, { pool: 'primary' });
      if (backend.name === 'postgres') {
        assert.ok((pool('plantstore_db_pool_connections') ?? 0) >= 1, 'queries have opened a connection');
        assert.ok((pool('plantstore_db_pool_idle_connections') ?? -1) >= 0);
        assert.ok((pool('plantstore_db_pool_idle_connections') ?? 0) <= pool('plantstore_db_pool_connections')!);
        assert.equal(pool('plantstore_db_pool_waiting_requests'), 0);
      } else {
        assert.equal(pool('plantstore_db_pool_connections'), undefined, 'SQLite has no pool');
      }
    });

    it('counts webhook deliveries by outcome and shows the backlog and the age of its oldest event', async () => {
      const receiver = await startReceiver((_, path) => ({ status: path === '/ok' ? 200 : 500 }));
      const base = receiver.base;
      const endpoints = [
        await store.webhooks.addEndpoint(`${base}/ok`, newWebhookSecret()),
        await store.webhooks.addEndpoint(`${base}/fail`, newWebhookSecret()),
      ];
      try {
        await addPlant(store, { name: 'Hooked', owner: 'alice', public: false });
        const outcome = (samples: Sample[], name: string) =>
          sampleValue(samples, 'plantstore_webhook_deliveries_total', { outcome: name }) ?? 0;
        const settled = (samples: Sample[]) =>
          outcome(samples, 'delivered') >= 1 &&
          outcome(samples, 'retry') >= 1 &&
          // An attempt is counted when it ends, and its outcome written to the outbox a moment later.
          sampleValue(samples, 'plantstore_webhook_backlog') === 1;
        let samples = await scrape(server.metricsUrl!);
        for (let i = 0; i < 100 && !settled(samples); i++) {
          await new Promise((resolve) => setTimeout(resolve, 50));
          samples = await scrape(server.metricsUrl!);
        }
        assert.equal(outcome(samples, 'delivered'), 1);
        assert.equal(outcome(samples, 'retry'), 1);
        assert.equal(outcome(samples, 'gone'), 0, 'every outcome is exported');
        assert.equal(sampleValue(samples, 'plantstore_webhook_backlog'), 1, 'the failing delivery waits');
        assert.ok((sampleValue(samples, 'plantstore_webhook_oldest_pending_seconds') ?? -1) >= 0);
      } finally {
        for (const endpoint of endpoints) await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });
  });
}

for (const backend of BACKENDS) {
  describe(`Prometheus metrics while the database is away [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let server: RunningServer;

    before(async () => {
      db = await backend.freshDb();
      server = await serve(await openStore({ db }), { metricsPort: 0 });
    });

    after(() => server?.stop());

    it('serves every other series with 200, leaves the backlog gauges out and counts the failed read', async () => {
      assert.equal((await rawRequest(server.url, '/plants')).status, 401);
      const up = await scrape(server.metricsUrl!);
      assert.equal(sampleValue(up, 'plantstore_webhook_backlog'), 0);

      await backend.takeAway(db);
      await eventually('not ready once the database is away', async () => (await fetch(`${server.url}/readyz`)).status === 503);
      const away = await scrape(server.metricsUrl!);
      assert.equal(sampleValue(away, 'plantstore_info', { backend: backend.name }), 1);
      assert.equal(sampleValue(away, 'plantstore_http_requests_total', { method: 'GET', route: '/plants', status: '401' }), 1);
      assert.ok((sampleValue(away, 'plantstore_http_requests_total', { method: 'GET', route: '/readyz', status: '503' }) ?? 0) >= 1);
      assert.ok((sampleValue(away, 'process_cpu_user_seconds_total') ?? 0) > 0);
      // No value rather than the last one: a backlog read before the outage is no longer known to hold.
      assert.equal(sampleValue(away, 'plantstore_webhook_backlog'), undefined);
      assert.equal(sampleValue(away, 'plantstore_webhook_oldest_pending_seconds'), undefined);
      assert.equal(sampleValue(up, 'plantstore_webhook_backlog_read_failures_total'), 0, 'exported from the start');
      assert.equal(sampleValue(away, 'plantstore_webhook_backlog_read_failures_total'), 1, 'one read for both gauges');

      // A database at the path again: the gauges are back at the next scrape.
      await (await openStore({ db })).close();
      await eventually('ready again', async () => (await fetch(`${server.url}/readyz`)).status === 200);
      const back = await scrape(server.metricsUrl!);
      assert.equal(sampleValue(back, 'plantstore_webhook_backlog'), 0);
      assert.equal(sampleValue(back, 'plantstore_webhook_oldest_pending_seconds'), 0);
      assert.equal(delta(away, back, 'plantstore_webhook_backlog_read_failures_total'), 0);
    });
  });
}

describe('answers no onResponse hook sees, counted under the unmatched route', () => {
  let store: Store;
  let server: RunningServer;
  let token: string;
  let port: number;

  before(async () => {
    const backend = BACKENDS.find((b) => b.name === 'sqlite') ?? BACKENDS[0]!;
    store = await backend.open();
    token = (await seed(store, { users: [{ name: 'alice' }], plants: [] })).tokens.alice!;
    // Short timeouts, so that the 408s come within the test.
    server = await serve(store, {
      metricsPort: 0,
      maxUrlBytes: '2048',
      maxHeaderBytes: '8192',
      headersTimeoutMs: '600',
      requestTimeoutMs: '1200',
    });
    port = Number(new URL(server.url).port);
  });

  after(() => server?.stop());

  it('counts the answers written straight to the socket and the router’s refusals, without timing them', async () => {
    const before = await scrape(server.metricsUrl!);
    // Refused by the HTTP parser or its timeouts: no request was read, so no method either.
    assert.equal((await sendRaw(port, `GET /plants HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(9000)}\r\n\r\n`)).status, 431);
    assert.equal((await sendRaw(port, 'GARBAGE\r\n\r\n')).status, 400);
    assert.equal((await sendRaw(port, 'GET /plants HTTP/1.1\r\nHost: x\r\nX-Slow: a')).status, 408, 'headers never end');
    // A request that was read, and its body not in time: its method, and still no route answered it.
    const slowBody =
      `POST /plants HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${token}\r\n` +
      'Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{';
    assert.equal((await sendRaw(port, slowBody)).status, 408, 'body never ends');
    // Answered in the server's events, before Fastify.
    assert.equal((await sendRaw(port, 'CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n')).status, 400);
    assert.equal((await sendRaw(port, 'GET /plants HTTP/1.1\r\nHost: x\r\nExpect: nothing\r\nConnection: close\r\n\r\n')).status, 417);
    // The router's refusal of a path it cannot decode (frameworkErrors), beside a 414 the onResponse hook counts.
    assert.equal((await sendRaw(port, 'GET /plants/%E0%A4%A HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')).status, 400);
    assert.equal((await sendRaw(port, `GET /${'x'.repeat(2100)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`)).status, 414);
    const after = await scrape(server.metricsUrl!);

    const requests = (method: string, status: string) =>
      delta(before, after, 'plantstore_http_requests_total', { method, route: '(unmatched)', status });
    assert.deepEqual(
      {
        431: requests('(unknown)', '431'),
        400: requests('(unknown)', '400'),
        408: requests('(unknown)', '408'),
        'POST 408': requests('POST', '408'),
        'CONNECT 400': requests('CONNECT', '400'),
        'GET 417': requests('GET', '417'),
        'GET 400': requests('GET', '400'),
        'GET 414': requests('GET', '414'),
      },
      { 431: 1, 400: 1, 408: 1, 'POST 408': 1, 'CONNECT 400': 1, 'GET 417': 1, 'GET 400': 1, 'GET 414': 1 },
    );
    const counted = (samples: Sample[]) =>
      samples.filter((s) => s.name === 'plantstore_http_requests_total').reduce((sum, s) => sum + s.value, 0);
    assert.equal(counted(after) - counted(before), 8, 'each answer once, under no other labels');
    // Not timed: most have no request whose start the server saw.
    assert.equal(
      sampleValue(after, 'plantstore_http_request_duration_seconds_count', { method: '(unknown)', route: '(unmatched)' }),
      undefined,
    );
  });
});

describe('metrics off (the default)', () => {
  it('opens no admin listener and collects nothing', async () => {
    const backend = BACKENDS.find((b) => b.name === 'sqlite') ?? BACKENDS[0]!;
    const server = await serve(await backend.open());
    try {
      assert.equal(server.metricsUrl, undefined);
      assert.equal(server.app.metrics, null);
      assertError(await rawRequest(server.url, '/metrics'), 404, 40401);
    } finally {
      await server.stop();
    }
  });

  it('is turned on by PLANTSTORE_METRICS_PORT, and --metrics-port wins over it', () => {
    assert.equal(loadConfig({}, {}).server.metrics, undefined);
    assert.deepEqual(loadConfig({}, { PLANTSTORE_METRICS_PORT: '9464' }).server.metrics, { host: '127.0.0.1', port: 9464 });
    assert.deepEqual(
      loadConfig({ metricsPort: '9100' }, { PLANTSTORE_METRICS_PORT: '9464', PLANTSTORE_METRICS_HOST: '0.0.0.0' }).server.metrics,
      {
        host: '0.0.0.0',
        port: 9100,
      },
    );
    assert.throws(() => loadConfig({}, { PLANTSTORE_METRICS_PORT: 'nine' }), /invalid PLANTSTORE_METRICS_PORT "nine"/);
    // Validated with the port unset too, as every setting is, and named by where it came from.
    for (const blank of ['', '  ']) {
      assert.throws(() => loadConfig({}, { PLANTSTORE_METRICS_HOST: blank }), /invalid PLANTSTORE_METRICS_HOST: must not be empty/);
      assert.throws(() => loadConfig({ metricsHost: blank }, {}), /invalid --metrics-host: must not be empty/);
      assert.throws(() => loadConfig({}, { PLANTSTORE_JWT_USER_CLAIM: blank }), /invalid PLANTSTORE_JWT_USER_CLAIM: must not be empty/);
    }
  });

  it('refuses the HTTP port for metrics where the two would share an address, before anything listens', () => {
    const taken = /the metrics port \(--metrics-port, PLANTSTORE_METRICS_PORT\) must differ from the HTTP port: both are 8080/;
    assert.throws(() => loadConfig({}, { PLANTSTORE_METRICS_PORT: '8080' }), taken);
    assert.throws(() => loadConfig({ port: '9000', metricsPort: '9000', host: '0.0.0.0' }, {}), /both are 9000/);
    assert.throws(() => loadConfig({ port: '9000', metricsPort: '9000', metricsHost: '::' }, {}), /both are 9000/);
    // Two addresses of one host may each take the port; 0 is any free port, for each listener its own.
    assert.equal(loadConfig({ port: '9000', metricsPort: '9000', host: '127.0.0.2' }, {}).server.metrics?.port, 9000);
    assert.equal(loadConfig({ port: '0', metricsPort: '0' }, {}).server.metrics?.port, 0);
  });

  it('compares the addresses the hosts stand for, not how they are written', () => {
    const metricsOn = (host: string, metricsHost: string) =>
      loadConfig({ port: '9000', metricsPort: '9000', host, metricsHost }, {}).server.metrics?.port;
    for (const [host, metricsHost] of [
      // localhost is loopback (RFC 6761), whichever of its addresses the resolver gives first.
      ['127.0.0.1', 'localhost'],
      ['localhost', '::1'],
      ['LOCALHOST.', '127.0.0.1'],
      ['127.0.0.1', 'api.localhost'],
      // One address, written otherwise.
      ['127.0.0.1', '127.1'],
      ['127.0.0.1', '::ffff:127.0.0.1'],
      ['::1', '0:0:0:0:0:0:0:1'],
      ['[::1]', '::1'],
      ['Metrics.Example', 'metrics.example.'],
      // Every address, written otherwise.
      ['0', '127.0.0.2'],
      ['192.0.2.7', '0:0:0:0:0:0:0:0'],
      ['::ffff:0.0.0.0', 'localhost'],
    ]) {
      assert.throws(() => metricsOn(host!, metricsHost!), /must differ from the HTTP port: both are 9000/, `${host} and ${metricsHost}`);
    }
    for (const [host, metricsHost] of [
      ['127.0.0.2', 'localhost'],
      ['::1', '127.0.0.1'],
      ['192.0.2.7', '192.0.2.8'],
      ['api.example', 'metrics.example'],
    ]) {
      assert.equal(metricsOn(host!, metricsHost!), 9000, `${host} and ${metricsHost}`);
    }
  });
});

describe('serve --workers N with metrics', () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'plantstore-metrics-'));
  });
  after(() => rm(dir, { recursive: true, force: true }));

  it('the primary serves the sum of every worker’s metrics', async () => {
    const db = join(dir, 'plants.db');
    assert.equal((await runCli(db, ['migrate'])).code, 0);
    const child = spawn(
      process.execPath,
      [BIN, '--db', db, 'serve', '--workers', '2', '--port', '0', '--metrics-port', '0', '--log-level', 'info'],
      {
        stdio: ['ignore', 'pipe', 'pipe'],
        env: { ...process.env, PLANTSTORE_DB: '' },
      },
    );
    let out = '';
    child.stdout.on('data', (chunk: Buffer) => (out += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (out += chunk.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
    try {
      const deadline = Date.now() + 45_000;
      const listening = () => [...out.matchAll(/Server listening at (http:\/\/127\.0\.0\.1:\d+)/g)].map((m) => m[1]!);
      while ((listening().length < 2 || !/metrics listening at/.test(out)) && Date.now() < deadline && child.exitCode === null) {
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(listening().length, 2, out);
      const metricsUrl = /metrics listening at (http:\/\/127\.0\.0\.1:\d+\/metrics)/.exec(out)![1]!;
      const publicUrl = listening()[0]!;

      // Connections are spread over both workers; only a true sum gives the exact total.
      const N = 12;
      for (let i = 0; i < N; i++) assert.equal((await rawRequest(publicUrl, '/plants')).status, 401);
      const samples = await scrape(metricsUrl);
      assert.equal(sampleValue(samples, 'plantstore_http_requests_total', { method: 'GET', route: '/plants', status: '401' }), N);
      assert.equal(sampleValue(samples, 'plantstore_auth_failures_total', { reason: 'missing_credentials' }), N);
      assert.equal(sampleValue(samples, 'plantstore_http_request_duration_seconds_count', { method: 'GET', route: '/plants' }), N);
      assertError(await rawRequest(publicUrl, '/metrics'), 404, 40401);
      // Not a count: each worker's 1 is the same fact, not summed.
      assert.equal(sampleValue(samples, 'plantstore_info', { version: PACKAGE_VERSION, backend: 'sqlite' }), 1);
    } finally {
      if (child.exitCode === null) child.kill('SIGTERM');
      assert.equal(await exited, 0, out);
    }
  });
});
