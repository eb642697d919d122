import assert from 'node:assert/strict';
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { generateToken } from '../../src/catalogue/tokens.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { AUDIENCE, ISSUER, signingKey, startJwksServer } from '../helpers/jwt.js';
import { runCli, type CliRun } from '../helpers/processes.js';
import { REDIS_URL, redisUnavailableReason, urlOfMissingDatabase } from '../helpers/redis.js';
import { addPlant } from '../helpers/http-app.js';
import { plainSql } from '../helpers/plain-sql.js';

interface Check {
  check: string;
  status: 'ok' | 'warn' | 'fail' | 'skip';
  detail: string;
  fix?: string;
}

/** `doctor --json` on a free port (its listen check would otherwise depend on what holds 8080 here). */
async function doctor(db: string, args: string[] = []): Promise<CliRun & { checks: Check[] }> {
  const run = await runCli(db, ['doctor', '--json', '--port', '0', ...args]);
  assert.equal(run.stderr, '', 'doctor reports on stdout only');
  return { ...run, checks: JSON.parse(run.stdout) as Check[] };
}

const byName = (checks: Check[], name: string): Check => {
  const found = checks.find((c) => c.check === name);
  assert.ok(found, `no "${name}" check in ${JSON.stringify(checks)}`);
  return found;
};

/** A TCP port nothing listens on: bound once by us, then released. */
async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/** Creates and migrates a database in-process (quicker than spawning the CLI), with what `seed` adds. */
async function prepare(open: () => Promise<Store>, seed: (store: Store) => Promise<unknown> = async () => {}): Promise<void> {
  const store = await open();
  try {
    await seed(store);
  } finally {
    await store.close();
  }
}

after(() => cleanupBackends());

