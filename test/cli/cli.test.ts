import assert from 'node:assert/strict';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { loadConfig } from '../../src/config.js';
import { startServer } from '../../src/server.js';
import { knownMigrationNames } from '../../src/store/migrations/index.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { eventually } from '../helpers/assertions.js';
import { adminQuery, PG_URL } from '../helpers/postgres.js';
import { runCli, spawnServe, type CliRun } from '../helpers/processes.js';

const cli = runCli;

async function ok(db: string, args: string[], stdin?: string): Promise<CliRun> {
  const run = await cli(db, args, stdin);
  assert.equal(run.code, 0, `plantstore ${args.join(' ')} failed: ${run.stderr}`);
  return run;
}

/** A user mistake: non-zero exit, exactly one line on stderr, no stack trace. */
async function fails(db: string, args: string[], pattern: RegExp, stdin?: string): Promise<CliRun> {
  const run = await cli(db, args, stdin);
  assert.notEqual(run.code, 0, `expected plantstore ${args.join(' ')} to fail`);
  const lines = run.stderr.trimEnd().split('\n');
  assert.equal(lines.length, 1, `expected one line on stderr, got:\n${run.stderr}`);
  assert.match(lines[0]!, pattern);
  assert.doesNotMatch(run.stderr, /\n\s+at /);
  return run;
}

/**
 * What an import must leave as it found it: a SQLite file's statements, or a PostgreSQL schema's constraints
 * (validated or not), indexes and triggers (enabled or not). Imports into an empty or small catalogue drop or
 * disable some and add them back.
 */
async function storedSchema(db: string): Promise<string[]> {
  if (!db.startsWith('postgres')) {
    const sqlite = new BetterSqlite3(db, { readonly: true });
    try {
      return sqlite.prepare('SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name').pluck().all() as string[];
    } finally {
      sqlite.close();
    }
  }
  const schema = new URL(db).searchParams.get('schema')!;
  const rows = await adminQuery<{ line: string }>(
    `SELECT conrelid::regclass::text || ' ' || conname || ' ' || pg_get_constraintdef(oid) || CASE WHEN convalidated THEN '' ELSE ' NOT VALID' END AS line
       FROM pg_constraint WHERE connamespace = $1::regnamespace
     UNION ALL SELECT indexdef FROM pg_indexes WHERE schemaname = $2
     UNION ALL SELECT t.tgrelid::regclass::text || ' trigger ' || t.tgname || ' ' || t.tgenabled::text
       FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid WHERE c.relnamespace = $1::regnamespace AND NOT t.tgisinternal
     ORDER BY 1`,
    [schema, schema],
  );
  return rows.map((r) => r.line);
}

const ndjson = (records: readonly object[]) => records.map((r) => JSON.stringify(r)).join('\n') + '\n';

after(() => cleanupBackends());

/** The advisory lock Kysely's PostgreSQL migrator holds while it migrates (its LOCK_ID). */
const KYSELY_MIGRATION_LOCK = '3853314791062309107';

