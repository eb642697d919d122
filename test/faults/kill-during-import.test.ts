import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { eventually } from '../helpers/assertions.js';
import { adminQuery } from '../helpers/postgres.js';
import { assertServes, BIN, runCli } from '../helpers/processes.js';

/**
 * `kill -9` in the middle of `plantstore import`: the import is one transaction, so the database must hold
 * what it held before (none of the import), open cleanly and serve. The input is streamed on stdin and only
 * its first half is sent before the kill, so the kill cannot land after the commit: the importer has not
 * yet seen the end of its input. Before killing, the test waits for proof that the import is under way: the
 * records sent were read (the pipe drained), and SQLite's write lock is held / PostgreSQL's non-transactional
 * id sequence has moved for the first batch of plants.
 */

const PLANTS = 30_000;
const USERS = 50;

function* largeCatalogue(): Generator<string> {
  for (let u = 0; u < USERS; u++) yield `${JSON.stringify({ type: 'user', name: `bulk${u}` })}\n`;
  for (let p = 0; p < PLANTS; p++) {
    const plant = {
      type: 'plant',
      name: `Bulk plant #${p}`,
      tag: 'bulk',
      owner: `bulk${p % USERS}`,
      public: p % 3 === 0,
      sharedWith: [`bulk${(p + 1) % USERS}`],
    };
    yield `${JSON.stringify(plant)}\n`;
  }
}

after(() => cleanupBackends());

for (const backend of BACKENDS)
  describe(`kill -9 during a large import [${backend.name}]`, { skip: backend.skip }, () => {
    it('leaves none of the import, and the database opens cleanly and serves', { timeout: 120_000 }, async () => {
      const db = await backend.freshDb();
      // What was there before the import must survive it untouched.
      const seed = [
        { type: 'user', name: 'alice' },
        { type: 'plant', name: 'Fern', owner: 'alice', public: false },
      ];
      const seeded = await runCli(db, ['import', '-'], seed.map((r) => JSON.stringify(r)).join('\n'));
      assert.equal(seeded.code, 0, seeded.stderr);
      const token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();

      const pgSchema = backend.name === 'postgres' ? new URL(db).searchParams.get('schema')! : undefined;
      const countPlants = async (): Promise<number> => {
        if (pgSchema) return Number((await adminQuery<{ n: string }>(`SELECT count(*) AS n FROM ${pgSchema}.plants`))[0]!.n);
        const sqlite = new BetterSqlite3(db, { readonly: true });
        try {
          return sqlite.prepare('SELECT count(*) FROM plants').pluck().get() as number;
        } finally {
          sqlite.close();
        }
      };
      /** Evidence that the importer is writing rows it has not committed. */
      const writing = async (): Promise<boolean> => {
        if (pgSchema) {
          // A session of the importer holds a write lock on one of the schema's tables: its transaction has
          // written rows (users first; plants go in batches) and not committed them.
          const rows = await adminQuery(
            `SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = $1 AND l.mode = 'RowExclusiveLock' AND l.pid <> pg_backend_pid()`,
            [pgSchema],
          );
          return rows.length > 0;
        }
        // Another connection cannot take the write lock while the import's transaction holds it.
        const other = new BetterSqlite3(db, { timeout: 0 });
        try {
          other.exec('BEGIN IMMEDIATE');
          other.exec('ROLLBACK');
          return false;
        } catch (err) {
          if ((err as { code?: string }).code !== 'SQLITE_BUSY') throw err;
          return true;
        } finally {
          other.close();
        }
      };

      const child = spawn(process.execPath, [BIN, '--db', db, 'import', '-'], {
        stdio: ['pipe', 'pipe', 'pipe'],
        env: { ...process.env, PLANTSTORE_DB: '' },
      });
      let stderr = '';
      child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      child.stdin.on('error', () => {}); // EPIPE once the child is killed
      const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;

      try {
        let sent = 0;
        for (const line of largeCatalogue()) {
          if (sent === USERS + PLANTS / 2) break;
          if (!child.stdin.write(line)) await once(child.stdin, 'drain');
          sent++;
        }
        // All sent lines handed to the pipe (at most a pipe buffer unread) and the transaction under way.
        await eventually('the import under way', async () => child.stdin.writableLength === 0 && (await writing()), { timeoutMs: 30_000 });
        assert.equal(child.exitCode, null, `the importer ended before the kill: ${stderr}`);
        assert.equal(await countPlants(), 1, 'nothing of the import is visible before the kill');
        child.kill('SIGKILL');
        const [code, signal] = await exited;
        assert.equal(signal, 'SIGKILL', `killed by the signal, not ended by itself (code ${code}): ${stderr}`);
        assert.doesNotMatch(stderr, /imported/);
      } finally {
        if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      }

      if (!pgSchema) {
        // Opening read-write replays or discards the WAL the way the server would.
        const sqlite = new BetterSqlite3(db);
        try {
          assert.equal(sqlite.pragma('integrity_check', { simple: true }), 'ok');
          assert.deepEqual(sqlite.pragma('foreign_key_check'), []);
        } finally {
          sqlite.close();
        }
      } else {
        // The server drops the killed client's session; until then its transaction still holds locks.
        await eventually('the killed session to be gone', async () => {
          const rows = await adminQuery(
            `SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND l.mode = 'RowExclusiveLock'`,
            [pgSchema],
          );
          return rows.length === 0;
        });
      }
      assert.equal(await countPlants(), 1, 'none of the killed import is in the database');

      await assertServes(db, token, [{ name: 'Fern' }]);

      // And the same import, run to the end, then goes in whole.
      const full = await runCli(db, ['import', '-'], [...largeCatalogue()].join(''));
      assert.equal(full.code, 0, full.stderr);
      assert.equal(await countPlants(), 1 + PLANTS);
    });
  });
