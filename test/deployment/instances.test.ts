import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { eventually } from '../helpers/assertions.js';
import { dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';
import { runCli, spawnServe, type ServeProcess } from '../helpers/processes.js';

const skip = await requirePostgres();

async function ok(db: string, args: string[]): Promise<string> {
  const run = await runCli(db, args);
  assert.equal(run.code, 0, `plantstore ${args.join(' ')}: ${run.stderr}`);
  return run.stdout.trim();
}

async function listing(server: ServeProcess, token: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

/** Polls every instance until all agree on `expected`; fails after one second. */
async function allWithinOneSecond(servers: ServeProcess[], token: string, expected: { status: number; body?: unknown }): Promise<void> {
  const agrees = (r: { status: number; body: unknown }) =>
    r.status === expected.status && (expected.body === undefined || JSON.stringify(r.body) === JSON.stringify(expected.body));
  await eventually('every instance agrees', () => Promise.all(servers.map((s) => listing(s, token))), {
    until: (seen) => seen.every(agrees),
    timeoutMs: 1_000,
  });
}

describe('two server processes on one PostgreSQL database behave as one service', { skip }, () => {
  const { schema, url } = freshSchema();
  const servers: ServeProcess[] = [];
  let token: string;
  let fernId: string;

  before(async () => {
    await ok(url, ['migrate']);
    await ok(url, ['users', 'add', 'alice']);
    await ok(url, ['users', 'add', 'bob']);
    fernId = await ok(url, ['plants', 'add', '--name', 'Fern', '--owner', 'bob']);
    await ok(url, ['grants', 'add', fernId, '--user', 'alice']);
    token = await ok(url, ['tokens', 'create', 'alice']);
    servers.push(await spawnServe(url), await spawnServe(url));
  });

  after(async () => {
    for (const s of servers) assert.equal(await s.stop(), 0, 'each instance drains and exits 0');
    await dropSchema(schema);
  });

  it('gives the same answers on every instance', async () => {
    await allWithinOneSecond(servers, token, { status: 200, body: [{ name: 'Fern' }] });
  });

  it('shows a plant added with the CLI on every instance within one second', async () => {
    await ok(url, ['plants', 'add', '--name', 'Aloe', '--tag', 'succulent', '--owner', 'alice']);
    await allWithinOneSecond(servers, token, { status: 200, body: [{ name: 'Fern' }, { name: 'Aloe', tag: 'succulent' }] });
  });

  it('hides a plant whose grant was removed, on every instance within one second', async () => {
    await ok(url, ['grants', 'remove', fernId, '--user', 'alice']);
    await allWithinOneSecond(servers, token, { status: 200, body: [{ name: 'Aloe', tag: 'succulent' }] });
  });

  it('refuses a revoked token on every instance within one second', async () => {
    const [listed] = JSON.parse(await ok(url, ['tokens', 'list', '--json', '--user', 'alice'])) as { id: number }[];
    await ok(url, ['tokens', 'revoke', String(listed!.id)]);
    await allWithinOneSecond(servers, token, { status: 401 });
  });
});

describe('serve --workers', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-workers-'));
  const db = join(dir, 'plants.db');
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('runs N workers on one port, replaces a worker that dies, and drains all on SIGTERM', async () => {
    await ok(db, ['users', 'add', 'alice']);
    await ok(db, ['plants', 'add', '--name', 'Fern', '--owner', 'alice']);
    const token = await ok(db, ['tokens', 'create', 'alice']);
    const server = await spawnServe(db, ['--workers', '2']);
    const workerPids = () => [...server.output().matchAll(/"pid":(\d+),[^\n]*Server listening/g)].map((m) => Number(m[1]));
    const deadline = Date.now() + 10_000;
    while (workerPids().length < 2 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
    const [first] = workerPids();
    assert.equal(workerPids().length, 2, server.output());

    process.kill(first!, 'SIGKILL');
    while (workerPids().length < 3 && Date.now() < deadline + 5_000) await new Promise((r) => setTimeout(r, 100));
    assert.equal(workerPids().length, 3, 'a replacement worker started');
    // The primary's line names the worker beside its own pid, not a second "pid" key that log tools read one way or other.
    const replaced = server
      .output()
      .split('\n')
      .find((line) => line.includes('starting a replacement'))!;
    assert.equal(JSON.parse(replaced).workerPid, first);
    assert.equal(replaced.match(/"pid":/g)?.length, 1, replaced);
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
      assert.equal(res.status, 200);
    }
    assert.equal(await server.stop(), 0);
    assert.match(server.output(), /all workers stopped/);
  });

  it('stops with exit 1 and one line a worker when no worker can listen (a port taken), as serve does', { timeout: 30_000 }, async () => {
    const taken = createServer();
    await new Promise<void>((resolve) => taken.listen(0, '127.0.0.1', resolve));
    try {
      const { port } = taken.address() as AddressInfo;
      const started = Date.now();
      const run = await runCli(db, ['serve', '--workers', '2', '--port', String(port)]);
      assert.equal(run.code, 1, run.stdout + run.stderr);
      assert.ok(Date.now() - started < 15_000, 'it stopped instead of replacing workers');
      assert.match(run.stderr, /^plantstore worker: .*EADDRINUSE/m);
      assert.doesNotMatch(run.stderr, /^\s+at /m, 'no stack trace');
      assert.doesNotMatch(run.stdout, /starting a replacement/);
    } finally {
      taken.close();
    }
  });
});
