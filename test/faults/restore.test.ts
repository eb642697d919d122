import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, renameSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { eventually } from '../helpers/assertions.js';
import { runCli, spawnServe, type ServeProcess } from '../helpers/processes.js';

// Restoring a backup while the service runs, the one way the README documents: a copy made with SQLite's backup
// (`.backup`, VACUUM INTO), moved over the database file in one step. What the file at the path holds is what is
// served, and what it holds after the service stops: nothing written to the old file's log since the backup.

const ndjson = (records: object[]) => records.map((r) => JSON.stringify(r)).join('\n') + '\n';

async function seed(db: string, user: string, plants: string[]): Promise<string> {
  const records = [{ type: 'user', name: user }, ...plants.map((name) => ({ type: 'plant', name, owner: user, public: false }))];
  assert.equal((await runCli(db, ['import', '-'], ndjson(records))).code, 0);
  return (await runCli(db, ['tokens', 'create', user])).stdout.trim();
}

async function names(server: ServeProcess, token: string): Promise<{ status: number; names: string[] }> {
  const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
  const body = (await res.json()) as Array<{ name: string }>;
  return { status: res.status, names: res.status === 200 ? body.map((p) => p.name) : [] };
}

const post = (server: ServeProcess, token: string, id: number, name: string) =>
  fetch(`${server.url}/plants`, {
    method: 'POST',
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: JSON.stringify({ id, name }),
  });

/** What a file holds once no server has it open: the plants' names in catalogue order. */
function storedNames(db: string): string[] {
  const sqlite = new BetterSqlite3(db, { readonly: true });
  try {
    return sqlite.prepare('SELECT name FROM plants ORDER BY id').pluck().all() as string[];
  } finally {
    sqlite.close();
  }
}

