import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { loadConfig } from '../../src/config.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { VERSION } from '../../src/version.js';
import { assertError } from '../helpers/assertions.js';
import { bearer, rawRequest, seed, startApp, type RawResponse, type RunningApp } from '../helpers/http-app.js';

// Connection and size limits of the HTTP server (OWASP API4), over real sockets. Timeouts are made short
// through the configuration so that the slow clients are cut off within a second.

const HEADERS_TIMEOUT_MS = 600;
const KEEP_ALIVE_TIMEOUT_MS = 300;

function open(url: string): Promise<Socket> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: hostname, port: Number(port) }, () => resolve(socket));
    socket.once('error', reject);
  });
}

/** Everything the server sends on `socket` until it closes the connection, and when that happened. */
function untilClosed(socket: Socket): Promise<{ text: string; closedAt: number }> {
  const parts: Buffer[] = [];
  socket.on('data', (part: Buffer) => parts.push(part));
  return new Promise((resolve) => {
    socket.once('close', () => resolve({ text: Buffer.concat(parts).toString('utf8'), closedAt: Date.now() }));
    // A reset is also a way of being closed.
    socket.on('error', () => {});
  });
}

/** One keep-alive request on an open socket; resolves with the status line once a whole response arrived. */
function requestOn(socket: Socket, token: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    const onData = (part: Buffer) => {
      text += part.toString('utf8');
      const end = text.indexOf('\r\n\r\n');
      const length = /content-length: *(\d+)/i.exec(text);
      if (end >= 0 && length && text.length >= end + 4 + Number(length[1])) {
        socket.off('data', onData);
        socket.off('close', onClose);
        resolve(text.split('\r\n', 1)[0]!);
      }
    };
    const onClose = () => reject(new Error(`connection closed before a response: ${text}`));
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.write(`GET /plants?limit=1 HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer ${token}\r\n\r\n`);
  });
}

function parseRawResponse(text: string): RawResponse {
  const [head = '', body = ''] = text.split('\r\n\r\n', 2);
  const [statusLine = '', ...lines] = head.split('\r\n');
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    headers[line.slice(0, colon).toLowerCase()] = line.slice(colon + 1).trim();
  }
  return { status: Number(statusLine.split(' ')[1]), headers, text: body, body: JSON.parse(body) as unknown };
}