for (const backend of BACKENDS)
  describe(`plantstore CLI [${backend.name}]`, { skip: backend.skip }, () => {
    let dir: string;
    const freshDb = () => backend.freshDb();

    before(() => {
      dir = mkdtempSync(join(tmpdir(), 'plantstore-cli-'));
    });
    after(() => rmSync(dir, { recursive: true, force: true }));

    it('migrate says whether it created the schema or found it up to date', async () => {
      const db = await freshDb();
      const latest = knownMigrationNames();
      assert.equal(
        (await ok(db, ['migrate'])).stderr,
        `created the database schema (${latest.length} migrations, latest ${latest.at(-1)})\n`,
      );
      assert.equal((await ok(db, ['migrate'])).stderr, 'database schema is up to date\n');
    });

    it('manages users, groups, plants and grants, with --json lists', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      await ok(db, ['users', 'add', 'root', '--admin']);
      await ok(db, ['groups', 'add', 'gardeners']);
      await ok(db, ['groups', 'add-member', 'gardeners', 'alice', 'root']);
      const id = (await ok(db, ['plants', 'add', '--name', 'Monstera', '--tag', 'tropical', '--owner', 'root'])).stdout.trim();
      assert.match(id, /^\d+$/);
      await ok(db, ['grants', 'add', id, '--group', 'gardeners']);
      await ok(db, ['grants', 'add', id, '--user', 'alice']);

      const users = JSON.parse((await ok(db, ['users', 'list', '--json'])).stdout);
      assert.deepEqual(
        users.map((u: { name: string; admin: boolean }) => [u.name, u.admin]),
        [
          ['alice', false],
          ['root', true],
        ],
      );
      const groups = JSON.parse((await ok(db, ['groups', 'list', '--json'])).stdout);
      assert.deepEqual(groups[0].members, ['alice', 'root']);
      const plants = JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout);
      assert.deepEqual(
        plants.map((p: { name: string; tag: string; owner: string }) => [p.name, p.tag, p.owner]),
        [['Monstera', 'tropical', 'root']],
      );
      const grants = JSON.parse((await ok(db, ['grants', 'list', '--json', '--plant', id])).stdout);
      assert.deepEqual(
        grants.map((g: { grantee: object }) => g.grantee),
        [{ user: 'alice' }, { group: 'gardeners' }],
      );
      assert.match((await ok(db, ['users', 'list'])).stdout, /^NAME\s+ADMIN\s+CREATED\nalice\s+no/);

      await ok(db, ['grants', 'remove', id, '--user', 'alice']);
      await ok(db, ['groups', 'remove-member', 'gardeners', 'alice']);
      await fails(db, ['users', 'remove', 'root'], /owns 1 plant/);
      await ok(db, ['users', 'remove', 'root', '--with-plants']);
      assert.deepEqual(JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout), []);
    });

    it('shows a plant, changes its name and tag as the operator, and lists plants by tag', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      await ok(db, ['users', 'add', 'bob']);
      const add = async (...args: string[]) => (await ok(db, ['plants', 'add', ...args])).stdout.trim();
      const fern = await add('--name', 'Fern', '--tag', 'fern', '--owner', 'alice', '--public');
      const ivy = await add('--name', 'Ivy', '--owner', 'bob');
      await add('--name', 'Moss', '--tag', 'fern', '--owner', 'bob');
      const show = async (id: string) => JSON.parse((await ok(db, ['plants', 'show', id, '--json'])).stdout);

      // As the operator sees it: private plants too, with the owner and the public flag.
      assert.deepEqual((await ok(db, ['plants', 'show', ivy])).stdout, `ID\tNAME\tTAG\tOWNER\tPUBLIC\n${ivy}\tIvy\t-\tbob\tno\n`);
      const shown = await show(fern);
      const { createdAt, ...fields } = shown;
      assert.deepEqual(fields, { id: Number(fern), name: 'Fern', tag: 'fern', owner: 'alice', public: true });
      assert.match(createdAt, /^\d{4}-\d{2}-\d{2}T/);
      assert.deepEqual(shown, JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout)[0], 'show prints what list does');

      // Each flag alone: the name, a tag, the tag removed; what it left is printed as show prints it.
      const renamed = await ok(db, ['plants', 'update', ivy, '--name', 'English ivy', '--json']);
      assert.match(renamed.stderr, new RegExp(`^changed plant ${ivy} \\(English ivy\\)$`, 'm'));
      const ivyNow = await show(ivy);
      assert.deepEqual(JSON.parse(renamed.stdout), ivyNow);
      assert.equal(ivyNow.name, 'English ivy');
      const tagged = await ok(db, ['plants', 'update', ivy, '--tag', 'climber']);
      assert.equal(tagged.stdout, `ID\tNAME\tTAG\tOWNER\tPUBLIC\n${ivy}\tEnglish ivy\tclimber\tbob\tno\n`);
      // The operator's names and tags take control characters, as `plants add` does.
      await ok(db, ['plants', 'update', fern, '--name', 'Boston\tfern']);
      assert.equal((await show(fern)).name, 'Boston\tfern');
      const untagged = await ok(db, ['plants', 'update', fern, '--no-tag', '--json']);
      const fernNow = await show(fern);
      assert.deepEqual(JSON.parse(untagged.stdout), fernNow);
      assert.equal('tag' in fernNow, false, 'the tag is gone, not empty');
      assert.equal(fernNow.public, true, 'a change keeps the public flag');
      // Repeated, it says so; the name it echoes has its control characters shown as `?`, as everywhere on stderr.
      const again = await ok(db, ['plants', 'update', fern, '--no-tag']);
      assert.match(again.stderr, new RegExp(`^plant ${fern} \\(Boston\\\\tfern\\) was already as asked$`, 'm'));
      assert.equal(again.stdout, `ID\tNAME\tTAG\tOWNER\tPUBLIC\n${fern}\tBoston\\tfern\t-\talice\tyes\n`);

      await fails(db, ['plants', 'update', ivy], /^plantstore: give at least one of --name, --tag or --no-tag$/);
      await fails(db, ['plants', 'update', ivy, '--tag', 'x', '--no-tag'], /^plantstore: give --tag or --no-tag, not both$/);
      await fails(db, ['plants', 'update', ivy, '--name', ''], /plant name must not be empty/);
      await fails(db, ['plants', 'update', '999', '--name', 'Ghost'], /^plantstore: no plant with id 999$/);
      await fails(db, ['plants', 'show', '999'], /^plantstore: no plant with id 999$/);
      await fails(db, ['plants', 'show', 'abc'], /invalid plant id/);
      assert.equal((await show(ivy)).name, 'English ivy', 'a refused change changes nothing');

      const listed = async (...args: string[]) =>
        (JSON.parse((await ok(db, ['plants', 'list', '--json', ...args])).stdout) as Array<{ name: string }>).map((p) => p.name);
      await ok(db, ['plants', 'update', ivy, '--tag', 'fern']);
      assert.deepEqual(await listed('--tag', 'fern'), ['English ivy', 'Moss']);
      assert.deepEqual(await listed('--tag', 'fern', '--owner', 'bob'), ['English ivy', 'Moss']);
      assert.deepEqual(await listed('--tag', 'fern', '--owner', 'alice'), []);
      assert.deepEqual(await listed('--tag', 'Fern'), [], 'tags are matched exactly');
      assert.deepEqual(await listed('--tag', 'none'), []);
      await fails(db, ['plants', 'list', '--tag', 'fern', '--owner', 'nobody'], /no user named "nobody"/);
      // No plant has an empty tag (GET /plants?tag= is a 400 too): the filter is a mistake, not an empty list.
      await fails(db, ['plants', 'list', '--tag', ''], /tag must not be empty/);
    });

    it('reports user mistakes as one line and a non-zero exit', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      await fails(db, ['users', 'add', 'alice'], /^plantstore: user "alice" already exists$/);
      await fails(db, ['users', 'add', ' spaced'], /white space/);
      // One rule for names on every path: a look-alike of an existing user is refused, as a JWT's would be.
      for (const lookalike of ['ALICE', '\u0430lice', '\uff41lice'])
        await fails(db, ['users', 'add', lookalike], /looks like that of the user "alice"/);
      // And in an import: nothing of it is written.
      const file = join(dir, `lookalike-${backend.name}.ndjson`);
      writeFileSync(file, `${JSON.stringify({ type: 'user', name: 'carol' })}\n${JSON.stringify({ type: 'user', name: 'ALICE' })}\n`);
      await fails(
        db,
        ['import', file],
        /^plantstore: line 2: user name "ALICE" looks like that of the user "alice"; choose a name that does not$/,
      );
      assert.ok(!(await ok(db, ['users', 'list'])).stdout.includes('carol'), 'the import wrote nothing');
      // Users that arrive together are not compared: an export from before the rule imports back whole.
      writeFileSync(file, `${JSON.stringify({ type: 'user', name: 'Dave' })}\n${JSON.stringify({ type: 'user', name: 'dave' })}\n`);
      await ok(db, ['import', file]);
      await fails(db, ['plants', 'add', '--name', 'X', '--owner', 'nobody'], /no user named "nobody"/);
      await fails(db, ['plants', 'remove', 'abc'], /invalid plant id/);
      await fails(db, ['plants', 'remove', '999'], /no plant with id 999/);
      await fails(db, ['grants', 'add', '1'], /exactly one of --user or --group|no plant/);
      await fails(db, ['tokens', 'create', 'alice', '--expires-in', '10 years'], /invalid duration/);
      await fails(db, ['tokens', 'revoke', '42'], /no token with id 42/);
      // A setting's text is refused under the name it was given by: the flag, or the variable.
      await fails(db, ['serve', '--cache', 'maybe'], /^plantstore: invalid --cache "maybe": expected true or false$/);
      const fromEnv = await cli(db, ['serve'], undefined, { PLANTSTORE_CACHE: 'maybe' });
      assert.notEqual(fromEnv.code, 0);
      assert.match(fromEnv.stderr, /^plantstore: invalid PLANTSTORE_CACHE "maybe": expected true or false$/m);
      await fails(
        db,
        ['serve', '--port', '0', '--redis-url', 'redis://127.0.0.1:6379/abc'],
        /^plantstore: invalid --redis-url "redis:\/\/127\.0\.0\.1:6379\/abc": the path must be a database number: .*$/,
      );
      await fails(db, ['import', join(dir, 'missing.ndjson')], /^plantstore: cannot read .*missing\.ndjson: no such file$/);
      // A folder opens for reading; it is named before the import begins, not met as a raw EISDIR in its first read.
      const folder = join(dir, `catalogue-folder-${backend.name}`);
      mkdirSync(folder);
      await fails(db, ['import', folder], /^plantstore: cannot read .*catalogue-folder-\w+: is a directory$/);
      if (backend.name === 'sqlite') {
        const notADb = join(dir, 'not-a-db');
        writeFileSync(notADb, 'this is not sqlite, just text that is long enough to be a header '.repeat(4));
        for (const args of [
          ['users', 'list'],
          ['serve', '--port', '18600'],
        ])
          await fails(notADb, args, /^plantstore: cannot open the database .*not-a-db: the file is not a SQLite database$/);
      }
      const unknown = await cli(db, ['frobnicate']);
      assert.notEqual(unknown.code, 0);
      assert.match(unknown.stderr, /unknown command/);
    });

    it('issues a token printed alone, which works until it is revoked', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      await ok(db, ['plants', 'add', '--name', 'Fern', '--owner', 'alice']);
      const created = await ok(db, ['tokens', 'create', 'alice', '--label', 'laptop', '--expires-in', '30d']);
      const token = created.stdout.trim();
      assert.match(created.stdout, /^pst_[A-Za-z0-9_-]{43}\n$/);

      const server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent' }));
      try {
        const get = () => fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
        const before = await get();
        assert.equal(before.status, 200);
        assert.deepEqual(await before.json(), [{ name: 'Fern' }]);

        const [listed] = JSON.parse((await ok(db, ['tokens', 'list', '--json'])).stdout);
        assert.equal(listed.label, 'laptop');
        assert.equal(listed.state, 'active');
        assert.equal(Date.parse(listed.expiresAt) - Date.parse(listed.createdAt), 30 * 86_400_000, 'it lives exactly 30 days');
        assert.ok(!JSON.stringify(listed).includes(token), 'token list must never show the token');
        await ok(db, ['tokens', 'revoke', String(listed.id)]);

        const afterRevoke = await get();
        assert.equal(afterRevoke.status, 401);
        assert.equal(((await afterRevoke.json()) as { error: number }).error, 40104);
      } finally {
        await server.stop();
      }
    });

    it('imports all or nothing, naming the bad line', async () => {
      const db = await freshDb();
      await ok(db, ['migrate']);
      const schemaBefore = await storedSchema(db);
      const good = [
        { type: 'user', name: 'alice' },
        { type: 'user', name: 'bob' },
        { type: 'group', name: 'gardeners', members: ['alice', 'bob'] },
        {
          type: 'plant',
          name: 'Monstera deliciosa',
          tag: 'tropical',
          owner: 'alice',
          public: false,
          sharedWith: ['bob', 'group:gardeners'],
        },
      ];
      const cases: [string, string, RegExp][] = [
        ['not JSON', ndjson(good) + '{"type": "plant",\n', /^plantstore: line 5: not valid JSON/],
        ['unknown owner', ndjson([...good, { type: 'plant', name: 'X', owner: 'carol' }]), /^plantstore: line 5: no user named "carol"/],
        [
          'unknown group',
          ndjson([...good, { type: 'plant', name: 'X', owner: 'bob', sharedWith: ['group:nope'] }]),
          /line 5: no group named "nope"/,
        ],
        ['member before user', ndjson([{ type: 'group', name: 'g', members: ['zed'] }, ...good]), /line 1: no user named "zed"/],
        ['unknown type', ndjson([...good, { type: 'tree', name: 'X' }]), /line 5: "type" must be/],
        ['unknown field', ndjson([...good, { type: 'plant', name: 'X', owner: 'bob', tags: 'x' }]), /line 5: unknown field "tags"/],
        [
          'wrong type',
          ndjson([...good, { type: 'plant', name: 'X', owner: 'bob', public: 'yes' }]),
          /line 5: field public must be boolean/,
        ],
        ['empty name', ndjson([...good, { type: 'plant', name: '', owner: 'bob' }]), /line 5: plant name must not be empty/],
        ['missing owner', ndjson([...good, { type: 'plant', name: 'X' }]), /line 5: plant record is missing "owner"/],
      ];
      for (const [label, text, pattern] of cases) {
        const file = join(dir, `bad-${label.replaceAll(' ', '-')}.ndjson`);
        writeFileSync(file, text);
        await fails(db, ['import', file], pattern);
        const users = JSON.parse((await ok(db, ['users', 'list', '--json'])).stdout);
        assert.deepEqual(users, [], `${label}: nothing may be written by a failed import`);
      }
      assert.deepEqual(await storedSchema(db), schemaBefore, 'failed first loads leave the schema as it was');
      const file = join(dir, 'good.ndjson');
      writeFileSync(file, ndjson(good));
      const run = await ok(db, ['import', file]);
      assert.match(run.stderr, /imported 2 users, 1 groups, 1 plants, 2 grants/);
      assert.deepEqual(await storedSchema(db), schemaBefore, 'a first load adds back every key and index it went without');
    });

    it('refuses a plant id given twice or already taken, naming it and its lines, and writes nothing', async () => {
      const db = await freshDb();
      const plant = (id: number, name: string) => ({ type: 'plant', id, name, owner: 'alice' });
      const line = (id: number, name: string) => JSON.stringify(plant(id, name));
      // A first load (written in bulk on both backends): found when the index is built at the end.
      await fails(
        db,
        ['import', '-'],
        /^plantstore: line 4: plant id 5 is already given on line 2$/,
        ndjson([{ type: 'user', name: 'alice' }, plant(5, 'a'), plant(6, 'b'), plant(5, 'c')]),
      );
      // An id given after a plant that took it as its automatic id: that line gave none.
      await fails(
        db,
        ['import', '-'],
        /^plantstore: line 3: plant id 1 is already the automatic id of the plant without one on line 2$/,
        ndjson([{ type: 'user', name: 'alice' }, { type: 'plant', name: 'auto', owner: 'alice' }, plant(1, 'explicit')]),
      );
      await ok(db, ['import', '-'], ndjson([{ type: 'user', name: 'alice' }, plant(5, 'a'), plant(6, 'b')]));
      const stored = (await ok(db, ['export'])).stdout;
      // Smaller than what is stored (written row by row), then larger (SQLite writes it in bulk).
      for (const [records, at] of [
        [[plant(6, 'c')], 1],
        [[plant(7, 'd'), plant(8, 'e'), plant(9, 'f'), plant(6, 'g')], 4],
      ] as const) {
        await fails(
          db,
          ['import', '-'],
          new RegExp(`^plantstore: line ${at}: plant id 6 is already taken by a stored plant$`),
          ndjson(records),
        );
        assert.equal((await ok(db, ['export'])).stdout, stored);
      }
      // Both in the file, past blank lines: lines are counted in the file, not among plants.
      await fails(
        db,
        ['import', '-'],
        /^plantstore: line 6: plant id 10 is already given on line 2$/,
        ['', line(10, 'h'), '', '', line(11, 'i'), line(10, 'j')].join('\n'),
      );
      assert.equal((await ok(db, ['export'])).stdout, stored);
      // PostgreSQL writes the plants before a user in an earlier batch, and its rollback takes them away.
      const earlier = backend.name === 'sqlite' ? 'line 1' : 'an earlier line';
      await fails(
        db,
        ['import', '-'],
        new RegExp(`^plantstore: line 4: plant id 10 is already given on ${earlier}$`),
        ndjson([plant(10, 'h'), { type: 'user', name: 'bob' }, plant(11, 'i'), plant(10, 'j')]),
      );
      assert.equal((await ok(db, ['export'])).stdout, stored);
    });

    it(
      'exports and imports while made to wait past the statement timeout, which bounds requests, not bulk commands',
      { skip: backend.name !== 'postgres' },
      async () => {
        const timeoutMs = 300;
        const env = { PLANTSTORE_PG_STATEMENT_TIMEOUT_MS: String(timeoutMs) };
        // Another transaction holds plants: the command waits in its transaction for longer than the timeout, as a
        // long export's cursor or a large import's COPY would run, and goes on once the holder commits.
        const whilePlantsHeld = async (db: string, run: () => Promise<CliRun>): Promise<CliRun> => {
          const schema = new URL(db).searchParams.get('schema')!;
          const holder = new pg.Client({ connectionString: db.replace(/\?.*$/, '') });
          await holder.connect();
          try {
            await holder.query(`BEGIN; LOCK TABLE ${schema}.plants IN ACCESS EXCLUSIVE MODE`);
            const running = run();
            await eventually(
              'the command waits for plants',
              async () =>
                (await adminQuery(`SELECT FROM pg_locks WHERE relation = $1::regclass AND NOT granted`, [`${schema}.plants`])).length > 0,
              // A CLI started on a loaded machine gets to the lock whenever it does.
              { timeoutMs: 20_000 },
            );
            await new Promise((resolve) => setTimeout(resolve, 2 * timeoutMs));
            await holder.query('COMMIT');
            return await running;
          } finally {
            await holder.end();
          }
        };
        const source = await freshDb();
        const records = [
          { type: 'user', name: 'alice' },
          ...Array.from({ length: 100 }, (_, i) => ({ type: 'plant', name: `Plant ${i}`, owner: 'alice', sharedWith: ['alice'] })),
        ];
        await ok(source, ['import', '-'], ndjson(records));
        const exported = await whilePlantsHeld(source, () => cli(source, ['export'], undefined, env));
        assert.equal(exported.code, 0, exported.stderr);
        assert.equal(exported.stdout.trimEnd().split('\n').length, records.length);
        const target = await freshDb();
        await ok(target, ['migrate']);
        const imported = await whilePlantsHeld(target, () => cli(target, ['import', '-'], exported.stdout, env));
        assert.equal(imported.code, 0, imported.stderr);
        assert.equal((await ok(target, ['export'])).stdout, exported.stdout);
      },
    );

    it(
      'migrates whatever the statement timeout, which bounds requests, not migrations',
      { skip: backend.name !== 'postgres' },
      async () => {
        // Kysely's migration lock (a session advisory lock) held elsewhere for longer than the timeout: a migration
        // under the timeout would be cancelled while it waits, as one building an index on a large table would be.
        const holder = new pg.Client({ connectionString: PG_URL });
        await holder.connect();
        try {
          await holder.query(`SELECT pg_advisory_lock(${KYSELY_MIGRATION_LOCK})`);
          const migrating = cli(await freshDb(), ['migrate'], undefined, { PLANTSTORE_PG_STATEMENT_TIMEOUT_MS: '200' });
          await new Promise((resolve) => setTimeout(resolve, 800));
          await holder.query(`SELECT pg_advisory_unlock(${KYSELY_MIGRATION_LOCK})`);
          const run = await migrating;
          assert.equal(run.code, 0, run.stderr);
        } finally {
          await holder.end();
        }
      },
    );

    it('imports records that repeat or extend what is stored, record by record, whatever the backend batches', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'bob', '--admin']);
      await ok(db, ['groups', 'add', 'g1']);
      await ok(db, ['groups', 'add-member', 'g1', 'bob']);
      await ok(
        db,
        ['import', '-'],
        ndjson([
          { type: 'user', name: 'alice', admin: true },
          { type: 'user', name: 'carol' },
          // No flag keeps the one given earlier; an explicit one replaces the stored one.
          { type: 'user', name: 'alice' },
          { type: 'user', name: 'bob', admin: false },
          { type: 'group', name: 'g1', members: ['alice'] },
          { type: 'group', name: 'g2', members: ['carol'] },
          { type: 'group', name: 'g2', members: ['alice', 'carol'] },
          { type: 'plant', name: 'P', owner: 'alice', sharedWith: ['carol', 'carol', 'group:g2', 'group:g2', 'user:carol'] },
          { type: 'user', name: 'dave', admin: true },
          { type: 'plant', name: 'Q', owner: 'dave', public: true, sharedWith: ['group:g1'] },
        ]),
      );
      assert.deepEqual(
        (await ok(db, ['export'])).stdout
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l)),
        [
          { type: 'user', name: 'bob' },
          { type: 'user', name: 'alice', admin: true },
          { type: 'user', name: 'carol' },
          { type: 'user', name: 'dave', admin: true },
          { type: 'group', name: 'g1', members: ['bob', 'alice'] },
          { type: 'group', name: 'g2', members: ['alice', 'carol'] },
          { type: 'plant', id: 1, name: 'P', owner: 'alice', public: false, sharedWith: ['carol', 'group:g2'] },
          { type: 'plant', id: 2, name: 'Q', owner: 'dave', public: true, sharedWith: ['group:g1'] },
        ],
      );
    });

    it('imports into a catalogue that has plants: ids continue after the largest ever used, owners keep their plants, the schema stays', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      await ok(db, ['users', 'add', 'bob']);
      const schemaBefore = await storedSchema(db);
      const plant = (name: string, owner: string) => ({
        type: 'plant',
        name,
        owner,
        public: false,
        sharedWith: [owner === 'alice' ? 'bob' : 'alice'],
      });
      const listed = async (owner?: string): Promise<Array<[number, string]>> =>
        (
          JSON.parse((await ok(db, ['plants', 'list', '--json', ...(owner ? ['--owner', owner] : [])])).stdout) as Array<{
            id: number;
            name: string;
          }>
        ).map((p) => [p.id, p.name]);
      // Each import is larger than the catalogue it goes into, but one (SQLite writes those in bulk, and rebuilds an
      // index); the first goes into a catalogue without plants (PostgreSQL adds the foreign keys back at the end).
      await ok(db, ['import', '-'], ndjson(['a1', 'a2', 'a3'].map((n) => plant(n, 'alice'))));
      const lastId = (await listed()).at(-1)![0];
      await ok(db, ['plants', 'remove', String(lastId)]);
      await ok(db, ['import', '-'], ndjson([plant('b1', 'bob')]));
      await ok(
        db,
        ['import', '-'],
        ndjson(Array.from({ length: 40 }, (_, i) => plant(`${i % 2 ? 'a' : 'b'}${i + 10}`, i % 2 ? 'alice' : 'bob'))),
      );
      const all = await listed();
      assert.deepEqual(
        all.slice(0, 2).map(([, name]) => name),
        ['a1', 'a2'],
      );
      assert.deepEqual(
        all.slice(2).map(([id]) => id),
        Array.from({ length: 41 }, (_, i) => lastId + 1 + i),
        'a removed id is never used again',
      );
      assert.deepEqual(
        await listed('bob'),
        all.filter(([, name]) => name.startsWith('b')),
      );
      assert.deepEqual(
        await listed('alice'),
        all.filter(([, name]) => name.startsWith('a')),
      );
      assert.deepEqual(await storedSchema(db), schemaBefore);
    });

    it('imports grants to many grantees in any order beside stored ones; a failed import leaves them as they were', async () => {
      const db = await freshDb();
      const users = Array.from({ length: 12 }, (_, u) => `u${u}`);
      const groups = Array.from({ length: 4 }, (_, g) => `g${g}`);
      // Grantees in an order of their own per plant, repeated, users and groups mixed (SQLite queues them and
      // writes them sorted by grantee at the end).
      const plants = (prefix: string, count: number) =>
        Array.from({ length: count }, (_, i) => ({
          type: 'plant',
          name: `${prefix}${i}`,
          owner: users[(i * 5) % users.length]!,
          public: false,
          sharedWith: [
            users[(i * 7 + 3) % users.length]!,
            `group:${groups[(i * 3) % groups.length]}`,
            users[(i * 11) % users.length]!,
          ].concat(i % 4 === 0 ? [users[(i * 7 + 3) % users.length]!] : []),
        }));
      const first = plants('a', 5);
      await ok(
        db,
        ['import', '-'],
        ndjson([...users.map((name) => ({ type: 'user', name })), ...groups.map((name) => ({ type: 'group', name })), ...first]),
      );
      const schemaBefore = await storedSchema(db);
      // Larger than what is stored, so SQLite writes it in bulk.
      const second = plants('b', 60);
      await ok(db, ['import', '-'], ndjson(second));
      const exported = (await ok(db, ['export'])).stdout;
      // Also larger than what is stored: it fails after its grants were queued and its indexes dropped.
      await fails(
        db,
        ['import', '-'],
        /line 81: no user named "nobody"/,
        ndjson([...plants('c', 80), { type: 'plant', name: 'x', owner: 'nobody' }]),
      );
      assert.equal((await ok(db, ['export'])).stdout, exported, 'a failed import writes no plant and no grant');
      assert.deepEqual(await storedSchema(db), schemaBefore, 'the indexes are built again as they were');
      // What the export must show: users by id, then groups by id, each once.
      const expected = [...first, ...second].map((plant, i) => {
        const named = new Set(plant.sharedWith);
        return {
          type: 'plant',
          id: i + 1,
          name: plant.name,
          owner: plant.owner,
          public: false,
          sharedWith: [...users.filter((u) => named.has(u)), ...groups.filter((g) => named.has(`group:${g}`)).map((g) => `group:${g}`)],
        };
      });
      const exportedPlants = exported
        .trimEnd()
        .split('\n')
        .map((line) => JSON.parse(line) as { type: string })
        .filter((record) => record.type === 'plant');
      assert.deepEqual(exportedPlants, expected);
    });

    it(
      'loads a first catalogue with its foreign keys when another transaction holds its tables',
      { skip: backend.name !== 'postgres' },
      async () => {
        const db = await freshDb();
        await ok(db, ['users', 'add', 'alice']);
        const schemaBefore = await storedSchema(db);
        // A reader in the middle of a long transaction: a first load must not wait for it, nor make others queue.
        const reader = new pg.Client({ connectionString: db.replace(/\?.*$/, '') });
        await reader.connect();
        try {
          await reader.query(`BEGIN; SELECT count(*) FROM ${new URL(db).searchParams.get('schema')}.users`);
          const load = ok(
            db,
            ['import', '-'],
            ndjson([{ type: 'plant', name: 'p1', owner: 'alice', public: false, sharedWith: ['alice'] }]),
          );
          let timer: NodeJS.Timeout | undefined;
          const released = new Promise((resolve) => (timer = setTimeout(resolve, 20_000, 'the reader')));
          try {
            assert.notEqual(await Promise.race([load, released]), 'the reader', 'the load finished while the reader held its lock');
          } finally {
            // A pending timer would hold the test process open for the rest of its 20 s.
            clearTimeout(timer);
          }
          await reader.query('COMMIT');
        } finally {
          await reader.end();
        }
        assert.deepEqual(await storedSchema(db), schemaBefore);
        assert.deepEqual(
          JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout).map((p: { name: string }) => p.name),
          ['p1'],
        );
      },
    );

    it(
      'a first load waiting for a reader that holds plants holds no grant table meanwhile, so the reader reads on',
      { skip: backend.name !== 'postgres' },
      async () => {
        const db = await freshDb();
        await ok(db, ['users', 'add', 'alice']);
        const schema = new URL(db).searchParams.get('schema')!;
        const reader = new pg.Client({ connectionString: db.replace(/\?.*$/, '') });
        await reader.connect();
        try {
          await reader.query(`BEGIN; SELECT count(*) FROM ${schema}.plants`);
          const load = ok(db, ['import', '-'], ndjson([{ type: 'plant', name: 'p1', owner: 'alice', sharedWith: ['alice'] }]));
          // The load asks for plants, and waits (up to its one-second lock timeout): what does it hold meanwhile?
          const held = (await eventually(
            'the load waits for the lock on plants',
            async () => {
              const rows = await adminQuery<{ pid: number }>(
                `SELECT pid FROM pg_locks WHERE relation = $1::regclass AND NOT granted AND mode = 'AccessExclusiveLock'`,
                [`${schema}.plants`],
              );
              if (rows.length === 0) return undefined;
              return (
                await adminQuery<{ rel: string }>(
                  `SELECT relation::regclass::text AS rel FROM pg_locks WHERE pid = $1 AND granted AND mode = 'AccessExclusiveLock' AND relation IS NOT NULL`,
                  [rows[0]!.pid],
                )
              ).map((r) => r.rel);
            },
            // Until the CLI, started on a loaded machine, gets as far as the lock: polled all along, its one second of
            // waiting is seen whenever it comes.
            { until: (rels) => rels !== undefined, timeoutMs: 20_000 },
          ))!;
          assert.deepEqual(
            held.filter((rel) => /grants/.test(rel)),
            [],
            'a grant table locked by the load would make the reader wait for it',
          );
          await reader.query(`SELECT count(*) FROM ${schema}.plant_user_grants`);
          await reader.query('COMMIT');
          await load;
        } finally {
          await reader.end();
        }
        assert.deepEqual(
          JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout).map((p: { name: string }) => p.name),
          ['p1'],
        );
      },
    );

    it('round-trips export then import, byte for byte, including odd names and ids in any order', async () => {
      const source = await freshDb();
      const records = [
        { type: 'user', name: 'alice', admin: true },
        { type: 'user', name: 'bob' },
        { type: 'user', name: 'O\'Brien "the gardener"; <b>hi</b> ünïcødé 🌿' },
        { type: 'group', name: 'gardeners', members: ['bob', 'O\'Brien "the gardener"; <b>hi</b> ünïcødé 🌿'] },
        { type: 'group', name: 'empty group' },
        { type: 'plant', id: 42, name: 'Plain', owner: 'bob', public: false },
        // Backslashes, \\N, line breaks and tabs: what PostgreSQL's COPY text format must escape.
        { type: 'plant', id: 7, name: 'back\\slash \\N \\\\N line\nbreak\r\ttab', tag: '\\N', owner: 'alice', public: false },
        {
          type: 'plant',
          id: 9_007_199_254_740_991,
          name: 'Tagged',
          tag: 'tropical',
          owner: 'alice',
          public: true,
          sharedWith: ['bob', 'group:gardeners'],
        },
        {
          type: 'plant',
          id: 1,
          name: 'Odd "quoted"; DROP TABLE plants; -- <script>alert(1)</script>\u0001\t',
          tag: '\u0007',
          owner: 'bob',
          public: false,
          sharedWith: ['group:empty group'],
        },
      ];
      await ok(source, ['import', '-'], ndjson(records));
      const exported = (await ok(source, ['export'])).stdout;
      assert.deepEqual(
        exported
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l)),
        records,
      );

      const target = await freshDb();
      const file = join(dir, 'export.ndjson');
      await ok(source, ['export', '-o', file]);
      assert.equal(readFileSync(file, 'utf8'), exported);
      await ok(target, ['import', file]);
      assert.equal((await ok(target, ['export'])).stdout, exported);
    });

    it('imports a large catalogue in one streaming pass', async () => {
      const db = await freshDb();
      const lines = [JSON.stringify({ type: 'user', name: 'owner' }), JSON.stringify({ type: 'group', name: 'g', members: ['owner'] })];
      for (let i = 0; i < 50_000; i++) {
        lines.push(
          JSON.stringify({
            type: 'plant',
            id: i + 1,
            name: `plant ${i}`,
            ...(i % 3 ? { tag: `t${i % 7}` } : {}),
            owner: 'owner',
            public: i % 20 === 0,
            ...(i % 10 === 0 ? { sharedWith: ['group:g'] } : {}),
          }),
        );
      }
      const file = join(dir, 'large.ndjson');
      writeFileSync(file, lines.join('\n') + '\n');
      const run = await ok(db, ['import', file]);
      assert.match(run.stderr, /imported 1 users, 1 groups, 50000 plants, 5000 grants/);
      const exported = (await ok(db, ['export'])).stdout;
      assert.equal(exported, lines.join('\n') + '\n');
    });

    it('demo seeds once and prints working curl commands', async () => {
      const db = await freshDb();
      const first = await ok(db, ['demo']);
      const second = await ok(db, ['demo']);
      assert.match(first.stdout, /curl -s -H 'Authorization: Bearer pst_[A-Za-z0-9_-]{43}' 'http:\/\/127\.0\.0\.1:8080\/plants\?limit=5'/);
      const users = JSON.parse((await ok(db, ['users', 'list', '--json'])).stdout);
      assert.equal(users.length, 4, 'a second demo run must not duplicate the catalogue');
      assert.notEqual(first.stdout, second.stdout, 'each run issues fresh tokens');
    });

    it('serve answers, then drains and exits 0 on SIGTERM', async () => {
      const db = await freshDb();
      await ok(db, ['users', 'add', 'alice']);
      const server = await spawnServe(db);
      const health = await fetch(`${server.url}/healthz`);
      assert.equal(health.status, 200);
      assert.equal(await server.stop(), 0);
      const out = server.output();
      assert.match(out, /shutting down/);
    });
  });
