import type BetterSqlite3 from 'better-sqlite3';
import { CHANGE_LOG_RETENTION_MS } from '../change-log.js';
import { isBusy } from './sqlite-errors.js';

// Keeping the SQLite change log short. A serving store's writer thread runs the passes between its batches, since
// under a steady flood of writes it holds the write lock nearly all the time; a store that has not written runs
// them on its serving thread (sqlite-seam.ts).

/**
 * Rows one step of a pruning pass deletes at most. A step holds up the thread that runs it (the writer thread's
 * batches, or a serving thread's requests), so it must stay short: a log that grew under a flood of writes holds
 * 10^6 rows a minute, whose delete at once took 170 ms of the thread.
 */
export const PRUNED_PER_STEP = 10_000;

/**
 * One step of a pruning pass (see CHANGE_LOG_RETENTION_MS), in a transaction of its own: deletes up to
 * PRUNED_PER_STEP of the rows that existed at the previous pass, if that was at least the retention ago, and once
 * none of them is left marks where this pass stands. Resolves whether rows of the pass are left (the caller runs
 * the next step soon; a pass cut short is taken up by the next one). `pruned_through` is raised before the first
 * row goes, so that a reader who had not seen the rows learns that it fell behind. Gives up at once when another
 * connection holds the write lock (this one is synchronous: waiting would hold up its thread); a later step or pass
 * tries again.
 */
export function pruneChangeLog(db: BetterSqlite3.Database, now: number, perStep = PRUNED_PER_STEP): boolean {
  const timeout = db.pragma('busy_timeout', { simple: true });
  db.pragma('busy_timeout = 0');
  try {
    return db
      .transaction(() => {
        const mark = db.prepare('SELECT mark_seq AS seq, mark_at AS at FROM change_log_state').get() as { seq: number; at: number };
        if (now - mark.at < CHANGE_LOG_RETENTION_MS) return false;
        db.prepare('UPDATE change_log_state SET pruned_through = max(pruned_through, ?)').run(mark.seq);
        // The first `perStep` positions from the oldest row on: at most that many rows (fewer where seq has gaps).
        db.prepare('DELETE FROM change_log WHERE seq <= min(?, (SELECT min(seq) FROM change_log) + ?)').run(mark.seq, perStep - 1);
        if (db.prepare('SELECT EXISTS (SELECT 1 FROM change_log WHERE seq <= ?)').pluck().get(mark.seq) === 1) return true;
        db.prepare('UPDATE change_log_state SET mark_seq = coalesce((SELECT max(seq) FROM change_log), ?), mark_at = ?').run(mark.seq, now);
        return false;
      })
      .immediate();
  } catch (err) {
    if (!isBusy(err)) throw err;
    return false;
  } finally {
    db.pragma(`busy_timeout = ${String(timeout)}`);
  }
}
