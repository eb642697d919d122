import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { eventually } from '../helpers/assertions.js';
import { runCli, spawnServe, type ServeProcess } from '../helpers/processes.js';

/**
 * The embedded database "going away": its file is removed or replaced under a running server (a restore
 * gone wrong, an operator's `rm`, a backup moved into place). Serving on from the unreachable old file would
 * serve data the CLI can no longer change (a revoked token would keep working), so the server answers 503
 * while no file is there and reopens whatever file is at the path next, without a restart.
 */

async function seed(db: string, plants: string[]): Promise<string> {
  const lines = [
    '{"type":"user","name":"alice"}',
    ...plants.map((name) => JSON.stringify({ type: 'plant', name, owner: 'alice', public: false })),
  ];
  const imported = await runCli(db, ['import', '-'], `${lines.join('\n')}\n`);
  assert.equal(imported.code, 0, imported.stderr);
  return (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();
}

async function list(server: ServeProcess, token: string): Promise<{ status: number; body: unknown }> {
  const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
  return { status: res.status, body: await res.json() };
}

describe('SQLite database file removed or replaced under a running server', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-gone-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('503 while the file is gone, then the file at the path is served, without a restart', { timeout: 60_000 }, async (t) => {
    const db = join(dir, 'plantstore.db');
    const oldToken = await seed(db, ['Fern']);
    const restored = join(dir, 'restored.db');
    const newToken = await seed(restored, ['Fern', 'Moss']);
    const replacement = join(dir, 'replacement.db');
    const replacementToken = await seed(replacement, ['Cactus']);

    const server = await spawnServe(db);
    try {
      // Cached token and page: the cache must not outlive the file either.
      for (let i = 0; i < 3; i++) assert.deepEqual(await list(server, oldToken), { status: 200, body: [{ name: 'Fern' }] });

      for (const suffix of ['', '-wal', '-shm']) rmSync(`${db}${suffix}`, { force: true });
      const gone = await eventually('503 once the file is removed', () => list(server, oldToken), { until: (r) => r.status === 503 });
      assert.equal((gone.body as { error: number }).error, 50301);
      const ready = await fetch(`${server.url}/readyz`);
      assert.equal(ready.status, 503, 'not ready while the file is gone');

      // A restored backup moved into place: served, and only its tokens count.
      renameSync(restored, db);
      await eventually('the restored file is served', () => list(server, newToken), { until: (r) => r.status === 200 });
      assert.deepEqual(await list(server, newToken), { status: 200, body: [{ name: 'Fern' }, { name: 'Moss' }] });
      assert.equal((await list(server, oldToken)).status, 401, "the removed file's token no longer works");
      assert.equal((await fetch(`${server.url}/readyz`)).status, 200);

      // Replaced in one step, never missing: the server moves to the new file all the same.
      renameSync(replacement, db);
      await eventually('the replacement is served', () => list(server, replacementToken), { until: (r) => r.status === 200 });
      assert.deepEqual(await list(server, replacementToken), { status: 200, body: [{ name: 'Cactus' }] });
      assert.equal((await list(server, newToken)).status, 401, "the replaced file's token no longer works");

      // Not a database at all: 503 and one clear log line, not a crash. Counted from here: the steps above may log a
      // reopen put off while another process still had the old file open.
      const before = server.output().length;
      writeFileSync(join(dir, 'junk'), 'not a database'.repeat(1000));
      renameSync(join(dir, 'junk'), db);
      await eventually('503 for a file that is not a database', () => list(server, replacementToken), { until: (r) => r.status === 503 });
      await new Promise((r) => setTimeout(r, 1500));
      const failures = server
        .output()
        .slice(before)
        .split('\n')
        .filter((line) => line.includes('cannot be opened'));
      assert.equal(failures.length, 1, `said once:\n${failures.join('\n')}`);
      t.diagnostic(failures[0]!.slice(0, 300));
    } finally {
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
  });
});
