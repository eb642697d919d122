import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { holdTransaction } from '../helpers/held-transaction.js';
import { plainSql } from '../helpers/plain-sql.js';
import { runCli, spawnServe, type CliRun, type ServeProcess } from '../helpers/processes.js';

// Plants added without an id (`plants add` without --id, an import record without "id", plain SQL without api_id)
// get the largest id ever used plus one: within 1..2^53 - 1, never one a plant held before (a stale DELETE must not
// remove a newer plant), and when none is left, a clear error and nothing written. Tried as users and clients do:
// the CLI and a server as processes, HTTP, plain SQL.

const MAX = Number.MAX_SAFE_INTEGER;

after(() => cleanupBackends());

const ndjson = (records: object[]) => records.map((r) => JSON.stringify(r)).join('\n') + '\n';

async function ok(db: string, args: string[], stdin?: string): Promise<CliRun> {
  const run = await runCli(db, args, stdin);
  assert.equal(run.code, 0, `plantstore ${args.join(' ')} failed: ${run.stderr}`);
  return run;
}

const ALICE = "(SELECT id FROM users WHERE name = 'alice')";

for (const backend of BACKENDS) {
  describe(`automatic plant ids [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let server: ServeProcess;
    let token: string;
    const ids = async (): Promise<number[]> =>
      (JSON.parse((await ok(db, ['plants', 'list', '--json'])).stdout) as Array<{ id: number }>).map((p) => p.id);
    const post = (id: number, name: string) =>
      fetch(`${server.url}/plants`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ id, name }),
      });
    const remove = (id: number) => fetch(`${server.url}/plants/${id}`, { method: 'DELETE', headers: { authorization: `Bearer ${token}` } });
    const addWithoutId = async (name: string): Promise<number> =>
      Number((await ok(db, ['plants', 'add', '--name', name, '--owner', 'alice'])).stdout);

    before(async () => {
      db = await backend.freshDb();
      await ok(db, ['users', 'add', 'alice']);
      token = (await ok(db, ['tokens', 'create', 'alice'])).stdout.trim();
      server = await spawnServe(db);
    });
    after(() => server?.stop());

    it('never hands out an id a plant held before, whatever was deleted, imported or written by plain SQL', async () => {
      assert.deepEqual([await addWithoutId('a'), await addWithoutId('b'), await addWithoutId('c')], [1, 2, 3]);
      assert.equal((await remove(3)).status, 204);
      assert.equal(await addWithoutId('d'), 4, 'the deleted plant 3 kept its id');
      assert.equal((await post(100, 'chosen by a client')).status, 200);
      assert.equal((await remove(100)).status, 204);
      assert.equal(await addWithoutId('e'), 101, 'a client id that was deleted is not handed out again');
      await plainSql(db, `INSERT INTO plants (name, owner_id, is_public, created_at) VALUES ('by sql', ${ALICE}, 0, 0)`);
      await ok(db, ['import', '-'], ndjson(['f', 'g'].map((name) => ({ type: 'plant', name, owner: 'alice' }))));
      await ok(db, ['plants', 'remove', '104']);
      await plainSql(db, `INSERT INTO plants (name, owner_id, is_public, created_at) VALUES ('by sql again', ${ALICE}, 0, 0)`);
      assert.deepEqual(await ids(), [1, 2, 4, 101, 102, 103, 105]);
      // A client that kept the id of a plant deleted meanwhile does not remove the newer plant.
      assert.equal((await remove(3)).status, 404);
    });

    it('never hands out again the largest id after plain SQL changed it away or emptied the table without row deletes', async () => {
      const own = await backend.freshDb();
      await ok(own, ['users', 'add', 'alice']);
      const add = async (...id: string[]) => Number((await ok(own, ['plants', 'add', '--name', 'p', '--owner', 'alice', ...id])).stdout);
      assert.equal(await add('--id', '50'), 50);
      assert.equal(await add(), 51);
      await plainSql(own, 'UPDATE plants SET api_id = 7 WHERE api_id = 51');
      assert.equal(await add(), 52, 'the id 51 was used');
      // PostgreSQL's TRUNCATE fires no row trigger; SQLite's DELETE without WHERE runs them.
      await plainSql(own, backend.name === 'postgres' ? 'TRUNCATE plants CASCADE' : 'DELETE FROM plants');
      assert.equal(await add(), 53, 'the ids up to 52 were used');
      if (backend.name === 'postgres') await plainSql(own, 'TRUNCATE users CASCADE');
      else for (const table of ['plants', 'users']) await plainSql(own, `DELETE FROM ${table}`);
      await ok(own, ['users', 'add', 'alice']);
      assert.equal(await add(), 54, 'the ids up to 53 were used');
    });

    it("carries the largest id used through an export and import: a copy never hands out a deleted plant's id", async () => {
      const source = await backend.freshDb();
      await ok(source, ['users', 'add', 'alice']);
      const add = async (db: string, ...id: string[]) =>
        Number((await ok(db, ['plants', 'add', '--name', 'p', '--owner', 'alice', ...id])).stdout);
      for (const id of ['10', '20']) await add(source, '--id', id);
      await ok(source, ['plants', 'remove', '20']);
      const exported = (await ok(source, ['export'])).stdout;
      assert.equal(exported.split('\n')[0], '{"type":"usedIds","largest":20}');
      const copy = await backend.freshDb();
      await ok(copy, ['import', '-'], exported);
      assert.equal((await ok(copy, ['export'])).stdout, exported);
      assert.deepEqual([await add(source), await add(copy)], [21, 21]);
      // Once a plant holds the largest id, the record says nothing the plants do not: it is left out.
      assert.equal((await ok(copy, ['export'])).stdout.split('\n')[0], '{"type":"user","name":"alice"}');
      // In a file, id-less plants after the record are numbered after it; a lower one than stored changes nothing.
      const file = ndjson([
        { type: 'usedIds', largest: 500 },
        { type: 'plant', name: 'q', owner: 'alice' },
        { type: 'usedIds', largest: 30 },
      ]);
      await ok(copy, ['import', '-'], file);
      assert.equal(await add(copy), 502);
      for (const [largest, refusal] of [
        ['0', /line 1: field largest must be >= 1$/m],
        ['9007199254740992', /line 1: field largest must be <= 9007199254740991$/m],
        ['600.0000000000000001', /line 1: the number 600\.0000000000000001 is not a whole number/],
      ] as const) {
        const refused = await runCli(
          copy,
          ['import', '-'],
          `{"type":"usedIds","largest":${largest}}\n{"type":"plant","name":"r","owner":"alice"}\n`,
        );
        assert.equal(refused.code, 1, largest);
        assert.match(refused.stderr, refusal);
      }
      assert.equal(await add(copy), 503, 'nothing of the refused imports was written');
    });

    it(
      'a TRUNCATE and a plant added beside it, either held open in psql: no id is handed out twice',
      { skip: backend.name === 'postgres' ? false : 'TRUNCATE is PostgreSQL’s' },
      async () => {
        const own = await backend.freshDb();
        await ok(own, ['users', 'add', 'alice']);
        await ok(own, ['plants', 'add', '--name', 'p', '--owner', 'alice', '--id', '70']);
        const truncating = await holdTransaction(own, 'TRUNCATE plants CASCADE');
        const adding = runCli(own, ['plants', 'add', '--name', 'q', '--owner', 'alice']);
        await new Promise((resolve) => setTimeout(resolve, 500));
        await truncating.commit();
        assert.equal((await adding).stdout.trim(), '71');
        const inserting = await holdTransaction(
          own,
          `INSERT INTO plants (api_id, name, owner_id, is_public, created_at) VALUES (80, 'r', ${ALICE}, 0, 0)`,
        );
        const truncated = plainSql(own, 'TRUNCATE plants CASCADE');
        await new Promise((resolve) => setTimeout(resolve, 500));
        await inserting.commit();
        await truncated;
        assert.equal((await ok(own, ['plants', 'add', '--name', 's', '--owner', 'alice'])).stdout.trim(), '81');
      },
    );

    it('once a client took the last id, refuses to number a plant, clearly and writing nothing, and takes given ids', async () => {
      assert.equal((await post(MAX, 'the last id')).status, 200);
      const before = await ids();
      const refused = /no automatic plant id is left .*give the plant an id of its own/;
      const add = await runCli(db, ['plants', 'add', '--name', 'one too many', '--owner', 'alice']);
      assert.equal(add.code, 1);
      assert.match(add.stderr, refused);
      assert.equal(add.stdout, '');
      const imported = await runCli(db, ['import', '-'], ndjson([{ type: 'plant', name: 'no id', owner: 'alice' }]));
      assert.equal(imported.code, 1);
      assert.match(imported.stderr, new RegExp(`line 1: ${refused.source}`));
      await assert.rejects(
        plainSql(db, `INSERT INTO plants (name, owner_id, is_public, created_at) VALUES ('by sql', ${ALICE}, 0, 0)`),
        /no automatic plant id is left/,
      );
      assert.deepEqual(await ids(), before, 'nothing was written');
      assert.equal(Number((await ok(db, ['plants', 'add', '--id', '7', '--name', 'given', '--owner', 'alice'])).stdout), 7);
      // Every id stays within the range: the catalogue exports and imports back.
      const exported = (await ok(db, ['export'])).stdout;
      const copy = await backend.freshDb();
      await ok(copy, ['import', '-'], exported);
      assert.equal((await ok(copy, ['export'])).stdout, exported);
    });
  });
}