// Each test has its own database and spawns its own processes, so they can run side by side.
describe('plantstore doctor on SQLite', { concurrency: 3 }, () => {
  let dir: string;
  before(() => {
    dir = mkdtempSync(join(tmpdir(), 'plantstore-doctor-'));
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('passes on a good database, one line per check, and says so with exit 0', async () => {
    const db = join(dir, 'good.db');
    await prepare(
      () => openStore({ db: db }),
      async (store) => {
        await store.users.add('alice', false);
        await addPlant(store, { name: 'Fern', owner: 'alice', public: false });
        await store.tokens.add({ user: 'alice', hash: generateToken().hash });
      },
    );
    const run = await runCli(db, ['doctor', '--port', '0']);
    assert.equal(run.code, 0, run.stdout + run.stderr);
    const lines = run.stdout.trimEnd().split('\n');
    for (const name of ['config', 'listen', 'permissions', 'database', 'journal', 'integrity', 'schema', 'counts', 'rows', 'webhooks']) {
      assert.ok(
        lines.some((l) => new RegExp(`^ok\\s+${name}\\s`).test(l)),
        `no ok line for ${name}:\n${run.stdout}`,
      );
    }
    assert.ok(
      lines.slice(0, -1).every((l) => /^(ok|skip)\s/.test(l)),
      run.stdout,
    );
    assert.match(lines.at(-1)!, /^\d+ ok, 0 warning\(s\), 0 failure\(s\)$/);

    const { code, checks } = await doctor(db);
    assert.equal(code, 0);
    assert.match(byName(checks, 'journal').detail, /WAL/);
    assert.match(byName(checks, 'counts').detail, /^1 users \(0 admins\), 1 plants, 1 tokens \(1 active\)$/);
  });

  it('fails on rows plain SQL wrote that listings and exports cannot serve, naming the plants', async () => {
    const db = join(dir, 'damaged.db');
    await prepare(
      () => openStore({ db: db }),
      async (store) => {
        await store.users.add('alice', false);
        for (const name of ['Fern', 'Ivy', 'Moss', 'Sage', 'Rose']) await addPlant(store, { name, owner: 'alice', public: false });
      },
    );
    assert.equal(byName((await doctor(db)).checks, 'rows').status, 'ok');
    // The sqlite3 shell's connections leave foreign keys off (better-sqlite3 turns them on).
    const sqlite = new BetterSqlite3(db);
    try {
      sqlite.pragma('foreign_keys = OFF');
      sqlite.exec(`UPDATE plants SET owner_id = 999 WHERE name = 'Fern';
        UPDATE plants SET name = x'ff00' WHERE name = 'Ivy';
        UPDATE plants SET api_id = NULL WHERE name = 'Moss';
        UPDATE plants SET tag = '' WHERE name = 'Sage';
        UPDATE plants SET api_id = 9223372036854775807 WHERE name = 'Rose';
        INSERT INTO plant_user_grants (user_id, plant_id) SELECT 77, id FROM plants WHERE name = 'Sage';`);
    } finally {
      sqlite.close();
    }
    const { code, checks } = await doctor(db);
    assert.equal(code, 1);
    const rows = byName(checks, 'rows');
    assert.equal(rows.status, 'fail');
    for (const finding of [
      /1 plant\(s\) whose owner is no user \(id 1\)/,
      /1 plant\(s\) whose name is empty or not text \(id 2\)/,
      /1 plant\(s\) without an id in the API \(row \d+\)/,
      /1 plant\(s\) whose tag is empty or not text \(id 4\)/,
      /1 plant\(s\) whose id is outside the API's \(1 to 2\^53 - 1\) \(row \d+\)/,
      /2 row\(s\) whose key names a row that is gone \(in plants, plant_user_grants\)/,
    ]) {
      assert.match(rows.detail, finding);
    }
    assert.match(rows.fix!, /correct or delete these rows/);
    // Read as a number, that id is rounded: an export would write another plant's id, or one an import refuses.
    const exported = await runCli(db, ['export']);
    assert.equal(exported.code, 1);
    assert.match(exported.stderr, /the plant "Moss" of alice has no id: give it one with SQL/);
    const mended = new BetterSqlite3(db);
    mended.exec("UPDATE plants SET api_id = 3 WHERE name = 'Moss'");
    mended.close();
    const again = await runCli(db, ['export']);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /the plant "Rose" of alice has an id outside the ids the API gives \(1 to 9007199254740991\)/);
  });

  it("fails on a database whose tables of Plant Store's names no migration of it made, instead of advising migrate", async () => {
    const db = join(dir, 'foreign-users.db');
    const sqlite = new BetterSqlite3(db);
    sqlite.exec('CREATE TABLE users (login TEXT); CREATE TABLE kysely_migration (name TEXT, timestamp TEXT)');
    sqlite.close();
    const { code, checks } = await doctor(db);
    assert.equal(code, 1);
    const schema = byName(checks, 'schema');
    assert.equal(schema.status, 'fail');
    assert.match(schema.detail, /tables named as Plant Store's \(users\) that no Plant Store migration made/);
    assert.match(schema.fix!, /a database of its own/);
    // And migrate, which doctor no longer advises, fails on them.
    assert.match((await runCli(db, ['migrate'])).stderr, /migration 0001-initial failed: table "users" already exists/);
  });

  it('warns about webhook endpoints that are disabled or failing, naming them', async () => {
    const db = join(dir, 'webhooks.db');
    await prepare(
      () => openStore({ db: db }),
      async (store) => {
        await store.users.add('alice', false);
        const endpoints = [];
        for (const host of ['gone', 'failing', 'fine'])
          endpoints.push(await store.webhooks.addEndpoint(`http://127.0.0.1:9/hooks/${host}`, 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'));
        await addPlant(store, { name: 'Fern', owner: 'alice', public: false });
        const claimed = await store.webhooks.claim(new Map(endpoints.map((e) => [e.id, 10])), 60_000);
        const outcomes = {
          gone: { kind: 'gone', status: 410 },
          failing: { kind: 'retry', retryAt: Date.now() + 5000, status: 500 },
        } as const;
        await store.webhooks.finish(
          claimed.map((delivery) => ({
            delivery,
            outcome: Object.entries(outcomes).find(([host]) => delivery.url.includes(host))?.[1] ?? { kind: 'delivered', status: 200 },
          })),
        );
      },
    );
    const { code, checks } = await doctor(db, ['--webhook-allow-private']);
    assert.equal(code, 0, 'warnings only');
    const check = byName(checks, 'webhooks');
    assert.equal(check.status, 'warn');
    assert.equal(
      check.detail,
      '3 endpoint(s), 1 deliveries waiting; disabled (answered 410): http://127.0.0.1:9/hooks/gone; failing: http://127.0.0.1:9/hooks/failing',
    );
    // Retry alone sends a disabled endpoint nothing: it is enabled first.
    assert.equal(
      check.fix,
      'see "plantstore webhooks deliveries"; once the receiver works: "plantstore webhooks enable ID" for disabled endpoint(s) 1 ' +
        '(retry alone sends them nothing), then "plantstore webhooks retry --endpoint ID" for what failed; ' +
        '"plantstore webhooks retry --endpoint ID" for failing endpoint(s) 2',
    );
  });

  it('warns about an endpoint every delivery will refuse: a loopback one, unless private receivers are allowed', async () => {
    const db = join(dir, 'refused-webhooks.db');
    await prepare(
      () => openStore({ db: db }),
      (store) => store.webhooks.addEndpoint('http://127.0.0.1:9/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw').then(() => {}),
    );
    const refused = byName((await doctor(db)).checks, 'webhooks');
    assert.equal(refused.status, 'warn');
    assert.match(refused.detail, /every delivery will be refused: http:\/\/127\.0\.0\.1:9\/hooks \(127\.0\.0\.1 is a loopback address/);
    assert.match(refused.fix ?? '', /--webhook-allow-private/);
    assert.equal(byName((await doctor(db, ['--webhook-allow-private'])).checks, 'webhooks').status, 'ok');
  });

  it('fails with exit 1 and one clear line on an invalid configuration', async () => {
    const run = await runCli(join(dir, 'any.db'), ['doctor', '--port', '99999']);
    assert.equal(run.code, 1);
    assert.match(run.stdout, /^fail\s+config\s+invalid --port "99999": expected a whole number from 0 to 65535 -> correct the flag/m);
    // The HTTP port again for metrics, on the same address written otherwise.
    const shared = await runCli(join(dir, 'any.db'), [
      'doctor',
      '--port',
      '18501',
      '--metrics-port',
      '18501',
      '--metrics-host',
      'localhost',
    ]);
    assert.equal(shared.code, 1);
    assert.match(
      shared.stdout,
      /^fail\s+config\s+the metrics port \(--metrics-port, PLANTSTORE_METRICS_PORT\) must differ from the HTTP port: both are 18501/m,
    );
  });

  it('warns, without creating it, when the database file does not exist yet', async () => {
    const db = join(dir, 'nested', 'missing.db');
    const { code, checks } = await doctor(db);
    assert.equal(code, 0);
    assert.equal(byName(checks, 'database').status, 'warn');
    assert.match(byName(checks, 'database').fix!, /plantstore migrate/);
    assert.equal(existsSync(db), false, 'doctor must not create the database');
  });

  it('fails, for the reason migrate would give, when a part of the database path is a file', async () => {
    const file = join(dir, 'a-file.txt');
    writeFileSync(file, 'not a folder\n');
    const { code, checks } = await doctor(join(file, 'sub', 'x.db'));
    assert.equal(code, 1);
    const check = byName(checks, 'database');
    assert.equal(check.status, 'fail');
    assert.match(check.detail, /a-file\.txt\/sub\/x\.db: a part of its path is a file, not a folder \(.*a-file\.txt\)$/);
  });

  it('fails on a file that is not a database', async () => {
    const db = join(dir, 'text.db');
    writeFileSync(db, 'just some text, long enough to look like a header to SQLite '.repeat(4));
    const { code, checks } = await doctor(db);
    assert.equal(code, 1);
    assert.equal(byName(checks, 'database').status, 'fail');
    assert.match(byName(checks, 'database').detail, /not a database/);
  });

  it('reports pending migrations as a warning and a newer schema as a failure, changing nothing', async () => {
    const db = join(dir, 'migrations.db');
    await prepare(() => openStore({ db: db }));
    const sqlite = new BetterSqlite3(db);
    try {
      sqlite.prepare("DELETE FROM kysely_migration WHERE name = '0002-change-notifications'").run();
      const pending = await doctor(db);
      assert.equal(pending.code, 0);
      assert.equal(byName(pending.checks, 'schema').status, 'warn');
      assert.match(byName(pending.checks, 'schema').detail, /1 pending migration\(s\): 0002-change-notifications/);
      const stillPending = sqlite.prepare("SELECT count(*) FROM kysely_migration WHERE name = '0002-change-notifications'").pluck().get();
      assert.equal(stillPending, 0, 'doctor must not migrate');

      sqlite
        .prepare(
          "INSERT INTO kysely_migration (name, timestamp) VALUES ('0002-change-notifications', '2026-01-01'), ('0099-from-the-future', '2030-01-01')",
        )
        .run();
      const newer = await doctor(db);
      assert.equal(newer.code, 1);
      assert.equal(byName(newer.checks, 'schema').status, 'fail');
      assert.match(byName(newer.checks, 'schema').detail, /0099-from-the-future.*newer version/);
      // Every other command refuses it in the same words, where Kysely's own say the migrations are corrupted.
      const listed = await runCli(db, ['users', 'list']);
      assert.equal(listed.code, 1);
      assert.match(
        listed.stderr,
        /^plantstore: the database has a migration .* \(0099-from-the-future\): it was written by a newer version;/,
      );
    } finally {
      sqlite.close();
    }
  });

  it('checks that a configured Redis answers and can run the counters, unless no rate limit uses it', async (t) => {
    const skipped = await redisUnavailableReason();
    if (skipped) return t.skip(skipped);
    const db = join(dir, 'redis.db');
    await prepare(() => openStore({ db: db }));
    assert.equal(byName((await doctor(db)).checks, 'redis').status, 'skip');
    const up = await doctor(db, ['--redis-url', REDIS_URL]);
    assert.equal(up.code, 0);
    assert.match(
      byName(up.checks, 'redis').detail,
      /answers \(Redis \d+\.\d+.*\); rate-limit counters under the prefix "plantstore:ratelimit:"/,
    );
    const unused = byName(
      (await doctor(db, ['--redis-url', REDIS_URL, '--rate-limit', 'off', '--write-rate-limit', 'off'])).checks,
      'redis',
    );
    assert.equal(unused.status, 'warn');
    const port = await closedPort();
    const down = await doctor(db, ['--redis-url', `redis://:hunter2@127.0.0.1:${port}`]);
    assert.equal(down.code, 1);
    const failed = byName(down.checks, 'redis');
    assert.equal(failed.status, 'fail');
    assert.match(failed.detail, new RegExp(`cannot use Redis at redis://:\\*\\*\\*@127\\.0\\.0\\.1:${port}: .*ECONNREFUSED`));
    assert.match(failed.fix!, /serve runs without rate limits/);

    // A database the server does not have: ioredis stays in database 0 and says so only in an event.
    const missing = await urlOfMissingDatabase();
    const refused = await doctor(db, ['--redis-url', missing]);
    assert.equal(refused.code, 1);
    const select = byName(refused.checks, 'redis');
    assert.equal(select.status, 'fail');
    assert.match(select.detail, /cannot use Redis at .*: it refuses database \d+ \(ERR DB index is out of range\)/);
    assert.match(select.fix!, /a database number the server has/);
  });

  it('refuses a Redis URL that could not be used as one line naming the setting, not a stack trace', async () => {
    const db = join(dir, 'redis-url.db');
    for (const [url, reason] of [
      ['redis://127.0.0.1:6379/abc', 'the path must be a database number'],
      ['redis://127.0.0.1:99999', 'the port must be a whole number from 1 to 65535'],
    ]) {
      const run = await doctor(db, ['--redis-url', url!]);
      assert.equal(run.code, 1);
      assert.equal(run.checks.length, 1, run.stdout);
      assert.equal(byName(run.checks, 'config').status, 'fail');
      assert.ok(byName(run.checks, 'config').detail.startsWith(`invalid --redis-url "${url}": ${reason}`), run.stdout);
    }
  });

  it('warns when the JWT user claim is one users can change themselves', async () => {
    const db = join(dir, 'claim.db');
    await prepare(
      () => openStore({ db: db }),
      (store) => store.users.add('alice', false),
    );
    const secret = join(dir, 'secret');
    writeFileSync(secret, 'a-secret-of-at-least-thirty-two-bytes!!');
    const flags = ['--jwt-secret-file', secret, '--jwt-issuer', ISSUER, '--jwt-audience', AUDIENCE];
    const bySub = await doctor(db, flags);
    assert.ok(!bySub.checks.some((c) => c.check === 'jwt user claim'), 'sub is fixed by the provider');
    const byName_ = await doctor(db, [...flags, '--jwt-user-claim', 'preferred_username']);
    assert.equal(byName_.code, 0);
    const warning = byName(byName_.checks, 'jwt user claim');
    assert.equal(warning.status, 'warn');
    assert.match(warning.detail, /'preferred_username' names the user: at many providers users can change it themselves/);
    const asAdmins = await doctor(db, [...flags, '--jwt-user-claim', 'email', '--jwt-admins', 'allow']);
    assert.match(byName(asAdmins.checks, 'jwt user claim').detail, /including an admin/);
  });

  it('checks that a configured JWKS answers with usable keys', async () => {
    const db = join(dir, 'jwks.db');
    await prepare(
      () => openStore({ db: db }),
      (store) => store.users.add('alice', false),
    );
    const key = await signingKey('ES256', 'k1');
    const jwks = await startJwksServer([key.publicJwk]);
    const flags = ['--jwks-url', jwks.url, '--jwt-issuer', ISSUER, '--jwt-audience', AUDIENCE];
    try {
      const up = await doctor(db, flags);
      assert.equal(up.code, 0, JSON.stringify(up.checks));
      assert.match(byName(up.checks, 'jwt').detail, new RegExp(`JWKS ${jwks.url}.*issuer ${ISSUER}`));
      assert.match(byName(up.checks, 'jwks').detail, /1 usable signing key/);

      jwks.publish([{ ...key.publicJwk, use: 'enc' }]);
      const unusable = await doctor(db, flags);
      assert.equal(unusable.code, 1);
      assert.match(byName(unusable.checks, 'jwks').detail, /none usable/);

      await jwks.stop();
      const down = await doctor(db, flags);
      assert.equal(down.code, 1);
      assert.equal(byName(down.checks, 'jwks').status, 'fail');
      assert.match(byName(down.checks, 'jwks').detail, /cannot fetch .*ECONNREFUSED/);
    } finally {
      await jwks.stop();
    }
  });

  it('fails with a clear line when PostgreSQL is not listening', async () => {
    const port = await closedPort();
    const run = await runCli(`postgres://plantstore@127.0.0.1:${port}/plantstore`, ['doctor']);
    assert.equal(run.code, 1);
    assert.match(
      run.stdout,
      new RegExp(
        `^fail\\s+database\\s+cannot reach PostgreSQL at 127\\.0\\.0\\.1:${port}/plantstore: .*ECONNREFUSED.* -> start PostgreSQL`,
        'm',
      ),
    );
    assert.match(run.stdout, /^skip\s+schema\s/m);
  });
});

const postgres = BACKENDS.find((b) => b.name === 'postgres');
describe('plantstore doctor on PostgreSQL', { skip: postgres?.skip ?? 'PostgreSQL backend not selected' }, () => {
  it('reports version, pool headroom, schema state and counts', async () => {
    const db = await postgres!.freshDb();
    const empty = await doctor(db);
    assert.equal(empty.code, 0, JSON.stringify(empty.checks));
    assert.match(byName(empty.checks, 'database').detail, /^PostgreSQL \d+(\.\d+)? at \S+, schema pstest_/);
    assert.equal(byName(empty.checks, 'schema').status, 'warn', 'a schema that does not exist yet is a warning');

    await prepare(
      () => openStore({ db: db }),
      (store) => store.users.add('root', true),
    );
    const ready = await doctor(db);
    assert.equal(ready.code, 0, JSON.stringify(ready.checks));
    assert.ok(
      ready.checks.every((c) => c.status === 'ok' || c.status === 'skip'),
      JSON.stringify(ready.checks),
    );
    assert.match(
      byName(ready.checks, 'pool').detail,
      /^2 pool\(s\) of 10 and the change feed's connection x 1 worker\(s\) = 21 connections; server allows \d+/,
    );
    assert.match(byName(ready.checks, 'schema').detail, /^up to date/);
    assert.match(byName(ready.checks, 'counts').detail, /^1 users \(1 admins\), 0 plants, 0 tokens/);

    // Plain SQL can write an empty tag, which an export would write and an import refuse.
    await prepare(
      () => openStore({ db: db }),
      (store) => addPlant(store, { name: 'Fern', tag: 'fern', owner: 'root', public: false }),
    );
    assert.equal(byName((await doctor(db)).checks, 'rows').status, 'ok');
    await plainSql(db, "UPDATE plants SET tag = '' WHERE name = 'Fern'");
    const damaged = await doctor(db);
    assert.equal(damaged.code, 1);
    assert.match(byName(damaged.checks, 'rows').detail, /^1 plant\(s\) whose tag is empty or not text \(id \d+\)$/);
    await plainSql(db, "UPDATE plants SET tag = 'fern' WHERE name = 'Fern'");

    // More connections than the server can give is worth a warning, not a failure.
    const crowded = await doctor(db, ['--workers', '256']);
    assert.equal(crowded.code, 0);
    assert.equal(byName(crowded.checks, 'pool').status, 'warn');
  });
});
