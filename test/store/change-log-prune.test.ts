import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { CHANGE_LOG_RETENTION_MS } from '../../src/store/change-log.js';
import { openDatabase } from '../../src/store/sqlite/sqlite-file.js';
import { pruneChangeLog } from '../../src/store/sqlite/change-log-pruning.js';
import { GroupCommit } from '../../src/store/sqlite/group-commit.js';

// The SQLite change log's pruning runs in steps of a bounded size: a log grown large under a flood of writes is
// deleted a step at a time, each its own transaction, and readers learn they fell behind before any row they had
// not seen is gone. A store that writes runs the steps on its writer thread, between its batches.

const dir = mkdtempSync(join(tmpdir(), 'plantstore-prune-'));
after(() => rmSync(dir, { recursive: true, force: true }));

async function logOf(rows: number, name: string): Promise<BetterSqlite3.Database> {
  const path = join(dir, `${name}.db`);
  // Migrated as a serving process would find it.
  const { sqlite, db } = await openDatabase(path, false);
  await db.destroy();
  if (sqlite.open) sqlite.close();
  const file = new BetterSqlite3(path);
  const insert = file.prepare("INSERT INTO change_log (table_name, plant_id, user_id, is_public) VALUES ('plants', ?, 1, 0)");
  file.transaction(() => {
    // Only this test's rows: migrations may have logged some of their own.
    file.exec('DELETE FROM change_log');
    for (let i = 0; i < rows; i++) insert.run(i);
  })();
  return file;
}

const state = (db: BetterSqlite3.Database) =>
  db.prepare('SELECT pruned_through, mark_seq, mark_at FROM change_log_state').get() as {
    pruned_through: number;
    mark_seq: number;
    mark_at: number;
  };
const count = (db: BetterSqlite3.Database, where = 'true') =>
  db.prepare(`SELECT count(*) FROM change_log WHERE ${where}`).pluck().get() as number;

describe('SQLite change log pruning', () => {
  it('deletes what the previous pass marked a step at a time, raising pruned_through first, and marks anew at the end', async () => {
    const db = await logOf(2_500, 'steps');
    const seqs = db.prepare('SELECT seq FROM change_log ORDER BY seq').pluck().all() as number[];
    const mark = seqs[1_999]!;
    db.prepare('UPDATE change_log_state SET mark_seq = ?, mark_at = 0').run(mark);
    const now = Date.now();

    assert.equal(pruneChangeLog(db, now, 300), true, 'rows of the pass are left after one step');
    assert.equal(state(db).pruned_through, mark, 'readers are told before the rows go');
    assert.equal(count(db, `seq <= ${mark}`), 2_000 - 300, 'one step deletes at most its share');
    assert.equal(state(db).mark_seq, mark, 'the mark stays until the pass is done');

    let steps = 1;
    while (pruneChangeLog(db, now, 300)) steps++;
    assert.equal(steps + 1, Math.ceil(2_000 / 300), 'every step but the last deletes a whole share');
    assert.equal(count(db, `seq <= ${mark}`), 0);
    assert.equal(count(db), 500, 'rows after the mark stay');
    assert.deepEqual(state(db), { pruned_through: mark, mark_seq: seqs.at(-1)!, mark_at: now });

    assert.equal(pruneChangeLog(db, now + CHANGE_LOG_RETENTION_MS - 1, 300), false);
    assert.equal(count(db), 500, 'nothing goes within the retention of the last pass');
    db.close();
  });

  it('gives up at once while another connection writes, and deletes nothing', async () => {
    const db = await logOf(100, 'busy');
    db.prepare('UPDATE change_log_state SET mark_seq = (SELECT max(seq) FROM change_log), mark_at = 0').run();
    const other = new BetterSqlite3(db.name);
    other.exec('BEGIN IMMEDIATE');
    try {
      const started = performance.now();
      assert.equal(pruneChangeLog(db, Date.now(), 10), false);
      assert.ok(performance.now() - started < 1_000, 'the serving thread does not wait for the write lock');
      assert.equal(count(db), 100);
      assert.equal(state(db).pruned_through, 0);
    } finally {
      other.exec('ROLLBACK');
      other.close();
    }
    while (pruneChangeLog(db, Date.now(), 10));
    assert.equal(count(db), 0, 'a later pass takes it up');
    db.close();
  });

  it("runs a pass on the store's writer thread between its batches while writes never pause", async () => {
    // More than two steps' rows, so that the pass goes on between batches.
    const db = await logOf(25_000, 'flood');
    db.exec('CREATE TABLE scratch (n integer)');
    db.prepare('UPDATE change_log_state SET mark_seq = (SELECT max(seq) FROM change_log), mark_at = 0').run();
    const commits = new GroupCommit(db.name, () => {});
    let writing = true;
    let written = 0;
    let writtenBeforeDone = 0;
    // Eight writers always waiting for a commit: the writer thread holds the write lock for nearly every moment.
    const writers = Array.from({ length: 8 }, async () => {
      while (writing) await commits.execute('INSERT INTO scratch VALUES (?)', [written++]);
    });
    try {
      while (written < 200) await new Promise((resolve) => setTimeout(resolve, 5));
      const writtenBefore = written;
      commits.prune(Date.now());
      const deadline = Date.now() + 20_000;
      while (count(db) > 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 10));
      writtenBeforeDone = written - writtenBefore;
    } finally {
      writing = false;
      await Promise.all(writers);
      await commits.close();
    }
    assert.equal(count(db), 0, 'the pass deleted every row it marked');
    assert.ok(writtenBeforeDone > 0, 'batches were committed while the pass ran');
    assert.equal(state(db).pruned_through, state(db).mark_seq);
    db.close();
  });
});
