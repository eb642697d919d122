import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { assertServes, BIN, runCli } from '../helpers/processes.js';

/**
 * A full disk, simulated without privileges: the CLI runs under a file-size limit (RLIMIT_FSIZE, `ulimit -f`)
 * just above the database's current size, so SQLite's writes past it fail in the kernel the way they do on
 * a full disk (a loop-mounted tiny filesystem would need root and a loop device; a read-only chmod means
 * nothing to root). SIGXFSZ is ignored so the write fails with an error instead of killing the process.
 */
function runCliWithFileSizeLimit(db: string, limitBytes: number, args: string[]): Promise<{ code: number; stderr: string }> {
  const blocks = Math.ceil(limitBytes / 1024); // bash counts ulimit -f in 1024-byte blocks
  const script = `trap '' XFSZ; ulimit -f ${blocks}; exec "$0" "$@"`;
  return new Promise((resolve) => {
    execFile(
      'bash',
      ['-c', script, process.execPath, BIN, '--db', db, ...args],
      { env: { ...process.env, PLANTSTORE_DB: '' } },
      (error, _stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stderr }),
    );
  });
}

describe('SQLite on a full disk', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-full-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('fails the write with one clear line and a non-zero exit; the database stays intact and serves', { timeout: 60_000 }, async () => {
    const db = join(dir, 'plantstore.db');
    const seed = '{"type":"user","name":"alice"}\n{"type":"plant","name":"Fern","owner":"alice","public":false}\n';
    assert.equal((await runCli(db, ['import', '-'], seed)).code, 0);
    const token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();

    const big = join(dir, 'big.ndjson');
    const lines: string[] = [];
    for (let p = 0; p < 20_000; p++)
      lines.push(JSON.stringify({ type: 'plant', name: `Bulk plant #${p}`, tag: 'bulk', owner: 'alice', public: false }));
    writeFileSync(big, `${lines.join('\n')}\n`);

    // Room for about 100 KiB more than the database holds now; the import needs megabytes.
    const run = await runCliWithFileSizeLimit(db, statSync(db).size + 100 * 1024, ['import', big]);
    assert.notEqual(run.code, 0);
    const stderr = run.stderr.trimEnd().split('\n');
    assert.equal(stderr.length, 1, run.stderr);
    assert.match(stderr[0]!, /^plantstore: cannot write the database: .*(disk I\/O error|disk is full)/);

    const sqlite = new BetterSqlite3(db);
    try {
      assert.equal(sqlite.pragma('integrity_check', { simple: true }), 'ok');
      assert.equal(sqlite.prepare('SELECT count(*) FROM plants').pluck().get(), 1, 'none of the failed import is kept');
    } finally {
      sqlite.close();
    }

    await assertServes(db, token, [{ name: 'Fern' }]);
  });
});
