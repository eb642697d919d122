import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { recordBatch } from '../../src/import-format/records.js';
import { openStore } from '../../src/store/open-store.js';
import { MEMBER_GRANTS } from '../../src/store/schema-names.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { plainQuery, plainSql as runPlainSql } from '../helpers/plain-sql.js';

// The member grants (migration 0012) are what the listing reads for a user's groups: after every kind of write
// that touches memberships or group grants (the store's, cascades of removed users, groups and plants, an import,
// plain SQL), they are exactly the pairs of the memberships and the group grants, no more and no fewer. Every
// grant carries its plant's tag (migration 0018), which a page of one tag reads by, after every such write too.

after(() => cleanupBackends());

type Row = [user: number, plant: number, group: number];

/** The pairs of the memberships and grants of the groups that keep member grants (small ones, migration 0014). */
const PAIRS =
  'SELECT m.user_id, g.plant_id, g.group_id FROM plant_group_grants g JOIN group_members m ON m.group_id = g.group_id ' +
  'JOIN group_sizes s ON s.group_id = g.group_id WHERE s.ranged = 0';

/** Groups whose counts are not their rows', or that are ranged (or not) against the bounds. */
const WRONG_SIZES = `SELECT g.id, s.plants, s.members, s.ranged FROM groups g CROSS JOIN group_access_bounds b
  LEFT JOIN group_sizes s ON s.group_id = g.id
  WHERE coalesce(s.plants, 0) <> (SELECT count(*) FROM plant_group_grants WHERE group_id = g.id)
     OR coalesce(s.members, 0) <> (SELECT count(*) FROM group_members WHERE group_id = g.id)
     OR (s.ranged = 1 AND s.plants <= b.plants / 2 AND s.members <= b.members / 2)
     OR (coalesce(s.ranged, 0) = 0 AND (s.plants > b.plants OR s.members > b.members))`;

/** Grants whose tag is not their plant's. */
const WRONG_TAGS = ['plant_user_grants', 'plant_group_grants', MEMBER_GRANTS]
  .map((table) => `SELECT g.plant_id, g.tag, p.tag FROM ${table} g JOIN plants p ON p.id = g.plant_id WHERE g.tag IS DISTINCT FROM p.tag`)
  .join(' UNION ALL ');

/** The bounds of migration 0014 as released, and bounds so low that groups go ranged and back all through the test. */
const BOUNDS = [
  { name: 'bounds as released', set: undefined },
  { name: 'groups ranged past 2 plants or 1 member', set: 'UPDATE group_access_bounds SET plants = 2, members = 1' },
];

for (const backend of BACKENDS) {
  for (const bounds of BOUNDS) {
    describe(`member grants follow memberships and group grants, ${bounds.name} [${backend.name}]`, { skip: backend.skip }, () => {
      it('after the store, cascades, an import and plain SQL', async () => {
        const db = await backend.freshDb();
        const store = await openStore({ db });
        const plainSql = (text: string) => runPlainSql(db, text);
        if (bounds.set) await plainSql(bounds.set);
        const rows = async (sqlText: string): Promise<Row[]> => {
          if (backend.name === 'sqlite') {
            const sqlite = new BetterSqlite3(db, { readonly: true });
            try {
              return sqlite.prepare(sqlText).raw(true).all() as Row[];
            } finally {
              sqlite.close();
            }
          }
          const found = await plainQuery<Record<string, string | null>>(db, sqlText);
          return found.map((r) => Object.values(r).map((v) => (v === null || Number.isNaN(Number(v)) ? v : Number(v))) as unknown as Row);
        };
        const sorted = (list: Row[]) => list.map((r) => r.join(' ')).sort();
        const check = async (after: string, size?: number) => {
          const kept = await rows(`SELECT user_id, plant_id, group_id FROM ${MEMBER_GRANTS}`);
          assert.deepEqual(sorted(kept), sorted(await rows(PAIRS)), `after ${after}`);
          assert.deepEqual(await rows(WRONG_SIZES), [], `after ${after}`);
          assert.deepEqual(await rows(WRONG_TAGS), [], `after ${after}: grants' tags`);
          if (size !== undefined && bounds.set === undefined) assert.equal(kept.length, size, `after ${after}: ${JSON.stringify(kept)}`);
        };
        try {
          for (const user of ['ann', 'ben', 'cat']) await store.users.add(user, false);
          for (const group of ['g1', 'g2']) await store.groups.add(group);
          const plant = async (name: string) => (await store.plants.create(OPERATOR, { name, tag: `${name} tag`, owner: 'cat' })).id;
          const [p1, p2, p3] = [await plant('p1'), await plant('p2'), await plant('p3')];
          await store.groups.addMember('g1', 'ann');
          await store.grants.add(p1, { group: 'g1' });
          await check('a membership, then a grant', 1);
          await store.grants.add(p2, { group: 'g1' });
          await store.groups.addMember('g1', 'ben');
          await check('a grant, then a membership', 4);
          await store.grants.add(p2, { user: 'ben' });
          await store.plants.update(OPERATOR, p2, { tag: 'changed' });
          await check('a tag changed', 4);
          await store.plants.update(OPERATOR, p2, { tag: null });
          await check('a tag removed', 4);
          await plainSql(`UPDATE plants SET tag = 'plain' WHERE name IN ('p1', 'p2')`);
          await check('tags changed by plain SQL', 4);
          await plainSql(`UPDATE plant_user_grants SET tag = 'wrong'`);
          await check('plain SQL writing a grant its own tag', 4);
          // A plant written again whole by plain SQL: on SQLite without foreign keys, as the sqlite3 shell runs, its
          // grants stay for the new row.
          const again = `SELECT id, api_id, name, 'again', owner_id, is_public, created_at FROM plants WHERE name = 'p2'`;
          const columns = '(id, api_id, name, tag, owner_id, is_public, created_at)';
          await plainSql(
            backend.name === 'sqlite'
              ? `PRAGMA foreign_keys = OFF; INSERT OR REPLACE INTO plants ${columns} ${again}`
              : `INSERT INTO plants ${columns} OVERRIDING SYSTEM VALUE ${again} ON CONFLICT (id) DO UPDATE SET tag = excluded.tag`,
          );
          await check('plain SQL writing a plant again whole', 4);
          // A plant shared with two of ann's groups: taking one away keeps it through the other.
          await store.groups.addMember('g2', 'ann');
          await store.grants.add(p1, { group: 'g2' });
          await store.grants.remove(p1, { group: 'g1' });
          await check('one of two grants taken away', 3);
          await store.groups.removeMember('g1', 'ben');
          await check('a membership taken away', 2);
          await store.grants.add(p3, { group: 'g1' });
          await store.plants.delete(OPERATOR, p2);
          await check('a plant deleted', 2);
          await store.groups.remove('g2');
          await check('a group removed', 1);
          await store.groups.addMember('g1', 'ben');
          await store.users.remove('ann', { withPlants: false });
          await check('a user removed', 1);
          await store.bulk.importRecords(
            recordBatch([
              { type: 'user', name: 'dan' },
              // Members already there, or given twice, are no new rows: the counts must not grow by them.
              { type: 'group', name: 'g1', members: ['dan', 'ben'] },
              { type: 'group', name: 'g3', members: ['ben', 'dan'] },
              { type: 'group', name: 'g3', members: ['dan'] },
              { type: 'plant', name: 'p4', tag: 'imported', owner: 'cat', sharedWith: ['group:g3', 'group:g1', 'ben'] },
            ]),
          );
          await check('an import into groups old and new', 6);
          // Plain SQL on a connection of its own, as another tool would write: ben's membership moved to another group.
          await store.groups.add('g5');
          await store.grants.add(p3, { group: 'g5' });
          const move = `UPDATE group_members SET group_id = (SELECT id FROM groups WHERE name = 'g5')
          WHERE user_id = (SELECT id FROM users WHERE name = 'ben') AND group_id = (SELECT id FROM groups WHERE name = 'g3')`;
          await plainSql(move);
          await check('plain SQL moving a membership', 6);
          await plainSql(
            `INSERT INTO plant_user_grants (user_id, plant_id) SELECT u.id, p.id FROM users u, plants p WHERE u.name = 'dan' AND p.name = 'p4'`,
          );
          await check('plain SQL sharing a plant', 6);
          // Members leave one by one, and plants stop being shared, until every group is small again.
          for (const user of ['ben', 'cat', 'dan']) await store.groups.removeMember('g1', user).catch(() => {});
          await check('members leaving');
          await store.grants.remove(p3, { group: 'g1' });
          await check('a grant taken away');
        } finally {
          await store.close();
        }
      });
    });
  }
}

