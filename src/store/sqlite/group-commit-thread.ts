import { statSync } from 'node:fs';
import { parentPort, workerData } from 'node:worker_threads';
import { keptStatements, openConnection } from './sqlite-connection.js';
import { pruneChangeLog } from './change-log-pruning.js';
import { TRANSACTION_STATEMENTS } from './group-commit-bounds.js';
import type { BatchAnswer, StatementAnswer, ThreadAnswer, ThreadRequest } from './group-commit.js';

// The writer thread of a serving SQLite store (see group-commit.ts): it runs each batch of statements in one
// transaction on a connection of its own and answers once the commit is on disk, so that neither the wait for the
// write lock nor the commit's fsync ever holds the serving thread's event loop.

/** Prepared statements kept, by text; the least recently made go first. */
const PREPARED = 64;
/**
 * The WAL is checkpointed by this thread, between batches, once it is this large: all of it copied into the file and
 * the log started again from its beginning (RESTART). SQLite's own checkpoints after commits (PASSIVE) copy only
 * what no reader still uses; under steady reads that is never all of it, so the log never starts again and grows.
 */
const WAL_RESTART_BYTES = 16 * 1024 * 1024;
/** Past this size the log file is also cut back at once (TRUNCATE); otherwise to journal_size_limit when the log starts again. */
const WAL_TRUNCATE_BYTES = 48 * 1024 * 1024;
/** How long a checkpoint waits for readers to move to a newer snapshot (they renew theirs within milliseconds). */
const CHECKPOINT_WAIT_MS = 50;

const { path } = workerData as { path: string };
const db = openConnection(path, { mustExist: true });
db.pragma('wal_autocheckpoint = 0');
const statement = keptStatements(db, PREPARED);

/** A Buffer sent by the serving thread arrives as a Uint8Array, which better-sqlite3 does not bind. */
const bindable = (value: unknown): unknown =>
  value instanceof Uint8Array && !Buffer.isBuffer(value) ? Buffer.from(value.buffer, value.byteOffset, value.byteLength) : value;

const failure = (err: unknown) => ({ ok: false as const, code: (err as { code?: string }).code, message: (err as Error).message });

/**
 * Runs one statement. A statement that fails (a constraint, a trigger's refusal) is undone by SQLite alone and
 * leaves the others of the batch as they are.
 */
function run(sql: string, params: readonly unknown[]): StatementAnswer {
  try {
    const st = statement(sql);
    const values = params.map(bindable);
    if (st.reader) return { ok: true, rows: st.all(values), changes: 0 };
    return { ok: true, rows: [], changes: st.run(values).changes };
  } catch (err) {
    return failure(err);
  }
}

function runBatch(batch: Extract<ThreadRequest, { batch: unknown }>['batch']): BatchAnswer {
  try {
    db.exec('BEGIN IMMEDIATE');
  } catch (err) {
    return { failed: failure(err) };
  }
  const answers: StatementAnswer[] = [];
  for (const [sql, params] of batch) {
    const answer = run(sql, params);
    // A full disk or an I/O error rolls the whole transaction back: then nothing of the batch is written.
    if (!answer.ok && !db.inTransaction) return { failed: answer };
    answers.push(answer);
  }
  try {
    db.exec('COMMIT');
  } catch (err) {
    if (db.inTransaction) db.exec('ROLLBACK');
    return { failed: failure(err) };
  }
  return { answers };
}

/** Keeps the WAL bounded (see WAL_RESTART_BYTES); a checkpoint that cannot get through now is tried after a later batch. */
function boundWal(): void {
  const size = statSync(`${path}-wal`, { throwIfNoEntry: false })?.size ?? 0;
  if (size < WAL_RESTART_BYTES) return;
  const timeout = db.pragma('busy_timeout', { simple: true }) as number;
  db.pragma(`busy_timeout = ${CHECKPOINT_WAIT_MS}`);
  try {
    db.pragma(`wal_checkpoint(${size < WAL_TRUNCATE_BYTES ? 'RESTART' : 'TRUNCATE'})`);
  } catch {
    // Busy: another process reads or writes for longer; the next batch tries again.
  } finally {
    db.pragma(`busy_timeout = ${timeout}`);
  }
}

/** Messages that arrived while a transaction ran: the next transaction writes them together. */
let arrived: Array<Extract<ThreadRequest, { batch: unknown }>['batch']> = [];
let closing = false;

/** Writes what arrived, as few transactions as TRANSACTION_STATEMENTS allows, and answers each message in the order sent. */
function commitArrived(): void {
  while (arrived.length > 0) {
    let statements = 0;
    let taken = 0;
    while (taken < arrived.length && (taken === 0 || statements + arrived[taken]!.length <= TRANSACTION_STATEMENTS)) {
      statements += arrived[taken]!.length;
      taken++;
    }
    const messages = arrived.slice(0, taken);
    arrived = arrived.slice(taken);
    const answer = runBatch(messages.flat());
    // Each message gets its own statements' answers back, or the failure that wrote none of them.
    let at = 0;
    const answers: BatchAnswer[] = messages.map((message) => {
      if ('failed' in answer) return answer;
      const own = answer.answers.slice(at, at + message.length);
      at += message.length;
      return { answers: own };
    });
    parentPort!.postMessage({ answers } satisfies ThreadAnswer);
    if ('answers' in answer) boundWal();
  }
  if (closing) {
    db.close();
    parentPort!.close();
  }
}

/** The time of the pruning pass under way (see GroupCommit.prune), if one is. */
let pruning: number | undefined;

/** One step of the pass under way, the next after the batches that arrive meanwhile; one pass at a time. */
function pruneStep(): void {
  if (pruning === undefined || closing || !db.open) return;
  let more = false;
  try {
    more = pruneChangeLog(db, pruning);
  } catch {
    // A pass that cannot run now (a full disk) is taken up by the next one.
  }
  if (more) setImmediate(pruneStep);
  else pruning = undefined;
}

parentPort!.on('message', (request: ThreadRequest) => {
  if (request.prune !== undefined) {
    if (pruning === undefined) setImmediate(pruneStep);
    pruning ??= request.prune;
    return;
  }
  if (request.close) {
    closing = true;
    if (arrived.length === 0) commitArrived();
    return;
  }
  // Every message already queued is delivered before the immediate runs: they share one transaction.
  if (arrived.length === 0) setImmediate(commitArrived);
  arrived.push(request.batch);
});