describe('restoring a SQLite backup under a running server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-restore-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('serves a backup of the same database as it is, without what was written since', { timeout: 60_000 }, async () => {
    const db = join(dir, 'same.db');
    const token = await seed(db, 'alice', ['one', 'two']);
    const server = await spawnServe(db);
    try {
      const backup = join(dir, 'same-backup.db');
      const source = new BetterSqlite3(db);
      source.exec(`VACUUM INTO '${backup}'`);
      source.close();
      for (const [id, name] of [
        [103, 'three'],
        [104, 'four'],
      ] as const)
        assert.equal((await post(server, token, id, name)).status, 200);
      assert.deepEqual((await names(server, token)).names, ['one', 'two', 'three', 'four']);
      renameSync(backup, db);
      await eventually('the backup is served', () => names(server, token), { until: (r) => r.names.length === 2 });
      // Served as it is for good: nothing of the old log comes back later.
      await new Promise((resolve) => setTimeout(resolve, 1200));
      assert.deepEqual(await names(server, token), { status: 200, names: ['one', 'two'] });
    } finally {
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
    assert.deepEqual(storedNames(db), ['one', 'two'], 'the file holds the backup once the server has stopped');
  });

  it("serves a backup of another database with its own users' tokens and plants", { timeout: 60_000 }, async () => {
    const db = join(dir, 'other.db');
    const aliceToken = await seed(db, 'alice', ['one']);
    const other = join(dir, 'other-backup.db');
    const bobPlants = Array.from({ length: 30 }, (_, i) => `bob's ${i}`);
    const bobToken = await seed(other, 'bob', bobPlants);
    const server = await spawnServe(db);
    try {
      for (let id = 100; id < 110; id++) assert.equal((await post(server, aliceToken, id, `alice's ${id}`)).status, 200);
      renameSync(other, db);
      await eventually("the other database's token is accepted", () => names(server, bobToken), { until: (r) => r.status === 200 });
      await new Promise((resolve) => setTimeout(resolve, 1200));
      assert.deepEqual(await names(server, bobToken), { status: 200, names: bobPlants });
      assert.equal((await names(server, aliceToken)).status, 401);
    } finally {
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
    assert.deepEqual(storedNames(db), bobPlants);
  });

  it('with two workers, both serve the backup, the second once the first is writing to it', { timeout: 60_000 }, async () => {
    const db = join(dir, 'workers.db');
    const token = await seed(db, 'alice', ['one']);
    const backup = join(dir, 'workers-backup.db');
    const source = new BetterSqlite3(db);
    source.exec(`VACUUM INTO '${backup}'`);
    source.close();
    const server = await spawnServe(db, ['--workers', '2']);
    let writing = true;
    let id = 200;
    // Creates all along, from four clients, so that the worker that opens the backup first writes its log before
    // the other looks.
    const writer = Promise.all(
      Array.from({ length: 4 }, async () => {
        while (writing) await (await post(server, token, id++, `flood ${id}`).catch(() => undefined))?.body?.cancel();
      }),
    );
    const later = ['after 1', 'after 2', 'after 3', 'after 4', 'after 5', 'after 6'];
    try {
      await eventually('both workers listen', () => server.output(), { until: (out) => out.split('Server listening at').length === 3 });
      // The old file held open a moment by another process: each worker then opens the backup at its own next
      // look, one after the other.
      const holder = spawn(
        process.execPath,
        [
          '-e',
          `const db = new (require('better-sqlite3'))(${JSON.stringify(db)}); console.log('open'); process.stdin.on('end', () => db.close()).resume();`,
        ],
        { stdio: ['pipe', 'pipe', 'inherit'] },
      );
      await once(holder.stdout, 'data');
      renameSync(backup, db);
      await eventually('both workers wait for the holder', () => server.output(), {
        until: (out) => out.split(`is still open in process ${holder.pid}`).length >= 3,
      });
      holder.stdin.end();
      await once(holder, 'exit');
      // Each request on a connection of its own, so that the two workers take turns answering.
      const allServe = async () => {
        await new Promise((resolve) => setTimeout(resolve, 250));
        const answers = await Promise.all(
          Array.from({ length: 16 }, () => fetch(`${server.url}/readyz`, { headers: { connection: 'close' } }).then((r) => r.status)),
        );
        return answers.every((status) => status === 200);
      };
      await eventually('both workers serve the backup', allServe, { timeoutMs: 15_000 });
      writing = false;
      await writer;
      for (const [i, name] of later.entries()) {
        const res = await fetch(`${server.url}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', connection: 'close' },
          body: JSON.stringify({ id: 10_000_000 + i, name }),
        });
        assert.equal(res.status, 200, await res.text());
      }
    } finally {
      writing = false;
      await writer;
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
    const stored = storedNames(db);
    assert.equal(stored[0], 'one');
    assert.deepEqual(stored.slice(-later.length), later, 'what both workers acknowledged once serving the backup is in it');
  });

  it('waits until no other process has the old file open, even idle, before it serves the new one', { timeout: 60_000 }, async () => {
    const db = join(dir, 'held.db');
    const token = await seed(db, 'alice', ['one']);
    const backup = join(dir, 'held-backup.db');
    const source = new BetterSqlite3(db);
    source.exec(`VACUUM INTO '${backup}'`);
    source.close();
    const server = await spawnServe(db);
    // Another process with the file open and nothing more, as a sqlite3 shell between two commands: no lock shows it.
    const holder = spawn(
      process.execPath,
      [
        '-e',
        `const db = new (require('better-sqlite3'))(${JSON.stringify(db)}); console.log('open'); process.stdin.on('end', () => db.close()).resume();`,
      ],
      { stdio: ['pipe', 'pipe', 'inherit'] },
    );
    try {
      await once(holder.stdout, 'data');
      assert.equal((await post(server, token, 102, 'two')).status, 200);
      renameSync(backup, db);
      await eventually('the server says why it waits', () => server.output(), {
        until: (out) => out.includes(`is still open in process ${holder.pid}`),
      });
      assert.equal((await fetch(`${server.url}/readyz`)).status, 503);
      assert.equal((await names(server, token)).status, 503);
      holder.stdin.end();
      await once(holder, 'exit');
      await eventually('the backup is served once the old file is closed', () => names(server, token), {
        until: (r) => r.status === 200,
      });
      assert.deepEqual(await names(server, token), { status: 200, names: ['one'] });
    } finally {
      holder.kill();
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
    assert.deepEqual(storedNames(db), ['one']);
  });
});
