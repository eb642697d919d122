import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { cleanupBackends } from '../helpers/backends.js';
import { dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';
import { BIN, runCli, spawnServe, type CliRun } from '../helpers/processes.js';

// `plantstore backup`: a copy that restores whole (what `export` leaves out included), made while a server writes.

after(() => cleanupBackends());

const skipPostgres = await requirePostgres();

async function ok(db: string, args: string[], stdin?: string): Promise<CliRun> {
  const run = await runCli(db, args, stdin);
  assert.equal(run.code, 0, `plantstore ${args.join(' ')}: ${run.stderr}`);
  return run;
}

/** Every row of every table, in rowid order (integrity first): two files with equal dumps hold the same data. */
function dump(file: string): Record<string, unknown[]> {
  const db = new Database(file, { readonly: true });
  try {
    assert.equal(db.pragma('integrity_check', { simple: true }), 'ok', `${file} is not intact`);
    const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").pluck().all() as string[];
    return Object.fromEntries(tables.map((table) => [table, db.prepare(`SELECT * FROM "${table}"`).raw().all()]));
  } finally {
    db.close();
  }
}

const plantCount = (file: string) => {
  const db = new Database(file, { readonly: true });
  try {
    return db.prepare('SELECT count(*) FROM plants').pluck().get() as number;
  } finally {
    db.close();
  }
};

describe('plantstore backup', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-backup-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it(
    'copies the whole database while a server writes, and the copy serves with the same tokens and secrets',
    { timeout: 120_000 },
    async () => {
      const db = join(dir, 'plants.db');
      const records = [
        { type: 'user', name: 'alice', admin: true },
        { type: 'user', name: 'bob' },
        { type: 'group', name: 'gardeners', members: ['bob'] },
        ...Array.from({ length: 2_000 }, (_, i) => ({
          type: 'plant',
          name: `Plant ${i}`,
          owner: 'alice',
          sharedWith: i % 3 ? [] : ['group:gardeners'],
        })),
      ];
      await ok(db, ['import', '-'], records.map((r) => JSON.stringify(r)).join('\n'));
      const alice = (await ok(db, ['tokens', 'create', 'alice'])).stdout.trim();
      const bob = (await ok(db, ['tokens', 'create', 'bob'])).stdout.trim();
      await ok(db, ['webhooks', 'add', 'http://127.0.0.1:9/hooks', '--webhook-allow-private']);

      const server = await spawnServe(db);
      const online = join(dir, 'online.db');
      try {
        // A writer that keeps committing all through the backup: the copy must be one commit's state, intact.
        let writing = true;
        let written = 0;
        const writer = (async () => {
          while (writing) {
            const res = await fetch(`${server.url}/plants`, {
              method: 'POST',
              headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json' },
              body: JSON.stringify({ id: 100_000 + written, name: `Written ${written}` }),
            });
            assert.equal(res.status, 200, await res.text());
            written++;
          }
        })();
        while (written < 20) await new Promise((r) => setTimeout(r, 10));
        const before = 2_000 + written;
        const run = await ok(db, ['backup', online]);
        const afterwards = 2_000 + written;
        writing = false;
        await writer;
        assert.match(run.stderr, /^backed up to .*online\.db \(\d+\.\d MB\) in \d+\.\d s\n$/);
        const copied = plantCount(online);
        assert.ok(copied >= before && copied <= afterwards, `the copy holds ${copied} plants, not between ${before} and ${afterwards}`);
        assert.ok(dump(online).tokens!.length === 2);
      } finally {
        assert.equal(await server.stop(), 0);
      }

      // With no writer, the copy is row for row the database: tokens, webhook endpoints and their secrets, the outbox.
      const quiet = join(dir, 'quiet.db');
      await ok(db, ['backup', quiet]);
      const original = dump(db);
      assert.deepEqual(dump(quiet), original);
      assert.equal(original.webhook_endpoints!.length, 1);
      assert.ok((original.webhook_deliveries ?? original.webhook_events)!.length > 0, 'the outbox has events to carry over');

      // Served as it is, the copy answers the same tokens with the same listings.
      const restored = await spawnServe(quiet);
      const served = await spawnServe(db);
      try {
        for (const token of [alice, bob]) {
          const read = async (url: string) => (await fetch(`${url}/plants`, { headers: { authorization: `Bearer ${token}` } })).text();
          assert.equal(await read(restored.url), await read(served.url));
        }
      } finally {
        assert.equal(await restored.stop(), 0);
        assert.equal(await served.stop(), 0);
      }
    },
  );

  it('never writes over a file, and leaves nothing behind when it cannot write', async () => {
    const db = join(dir, 'refusals.db');
    await ok(db, ['users', 'add', 'alice']);
    const taken = join(dir, 'taken.db');
    await ok(db, ['backup', taken]);
    const kept = dump(taken);
    await ok(db, ['users', 'add', 'bob']);
    const again = await runCli(db, ['backup', taken]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /taken\.db already exists: give the backup a new name, or remove the file first/);
    assert.deepEqual(dump(taken), kept, 'the earlier backup is untouched');
    const nowhere = await runCli(db, ['backup', join(dir, 'no-such-folder', 'b.db')]);
    assert.equal(nowhere.code, 1);
    assert.match(nowhere.stderr, /cannot write .*b\.db: no folder/);
    const unnamed = await runCli(db, ['backup', '']);
    assert.equal(unnamed.code, 1);
    assert.equal(unnamed.stderr, 'plantstore: give the backup a file name: the path is empty\n');
    assert.deepEqual(
      readdirSync(dir).filter((name) => name.includes('partial')),
      [],
      'no partial copy is left',
    );
    const missing = await runCli(join(dir, 'missing.db'), ['backup', join(dir, 'of-nothing.db')]);
    assert.equal(missing.code, 1);
    assert.match(missing.stderr, /no database at/);
    assert.equal(existsSync(join(dir, 'missing.db')), false);
  });

  it("keeps the database file's permissions, and names the copy, not the database, when the copy cannot be written", async () => {
    const db = join(dir, 'private.db');
    await ok(db, ['users', 'add', 'alice']);
    chmodSync(db, 0o600);
    const copy = join(dir, 'private-copy.db');
    await ok(db, ['backup', copy]);
    assert.equal(statSync(copy).mode & 0o777, 0o600, 'as private as the database, whatever the umask');
    // A copy larger than the file size limit the shell sets (in blocks of 1 KiB).
    const filler = new Database(db);
    filler.exec(
      'CREATE TABLE filler (b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20) INSERT INTO filler SELECT randomblob(100000) FROM n',
    );
    filler.close();
    const limited = spawnSync(
      'bash',
      ['-c', `ulimit -f 500; exec "${process.execPath}" "${BIN}" --db "${db}" backup "${join(dir, 'too-big.db')}"`],
      {
        encoding: 'utf8',
      },
    );
    assert.equal(limited.status, 1, limited.stderr);
    assert.match(limited.stderr, /^plantstore: cannot write \S*too-big\.db: .*\(SQLITE_\w+\)\n$/);
    assert.deepEqual(
      readdirSync(dir).filter((name) => name.includes('too-big')),
      [],
      'neither the copy nor its journal is left',
    );
  });

  it('stopped by a signal, ends by it, leaving no partial file and no copy but a complete one', { timeout: 60_000 }, async () => {
    const db = join(dir, 'large.db');
    await ok(db, ['users', 'add', 'alice']);
    const filler = new Database(db);
    filler.exec(
      'CREATE TABLE filler (b BLOB); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200) INSERT INTO filler SELECT randomblob(1000000) FROM n',
    );
    filler.close();
    const child = spawn(process.execPath, [BIN, '--db', db, 'backup', join(dir, 'stopped.db')], { stdio: 'ignore' });
    const ended = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    const started = () => readdirSync(dir).some((name) => name.startsWith('.stopped.db.partial'));
    while (!started()) await new Promise((resolve) => setTimeout(resolve, 2));
    child.kill('SIGTERM');
    assert.equal(await ended, 'SIGTERM');
    assert.deepEqual(
      readdirSync(dir).filter((name) => name.includes('stopped') && name !== 'stopped.db'),
      [],
    );
    // The signal is handled between the copy's steps: before it, nothing is linked; after it, the copy is whole.
    if (existsSync(join(dir, 'stopped.db'))) assert.deepEqual(dump(join(dir, 'stopped.db')), dump(db));
  });

  it('on PostgreSQL, says to use pg_dump with the store schema, and writes nothing', { skip: skipPostgres }, async () => {
    const { schema, url } = freshSchema();
    try {
      await ok(url, ['users', 'add', 'alice']);
      const file = join(dir, 'pg.db');
      const run = await runCli(url, ['backup', file]);
      assert.equal(run.code, 1);
      assert.match(run.stderr, new RegExp(`use pg_dump.*--schema=${schema} `));
      assert.match(run.stderr, /without Plant Store's \?schema= parameter/);
      assert.equal(existsSync(file), false);
    } finally {
      await dropSchema(schema);
    }
  });
});
