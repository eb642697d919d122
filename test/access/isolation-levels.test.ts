import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type pg from 'pg';
import { connectPostgres, plainQuery } from '../helpers/plain-sql.js';
import { adminQuery, dropSchema, freshSchema, PG_URL, requirePostgres } from '../helpers/postgres.js';
import { runCli, spawnServe } from '../helpers/processes.js';

// Grants' tags are derived rows, kept by triggers that are exact at READ COMMITTED (migrations 0018, 0019). Plain SQL
// at a stricter level reads one snapshot all through and could leave a grant with its plant's old tag for good, and
// the plant on the wrong tag's pages of its grantees: such writes are refused (migration 0024). And the service's own
// sessions run at READ COMMITTED whatever the role's or the database's default.

const skip = await requirePostgres();

interface Interleaving {
  /** The write at the stricter level, run after its snapshot was taken and `beside` committed. */
  strict: string;
  /** The service-like write at READ COMMITTED, committed after the strict transaction's snapshot. */
  beside: string;
}

const SEED = `
  INSERT INTO users (name, created_at) VALUES ('ann', 0), ('bob', 0), ('cy', 0);
  INSERT INTO groups (name, created_at) VALUES ('gardeners', 0);
  INSERT INTO plants (name, owner_id, tag, created_at) SELECT 'Fern', id, 'shade', 0 FROM users WHERE name = 'ann';
  INSERT INTO plant_group_grants (group_id, plant_id) SELECT g.id, p.id FROM groups g, plants p`;
const GRANT_BOB = `INSERT INTO plant_user_grants (user_id, plant_id) SELECT u.id, p.id FROM users u, plants p WHERE u.name = 'bob'`;
const CY_JOINS = `INSERT INTO group_members (group_id, user_id) SELECT g.id, u.id FROM groups g, users u WHERE u.name = 'cy'`;
const RETAG = `UPDATE plants SET tag = 'sun'`;

/** Every grant row whose tag is not its plant's: none, when the derived rows are right. */
const WRONG_TAGS = `
  SELECT 'user' AS grant, g.tag FROM plant_user_grants g JOIN plants p ON p.id = g.plant_id WHERE g.tag IS DISTINCT FROM p.tag
  UNION ALL SELECT 'group', g.tag FROM plant_group_grants g JOIN plants p ON p.id = g.plant_id WHERE g.tag IS DISTINCT FROM p.tag
  UNION ALL SELECT 'member', g.tag FROM plant_member_grants g JOIN plants p ON p.id = g.plant_id WHERE g.tag IS DISTINCT FROM p.tag`;

async function failure(run: Promise<unknown>): Promise<{ code?: string; message: string } | undefined> {
  try {
    await run;
    return undefined;
  } catch (err) {
    return err as { code?: string; message: string };
  }
}