for (const backend of BACKENDS) {
  describe(`group sizes after one statement writes many rows of one group [${backend.name}]`, { skip: backend.skip }, () => {
    it('counts each row once, crossing a bound part-way up and down', async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      try {
        const g = `(SELECT id FROM groups WHERE name = 'g')`;
        await runPlainSql(db, 'UPDATE group_access_bounds SET plants = 4, members = 4');
        await store.groups.add('g');
        for (let i = 0; i < 12; i++) {
          await store.users.add(`u${i}`, false);
          await store.plants.create(OPERATOR, { name: `p${i}`, owner: 'u0' });
        }
        const check = async (after: string, plants: number, members: number) => {
          const sizes = await plainQuery<{ plants: string; members: string }>(
            db,
            `SELECT plants, members FROM group_sizes WHERE group_id = ${g}`,
          );
          assert.deepEqual(
            sizes.map((s) => [Number(s.plants), Number(s.members)]),
            [[plants, members]],
            `after ${after}`,
          );
          assert.deepEqual(await plainQuery(db, WRONG_SIZES), [], `after ${after}`);
          const pairs = async (text: string) =>
            (await plainQuery<Record<string, unknown>>(db, text)).map((r) => Object.values(r).join(' ')).sort();
          assert.deepEqual(await pairs(`SELECT user_id, plant_id, group_id FROM ${MEMBER_GRANTS}`), await pairs(PAIRS), `after ${after}`);
        };
        // PostgreSQL runs a statement's row triggers once it has written all its rows: a group crossing a bound
        // part-way was counted from rows whose own triggers had not run yet, and those counted once more.
        await runPlainSql(db, `INSERT INTO group_members (group_id, user_id) SELECT ${g}, id FROM users WHERE name IN ('u0', 'u1')`);
        await runPlainSql(db, `INSERT INTO plant_group_grants (group_id, plant_id) SELECT ${g}, id FROM plants`);
        await check('12 grants in one statement', 12, 2);
        await runPlainSql(db, `DELETE FROM plant_group_grants WHERE group_id = ${g} AND plant_id <> (SELECT min(id) FROM plants)`);
        await check('11 grants taken away in one statement', 1, 2);
        await runPlainSql(db, `INSERT INTO group_members (group_id, user_id) SELECT ${g}, id FROM users WHERE name NOT IN ('u0', 'u1')`);
        await check('10 members in one statement', 1, 12);
        await runPlainSql(db, `DELETE FROM group_members WHERE group_id = ${g} AND user_id <> (SELECT min(id) FROM users)`);
        await check('11 members taken away in one statement', 1, 1);
      } finally {
        await store.close();
      }
    });
  });
}