describe('HTTP server limits', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;

  before(async () => {
    store = await openStore({ db: ':memory:' });
    token = (await seed(store, { users: [{ name: 'alice' }], plants: [{ name: 'Fern', owner: 'alice', public: true }] })).tokens.alice!;
    server = await startApp(store, {
      config: {
        headersTimeoutMs: HEADERS_TIMEOUT_MS,
        requestTimeoutMs: 2 * HEADERS_TIMEOUT_MS,
        keepAliveTimeoutMs: KEEP_ALIVE_TIMEOUT_MS,
        maxUrlBytes: 2048,
        maxHeaderBytes: 8192,
      },
    });
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('cuts off a slowloris client after the headers timeout (408 Error body) while serving others meanwhile', async () => {
    const slow = await open(server.url);
    const closed = untilClosed(slow);
    const startedAt = Date.now();
    slow.write('GET /plants HTTP/1.1\r\nHost: test\r\n');
    // One header byte every 20 ms: the connection is never idle, but the headers never end.
    const header = `X-Slow: ${'a'.repeat(1000)}`;
    let sent = 0;
    const trickle = setInterval(() => {
      if (!slow.writable || sent >= header.length) return;
      slow.write(header[sent++]!);
    }, 20);
    try {
      let served = 0;
      let done = false;
      void closed.then(() => (done = true));
      while (!done) {
        const res = await rawRequest(server.url, '/plants', bearer(token));
        assert.equal(res.status, 200, 'another client is served while the slow one trickles');
        served++;
        await sleep(50);
      }
      const { text, closedAt } = await closed;
      assert.ok(served > 0, 'at least one other request was served meanwhile');
      assert.ok(closedAt - startedAt >= HEADERS_TIMEOUT_MS - 50, `cut off after ${closedAt - startedAt} ms, not before the timeout`);
      assert.ok(sent < header.length, 'cut off before the headers were complete');
      const answer = parseRawResponse(text);
      assertError(answer, 408, 40801);
      assert.equal(answer.headers['plantstore-version'], VERSION, 'the answer written to the socket names the release too');
    } finally {
      clearInterval(trickle);
      slow.destroy();
    }
  });

  it('closes an idle keep-alive connection after the keep-alive timeout', async () => {
    const socket = await open(server.url);
    try {
      assert.match(await requestOn(socket, token), /^HTTP\/1\.1 200/);
      const idleFrom = Date.now();
      const { closedAt } = await untilClosed(socket);
      assert.ok(closedAt - idleFrom >= KEEP_ALIVE_TIMEOUT_MS - 50, `closed after ${closedAt - idleFrom} ms idle`);
    } finally {
      socket.destroy();
    }
  });

  it('answers 431 with an Error body to headers over the size limit', async () => {
    const res = await rawRequest(server.url, '/plants', { ...bearer(token), 'x-big': 'a'.repeat(9000) });
    assertError(res, 431, 43101);
  });

  it('answers 414 with an Error body to a request target over the URL limit, on any path', async () => {
    assertError(await rawRequest(server.url, `/plants?limit=1&${'a'.repeat(2100)}`, bearer(token)), 414, 41401);
    assertError(await rawRequest(server.url, `/${'x'.repeat(2100)}`), 414, 41401);
    // A path parameter over it too, refused before the router's own bound, which would echo it in a 400.
    const longId = assertError(await rawRequest(server.url, `/plants/${'1'.repeat(2100)}`, bearer(token)), 414, 41401);
    assert.ok(longId.message.length < 200, longId.message);
    assertError(await rawRequest(server.url, `/plants/1/access/users/${'u'.repeat(2100)}`, bearer(token), 'PUT'), 414, 41401);
    // Just under the limit goes through to the router as usual.
    assertError(await rawRequest(server.url, `/${'x'.repeat(2000)}`), 404, 40401);
  });
});

describe('malformed HTTP beside a response in flight', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;

  before(async () => {
    store = await openStore({ db: ':memory:' });
    const plants = Array.from({ length: 3000 }, (_, i) => ({ name: `Plant ${i}`, owner: 'alice', public: true }));
    token = (await seed(store, { users: [{ name: 'alice' }], plants })).tokens.alice!;
    server = await startApp(store);
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('closes the connection without writing an answer into the middle of the response it is sending', async () => {
    for (let round = 0; round < 5; round++) {
      const socket = await open(server.url);
      const closed = untilClosed(socket);
      // The full listing streams; the garbage arrives once its first bytes have, while the rest is still to come.
      socket.once('data', () => socket.write('GARBAGE!!\r\n\r\n'));
      socket.write(`GET /plants HTTP/1.1\r\nHost: test\r\nAuthorization: Bearer ${token}\r\n\r\n`);
      const { text } = await closed;
      assert.match(text, /^HTTP\/1\.1 200/);
      assert.equal(text.indexOf('HTTP/1.1', 1), -1, `round ${round}: a second answer inside the first: ${text.slice(-300)}`);
    }
  });
});

describe('HTTP server connection cap', () => {
  let store: Store;
  let server: RunningApp;
  let token: string;

  before(async () => {
    store = await openStore({ db: ':memory:' });
    token = (await seed(store, { users: [{ name: 'alice' }] })).tokens.alice!;
    server = await startApp(store, { config: { maxConnections: 2 } });
  });
  after(async () => {
    await server?.close();
    await store?.close();
  });

  it('closes connections beyond the cap at once while the open ones keep working', async () => {
    const first = await open(server.url);
    const second = await open(server.url);
    try {
      assert.match(await requestOn(first, token), /^HTTP\/1\.1 200/);
      assert.match(await requestOn(second, token), /^HTTP\/1\.1 200/);

      const third = await open(server.url);
      const { text } = await untilClosed(third);
      assert.equal(text, '', 'nothing is sent on a refused connection');

      // The two connections under the cap are still served, on the same sockets.
      assert.match(await requestOn(first, token), /^HTTP\/1\.1 200/);
      assert.match(await requestOn(second, token), /^HTTP\/1\.1 200/);

      // Once one closes, a new connection is accepted again.
      const gone = untilClosed(second);
      second.end();
      await gone;
      await sleep(50);
      const res = await rawRequest(server.url, '/plants', bearer(token));
      assert.equal(res.status, 200);
    } finally {
      first.destroy();
      second.destroy();
    }
  });
});

describe('configuration of the limits', () => {
  it('reads a Redis URL whole, so that no part of it fails later inside a connection', () => {
    const redisUrl = (text: string | undefined, env: NodeJS.ProcessEnv = {}) => loadConfig({ redisUrl: text }, env).app.redisUrl;
    for (const url of [
      'redis://cache',
      'redis://cache:6380/',
      'redis://cache:6379/0',
      'redis://cache:6379/15',
      // More than the default 16 databases may be configured: the server says whether it has it.
      'redis://cache:6379/99',
      'redis://alice:s%40cret@cache:6379/3',
      'redis://:s3cret@cache',
      'rediss://cache.example:6380/1',
      'redis://[::1]:6379',
    ]) {
      assert.equal(redisUrl(url), url);
    }
    // ioredis turns TLS on for rediss:// written in lower case only.
    assert.equal(redisUrl('  REDISS://cache:6380/2 '), 'rediss://cache:6380/2');
    assert.equal(redisUrl(''), undefined);

    const database = /the path must be a database number: a whole number from 0 to 2147483646/;
    for (const [text, message] of [
      ['redis://127.0.0.1:6379/abc', database],
      ['redis://127.0.0.1:6379/-1', database],
      ['redis://127.0.0.1:6379/1.5', database],
      ['redis://127.0.0.1:6379/0/1', database],
      ['redis://127.0.0.1:6379/%31', database],
      ['redis://127.0.0.1:6379/2147483647', database],
      ['redis://127.0.0.1:99999', /the port must be a whole number from 1 to 65535/],
      ['redis://127.0.0.1:0', /the port must be a whole number from 1 to 65535/],
      ['redis://127.0.0.1:63x9', /the port must be a whole number from 1 to 65535/],
      ['redis:///0', /the host is missing/],
      ['redis://:pw@:6379', /the host is missing/],
      ['redis://cache:6379/0?db=abc', /no \?query or #fragment/],
      ['redis://cache:6379/0?enableOfflineQueue=true', /no \?query or #fragment/],
      ['redis://cache#0', /no \?query or #fragment/],
      ['redis://:%zz@cache', /malformed %-escape/],
      ['redis://ca che', /expected redis\[s\]:\/\/\[\[USER\]:PASSWORD@\]HOST\[:PORT\]\[\/DATABASE\]/],
    ] as const) {
      assert.throws(
        () => redisUrl(text),
        (err: Error) => /^invalid --redis-url "/.test(err.message) && message.test(err.message),
        text,
      );
    }
    // Named as given, and never with its password.
    assert.throws(
      () => redisUrl(undefined, { PLANTSTORE_REDIS_URL: 'redis://alice:hunter2@cache:6379/x' }),
      (err: Error) => {
        assert.match(err.message, /^invalid PLANTSTORE_REDIS_URL "redis:\/\/\*\*\*@cache:6379\/x": the path must be/);
        return true;
      },
    );
    assert.throws(
      () => redisUrl('redis://:p@ss:w@rd@cache:99999'),
      (err: Error) => !err.message.includes('ss:w') && /\*\*\*@cache/.test(err.message),
    );
    assert.throws(
      () => redisUrl('user:hunter2@cache'),
      (err: Error) => !err.message.includes('hunter2'),
    );
  });

  it('has explicit defaults and reads flags over PLANTSTORE_* variables', () => {
    const defaults = loadConfig({}, {}).app;
    assert.deepEqual(defaults.http, {
      maxHeaderBytes: 16_384,
      maxUrlBytes: 8192,
      headersTimeoutMs: 10_000,
      requestTimeoutMs: 30_000,
      keepAliveTimeoutMs: 72_000,
      maxConnections: 10_000,
    });
    assert.deepEqual(defaults.rateLimit, { max: 30_000, windowMs: 60_000 });
    assert.equal(defaults.redisUrl, undefined);
    const env = { PLANTSTORE_RATE_LIMIT: '100/10s', PLANTSTORE_MAX_CONNECTIONS: '50', PLANTSTORE_REDIS_URL: 'redis://cache:6379' };
    const configured = loadConfig({ maxConnections: '20' }, env).app;
    assert.deepEqual(configured.rateLimit, { max: 100, windowMs: 10_000 });
    assert.equal(configured.http.maxConnections, 20);
    assert.equal(configured.redisUrl, 'redis://cache:6379');
    assert.equal(loadConfig({ rateLimit: 'off' }, env).app.rateLimit, undefined);
    assert.deepEqual(loadConfig({ rateLimit: '20/500ms' }).app.rateLimit, { max: 20, windowMs: 500 });
  });

  it('rejects values that make no sense, with a message naming the setting', () => {
    for (const [input, message] of [
      [{ rateLimit: '100' }, /invalid --rate-limit/],
      [{ rateLimit: '0/1m' }, /invalid --rate-limit/],
      [{ rateLimit: '-5/1m' }, /invalid --rate-limit/],
      [{ rateLimit: '10/2d' }, /invalid --rate-limit/],
      [{ redisUrl: 'http://cache:6379' }, /invalid --redis-url "http:\/\/cache:6379": expected a redis:\/\/ or rediss:\/\/ URL/],
      [{ maxConnections: '0' }, /invalid --max-connections/],
      [{ maxHeaderBytes: '100' }, /invalid --max-header-bytes/],
      [{ headersTimeoutMs: '5000', requestTimeoutMs: '1000' }, /must not exceed/],
      [{ maxUrlBytes: '20000' }, /invalid --max-url-bytes 20000: it must not exceed --max-header-bytes \(16384\)/],
    ] as const) {
      assert.throws(() => loadConfig(input, {}), message, JSON.stringify(input));
    }
  });
});
