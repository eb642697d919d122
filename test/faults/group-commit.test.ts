import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { runCli, spawnServe, type ServeProcess } from '../helpers/processes.js';

// A serving SQLite process commits the writes of concurrent requests together (group commit) on a thread of its
// own. What users rely on, tried on a real server process: an acknowledged write survives kill -9 whole (with its
// change-log row and its webhook event, written in the same transaction), and a flood of writes under reads does
// not grow the write-ahead log without bound.

/** POSTs the plant with id `id` (its name says the id); resolves with the status, or 0 when the connection failed. */
function post(server: ServeProcess, agent: Agent, token: string, id: number, name = `plant ${id}`): Promise<number> {
  const body = JSON.stringify({ id, name });
  return new Promise((resolve) => {
    const req = request(
      `${server.url}/plants`,
      {
        method: 'POST',
        agent,
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', 'content-length': Buffer.byteLength(body) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
        res.on('error', () => resolve(0));
      },
    );
    req.on('error', () => resolve(0));
    req.end(body);
  });
}

/** Runs `count` POSTs on `connections` keep-alive connections at once, ids from `first`; calls `each` as they answer. */
async function flood(
  server: ServeProcess,
  token: string,
  {
    first,
    count,
    connections,
    name,
    each,
  }: { first: number; count: number; connections: number; name?: (id: number) => string; each?: (id: number, status: number) => void },
): Promise<void> {
  const agent = new Agent({ keepAlive: true, maxSockets: connections });
  let next = first;
  const end = first + count;
  const worker = async () => {
    while (next < end) {
      const id = next++;
      const status = await post(server, agent, token, id, name?.(id));
      each?.(id, status);
      if (status === 0) return;
    }
  };
  await Promise.all(Array.from({ length: connections }, worker));
  agent.destroy();
}

async function setUp(db: string, serveArgs: string[]): Promise<{ server: ServeProcess; token: string }> {
  const ndjson = '{"type":"user","name":"alice"}\n';
  assert.equal((await runCli(db, ['import', '-'], ndjson)).code, 0);
  const token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();
  return { server: await spawnServe(db, ['--write-rate-limit', 'off', ...serveArgs]), token };
}

describe('group commit on SQLite, on a real server process', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-group-commit-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('keeps every acknowledged write, whole, through kill -9 during a burst', { timeout: 60_000 }, async () => {
    const db = join(dir, 'killed.db');
    // Every plant then raises a webhook event in its own transaction: a half-written plant would lack it.
    const ndjson = '{"type":"user","name":"alice"}\n';
    assert.equal((await runCli(db, ['import', '-'], ndjson)).code, 0);
    assert.equal((await runCli(db, ['webhooks', 'add', 'http://127.0.0.1:9/never-answers', '--webhook-allow-private'])).code, 0);
    const token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();
    const server = await spawnServe(db, ['--write-rate-limit', 'off']);
    const acknowledged: number[] = [];
    await flood(server, token, {
      first: 1,
      count: 5000,
      connections: 32,
      each: (id, status) => {
        if (status === 200) acknowledged.push(id);
        if (acknowledged.length === 300 && server.child.exitCode === null) server.child.kill('SIGKILL');
      },
    });
    await new Promise((resolve) => server.child.once('exit', resolve)).catch(() => {});
    assert.ok(acknowledged.length >= 300, `${acknowledged.length} writes acknowledged before the kill`);

    const sqlite = new BetterSqlite3(db);
    try {
      const stored = new Map(
        (sqlite.prepare('SELECT api_id, name FROM plants').all() as Array<{ api_id: number; name: string }>).map((p) => [p.api_id, p.name]),
      );
      for (const id of acknowledged) assert.equal(stored.get(id), `plant ${id}`, `acknowledged plant ${id}`);
      assert.ok(stored.size < 5000, 'the kill came before the end of the burst');
      const events = sqlite.prepare('SELECT count(*) FROM webhook_events').pluck().get() as number;
      const logged = sqlite.prepare("SELECT count(*) FROM change_log WHERE table_name = 'plants'").pluck().get() as number;
      assert.equal(events, stored.size, 'each stored plant has its event: no write is half there');
      assert.equal(logged, stored.size, 'each stored plant has its change-log row');
      assert.equal(sqlite.pragma('integrity_check', { simple: true }), 'ok');
    } finally {
      sqlite.close();
    }
  });

  it('keeps the write-ahead log bounded under a flood of writes while reads go on', { timeout: 120_000 }, async (t) => {
    const db = join(dir, 'flooded.db');
    const { server, token } = await setUp(db, []);
    let largest = 0;
    let reading = true;
    const sampler = setInterval(() => {
      largest = Math.max(largest, statSync(`${db}-wal`, { throwIfNoEntry: false })?.size ?? 0);
    }, 20);
    const reader = (async () => {
      // A read snapshot is open nearly all the time, as under real traffic.
      while (reading) await fetch(`${server.url}/plants?limit=20`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.text());
    })();
    try {
      // About 100 MB of pages written in all: each plant's kilobyte of name, its indexes, its change-log row.
      await flood(server, token, { first: 1, count: 20_000, connections: 32, name: (id) => `${id} `.padEnd(1000, 'x') });
    } finally {
      reading = false;
      await reader;
      clearInterval(sampler);
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
    const mb = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MB`;
    t.diagnostic(`the WAL reached ${mb(largest)} at most`);
    assert.ok(largest < 48 * 1024 * 1024, `the WAL reached ${mb(largest)}`);
  });
});
