import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { once } from 'node:events';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { assertServes, BIN, runCli } from '../helpers/processes.js';

/**
 * A database file (and its folder) that the process may read but not write. File modes mean nothing to root,
 * so when the tests run as root the CLI runs without the capabilities that bypass them (setpriv drops
 * CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER from its bounding set); otherwise the modes apply as is.
 */
const AS_ROOT = process.getuid?.() === 0;
const WITHOUT_OVERRIDE = ['setpriv', '--bounding-set=-dac_override,-dac_read_search,-fowner'];

const COMMAND = AS_ROOT ? [...WITHOUT_OVERRIDE, process.execPath, BIN] : [process.execPath, BIN];

function runReadOnly(db: string, args: string[], stdin?: string): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = execFile(
      COMMAND[0]!,
      [...COMMAND.slice(1), '--db', db, ...args],
      { env: { ...process.env, PLANTSTORE_DB: '' }, timeout: 30_000 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
    child.stdin!.on('error', () => {});
    child.stdin!.end(stdin ?? '');
  });
}

/** Starts `serve` under the same restriction, lists with `token`, stops it with SIGTERM; the list and the exit code. */
async function serveReadOnly(db: string, token: string): Promise<{ listed: unknown; code: number | null; output: string }> {
  const child = spawn(COMMAND[0]!, [...COMMAND.slice(1), '--db', db, 'serve', '--port', '0'], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PLANTSTORE_DB: '' },
  });
  const exited = once(child, 'exit');
  let output = '';
  child.stderr.on('data', (chunk: Buffer) => (output += String(chunk)));
  let url: string | undefined;
  for await (const chunk of child.stdout) {
    output += String(chunk);
    url = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
    if (url) break;
  }
  assert.ok(url, `serve listens:\n${output}`);
  const res = await fetch(`${url}/plants`, { headers: { authorization: `Bearer ${token}` } });
  const listed = { status: res.status, body: await res.json() };
  child.kill('SIGTERM');
  const [code] = (await exited) as [number | null];
  return { listed, code, output };
}

/** Read through a writable connection, so that closing it checkpoints and removes the -wal and -shm files. */
function counts(db: string): { users: number; plants: number; integrity: unknown } {
  const sqlite = new BetterSqlite3(db);
  try {
    return {
      users: sqlite.prepare('SELECT count(*) FROM users').pluck().get() as number,
      plants: sqlite.prepare('SELECT count(*) FROM plants').pluck().get() as number,
      integrity: sqlite.pragma('integrity_check', { simple: true }),
    };
  } finally {
    sqlite.close();
  }
}

const ONE_CLEAR_LINE =
  /^plantstore: cannot write the database: attempt to write a readonly database \(SQLITE_READONLY\w*\); the database file and its folder must be writable by this user$/;

describe('SQLite database that is read-only to the process', () => {
  const root = mkdtempSync(join(tmpdir(), 'plantstore-readonly-'));
  const folder = join(root, 'db');
  const db = join(folder, 'plantstore.db');
  let token: string;
  let before: ReturnType<typeof counts>;
  after(() => {
    chmodSync(folder, 0o755);
    rmSync(root, { recursive: true, force: true });
  });

  const refusedWrites = async (t: { diagnostic(message: string): void }, alsoServe: boolean) => {
    const attempts: Array<[string, string[]]> = [
      ['add a user', ['users', 'add', 'bob']],
      ['import plants', ['import', join(root, 'more.ndjson')]],
      ['create a token', ['tokens', 'create', 'alice']],
    ];
    if (alsoServe) attempts.push(['serve', ['serve', '--port', '0']]);
    for (const [what, args] of attempts) {
      const run = await runReadOnly(db, args);
      t.diagnostic(`${what}: exit ${run.code}, ${run.stderr.trim()}`);
      assert.equal(run.code, 1, `${what}: exit 1\n${run.stderr}`);
      assert.match(run.stderr.trimEnd(), ONE_CLEAR_LINE, `${what}: one clear line`);
    }
  };

  it('setup: a database with one user and one plant', async () => {
    mkdirSync(folder);
    const seed = '{"type":"user","name":"alice"}\n{"type":"plant","name":"Fern","owner":"alice","public":false}\n';
    assert.equal((await runCli(db, ['import', '-'], seed)).code, 0);
    token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();
    writeFileSync(join(root, 'more.ndjson'), '{"type":"plant","name":"Moss","owner":"alice","public":true}\n');
    before = counts(db);
    assert.equal(before.integrity, 'ok');
  });

  it('file and folder read-only: every command, serve included, fails with one clear line', { timeout: 60_000 }, async (t) => {
    // Nothing beside the file: opening it in WAL mode needs to create -shm, which the folder refuses.
    assert.equal(existsSync(`${db}-shm`), false);
    chmodSync(db, 0o444);
    chmodSync(folder, 0o555);
    try {
      await refusedWrites(t, true);
    } finally {
      chmodSync(folder, 0o755);
      chmodSync(db, 0o644);
    }
    assert.deepEqual(counts(db), before, 'nothing was written and the database is intact');
  });

  it(
    'file read-only, folder writable: writes fail with one clear line; serve serves it read-only and exits 0',
    { timeout: 60_000 },
    async (t) => {
      chmodSync(db, 0o444);
      try {
        await refusedWrites(t, false);
        const served = await serveReadOnly(db, token);
        assert.deepEqual(served.listed, { status: 200, body: [{ name: 'Fern' }] }, served.output);
        assert.equal(served.code, 0, served.output);
      } finally {
        chmodSync(db, 0o644);
      }
      assert.deepEqual(counts(db), before, 'nothing was written and the database is intact');
    },
  );

  it('writable again: the same database serves without repair', { timeout: 30_000 }, async () => {
    await assertServes(db, token, [{ name: 'Fern' }]);
  });
});