describe('plain SQL at a stricter isolation level than READ COMMITTED [postgres]', { skip }, () => {
  const { schema, url: db } = freshSchema();
  let strict: pg.Client;
  let beside: pg.Client;

  before(async () => {
    const migrated = await runCli(db, ['migrate']);
    assert.equal(migrated.code, 0, migrated.stderr);
    strict = await connectPostgres(db);
    beside = await connectPostgres(db);
  });
  after(async () => {
    await strict?.query('ROLLBACK').catch(() => {});
    await Promise.all([strict?.end(), beside?.end()]);
    await dropSchema(schema);
  });

  async function reseed(): Promise<void> {
    for (const table of ['plant_user_grants', 'plant_group_grants', 'group_members', 'plants', 'groups', 'users']) {
      await beside.query(`DELETE FROM ${table}`);
    }
    await beside.query(SEED);
  }

  /** Runs `strict` at `level` in a transaction whose snapshot predates `beside`'s commit; returns its failure. */
  async function interleave(level: string, { strict: write, beside: other }: Interleaving) {
    await reseed();
    await strict.query(`BEGIN ISOLATION LEVEL ${level}`);
    await strict.query('SELECT count(*) FROM plants'); // the snapshot
    await beside.query(other);
    const failed = await failure(strict.query(write).then(() => strict.query('COMMIT')));
    if (failed) await strict.query('ROLLBACK');
    assert.deepEqual(await plainQuery(db, WRONG_TAGS), [], 'every grant carries its plant’s tag');
    return failed;
  }

  for (const level of ['REPEATABLE READ', 'SERIALIZABLE']) {
    it(`refuses a change of a plant's tag at ${level}, which would miss a grant committed since its snapshot`, async () => {
      const failed = await interleave(level, { strict: RETAG, beside: GRANT_BOB });
      assert.equal(failed?.code, '0A000');
      assert.match(failed.message, new RegExp(`A change of a plant's tag runs at READ COMMITTED only, not ${level}`));
    });

    it(`refuses a membership that writes member grants at ${level}, which would read a tag changed since`, async () => {
      const failed = await interleave(level, { strict: CY_JOINS, beside: RETAG });
      assert.equal(failed?.code, '0A000');
      assert.match(failed.message, /A write of group access \(a membership, a group's grant\) runs at READ COMMITTED only/);
    });

    it(`lets a user's grant at ${level} fail as that level does when its plant changed since the snapshot`, async () => {
      const failed = await interleave(level, { strict: GRANT_BOB, beside: RETAG });
      assert.equal(failed?.code, '40001');
    });
  }

  it('still takes every write at READ COMMITTED, each reading what the other committed', async () => {
    for (const interleaving of [
      { strict: RETAG, beside: GRANT_BOB },
      { strict: CY_JOINS, beside: RETAG },
      { strict: GRANT_BOB, beside: RETAG },
    ]) {
      assert.equal(await interleave('READ COMMITTED', interleaving), undefined);
    }
    assert.deepEqual(await plainQuery(db, `SELECT tag FROM plant_user_grants`), [{ tag: 'sun' }]);
  });

  it('takes writes of a user’s own grant, a plant’s name and a membership of a group without grants at REPEATABLE READ', async () => {
    await reseed();
    await beside.query(`DELETE FROM plant_group_grants`);
    await strict.query('BEGIN ISOLATION LEVEL REPEATABLE READ');
    await strict.query(`${GRANT_BOB}; ${CY_JOINS}; UPDATE plants SET name = 'Maidenhair'`);
    await strict.query('COMMIT');
    assert.deepEqual(await plainQuery(db, WRONG_TAGS), []);
  });
});

describe('the service under a role whose default isolation is REPEATABLE READ [postgres]', { skip }, () => {
  const role = 'plantstore_test_repeatable_read';
  const { schema, url } = freshSchema(PG_URL.replace(/\/\/[^@/]*@/, `//${role}@`));

  before(async () => {
    await adminQuery(`DO $$ BEGIN CREATE ROLE ${role} LOGIN SUPERUSER; EXCEPTION WHEN duplicate_object THEN NULL; END $$`);
    await adminQuery(`ALTER ROLE ${role} SET default_transaction_isolation = 'repeatable read'`);
  });
  after(async () => {
    await dropSchema(schema);
    await adminQuery(`DROP ROLE IF EXISTS ${role}`);
  });

  it('changes a shared plant’s tag over HTTP, its sessions at READ COMMITTED', async () => {
    const lines = [
      { type: 'user', name: 'ann' },
      { type: 'user', name: 'bob' },
      { type: 'group', name: 'gardeners', members: ['bob'] },
      { type: 'plant', name: 'Fern', owner: 'ann', public: false, tag: 'shade', sharedWith: ['group:gardeners'] },
    ];
    const imported = await runCli(url, ['import', '-'], `${lines.map((line) => JSON.stringify(line)).join('\n')}\n`);
    assert.equal(imported.code, 0, imported.stderr);
    const [isolation] = await plainQuery<{ level: string }>(url, `SELECT current_setting('transaction_isolation') AS level`);
    assert.equal(isolation?.level, 'repeatable read', 'plain SQL under the role runs at its default');
    const ann = (await runCli(url, ['tokens', 'create', 'ann'])).stdout.trim();
    const bob = (await runCli(url, ['tokens', 'create', 'bob'])).stdout.trim();
    const server = await spawnServe(url);
    try {
      const auth = (token: string) => ({ authorization: `Bearer ${token}` });
      const [fern] = (await (await fetch(`${server.url}/plants?fields=id,name,tag`, { headers: auth(ann) })).json()) as Array<{
        id: string;
      }>;
      const patched = await fetch(`${server.url}/plants/${fern!.id}`, {
        method: 'PATCH',
        headers: { ...auth(ann), 'content-type': 'application/merge-patch+json' },
        body: JSON.stringify({ tag: 'sun' }),
      });
      assert.equal(patched.status, 200, await patched.text());
      const bobsSun = await fetch(`${server.url}/plants?tag=sun`, { headers: auth(bob) });
      assert.deepEqual(await bobsSun.json(), [{ name: 'Fern', tag: 'sun' }]);
      assert.deepEqual(await plainQuery(url, WRONG_TAGS), []);
    } finally {
      assert.equal(await server.stop(), 0, server.output().slice(-2000));
    }
  });
});
