import { existsSync, statSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { unavailable } from '../../catalogue/errors.js';
import { MESSAGE_STATEMENTS } from './group-commit-bounds.js';

/** A statement's answer from the writer thread, or its failure (SQLite's code and message). */
export type StatementAnswer = { ok: true; rows: unknown[]; changes: number } | { ok: false; code: string | undefined; message: string };

/** What the writer thread answers to one message: each statement's answer, or the failure that wrote none of them. */
export type BatchAnswer = { answers: StatementAnswer[] } | { failed: Extract<StatementAnswer, { ok: false }> };

/**
 * What the serving thread sends: statements (text and parameters) to commit, a pass of the change log's pruning to
 * run (at the time given, epoch ms), or to close.
 */
export type ThreadRequest =
  | { batch: Array<[sql: string, params: readonly unknown[]]>; prune?: undefined; close?: undefined }
  | { prune: number; batch?: undefined; close?: undefined }
  | { close: true; batch?: undefined; prune?: undefined };

/** What the writer thread sends back after a commit: an answer to each message it took in, in the order sent. */
export type ThreadAnswer = { answers: BatchAnswer[] };

interface Queued {
  sql: string;
  params: readonly unknown[];
  resolve(answer: { rows: unknown[]; changes: number }): void;
  reject(err: Error): void;
}

/** An error as SQLite raised it in the writer thread, with its code, so the store can classify it. */
function sqliteError({ code, message }: { code: string | undefined; message: string }): Error {
  return Object.assign(new Error(message), { code });
}

/**
 * Starts the writer thread from its module built beside this one. Run from the TypeScript sources (the tests), it
 * takes the built module when that is up to date (a thread that loads through tsx takes several times longer to
 * start), and the sources through tsx otherwise.
 */
function startThread(path: string): Worker {
  const options = { workerData: { path } };
  if (!import.meta.url.endsWith('.ts')) return new Worker(new URL('./group-commit-thread.js', import.meta.url), options);
  const built = new URL('../../../dist/store/sqlite/group-commit-thread.js', import.meta.url);
  const sources = [
    './group-commit-thread.ts',
    './group-commit-bounds.ts',
    './sqlite-connection.ts',
    './change-log-pruning.ts',
    './sqlite-errors.ts',
    '../change-log.ts',
  ].map((file) => new URL(file, import.meta.url));
  const modified = (url: URL) => statSync(url, { throwIfNoEntry: false })?.mtimeMs ?? Infinity;
  if (existsSync(built) && sources.every((source) => modified(source) <= modified(built))) return new Worker(built, options);
  const source = JSON.stringify(sources[0]!.href);
  return new Worker(`import('tsx/esm/api').then(({ register }) => { register(); return import(${source}); })`, { ...options, eval: true });
}

/**
 * Group commit for a serving SQLite store: statements are sent to a thread of their own (group-commit-thread.ts) as
 * they come, and the thread writes everything that arrived while it was committing in its next transaction, then
 * answers each once that transaction is durable. One fsync serves every write of a batch, the thread never waits for
 * this event loop between commits, and neither the wait for the write lock nor the fsync runs on the event loop that
 * serves requests. A statement that fails fails alone; a batch that cannot be written (the lock held past the busy
 * timeout, a full disk) fails every statement in it.
 */
export class GroupCommit {
  private readonly thread: Worker;
  /** Statements asked for since the last message. */
  private pending: Queued[] = [];
  /** The messages sent and not answered yet, in the order sent: the thread answers them in that order. */
  private readonly inFlight: Queued[][] = [];
  private closing: Promise<void> | undefined;
  /** Resolves when the thread has exited, for whatever reason. */
  private readonly exited: Promise<void>;
  /** Called when every message sent is answered, while closing. */
  private drained: (() => void) | undefined;

  constructor(
    path: string,
    /** Called once per committed batch, before its statements are answered (the reader takes the commit in). */
    private readonly committed: () => void,
  ) {
    this.thread = startThread(path);
    this.thread.on('message', (answer: ThreadAnswer) => this.answer(answer));
    this.thread.on('error', (err) => this.failAll(unavailable(`the database writer stopped: ${err.message}`)));
    this.exited = new Promise((resolve) => this.thread.once('exit', () => resolve()));
    void this.exited.then(() => this.failAll(unavailable('the database writer stopped')));
    this.thread.unref();
  }

  /** Runs one statement in the next batch; resolves with its rows (or rows changed) once the batch is committed. */
  execute(sql: string, params: readonly unknown[]): Promise<{ rows: unknown[]; changes: number }> {
    if (this.closing) return Promise.reject(unavailable('database unavailable'));
    return new Promise((resolve, reject) => {
      this.pending.push({ sql, params, resolve, reject });
      // Sent once this turn of the event loop has taken in every request that arrived: the statements of the
      // writes of one turn go as one message. Each socket's callback ends with its own ticks and promises, so a
      // tick would send one message (a structured clone and a wake of the thread) a write. The thread puts what
      // arrives during a commit into the next one.
      if (this.pending.length === 1) setImmediate(() => this.send());
      else if (this.pending.length >= MESSAGE_STATEMENTS) this.send();
    });
  }

  private send(): void {
    // Nothing left when the turn's statements went already (MESSAGE_STATEMENTS) or failed (failAll).
    if (this.pending.length === 0) return;
    const statements = this.pending;
    this.pending = [];
    this.inFlight.push(statements);
    // Waiting for a commit keeps the process alive; an idle thread does not.
    if (this.inFlight.length === 1) this.thread.ref();
    this.thread.postMessage({ batch: statements.map((q) => [q.sql, q.params]) } satisfies ThreadRequest);
  }

  /**
   * Runs a pass of the change log's pruning (change-log-pruning.ts) at `now` between the thread's batches: there it
   * never waits for the write lock of this store's own writes, which a step on another connection finds held for
   * nearly every moment of a steady flood of writes.
   */
  prune(now: number): void {
    if (!this.closing) this.thread.postMessage({ prune: now } satisfies ThreadRequest);
  }

  /** Answers what is in flight, then stops the thread and its connection. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.inFlight.length > 0 || this.pending.length > 0) await new Promise<void>((resolve) => (this.drained = resolve));
      // Waiting for the thread to stop keeps the process alive.
      this.thread.ref();
      this.thread.postMessage({ close: true } satisfies ThreadRequest);
      await this.exited;
    })();
    return this.closing;
  }

  private answer({ answers }: ThreadAnswer): void {
    const messages = this.inFlight.splice(0, answers.length);
    if (this.inFlight.length === 0) this.thread.unref();
    if (answers.some((answer) => 'answers' in answer)) this.committed();
    answers.forEach((answer, m) => {
      const statements = messages[m] ?? [];
      if ('failed' in answer) {
        const err = sqliteError(answer.failed);
        for (const queued of statements) queued.reject(err);
        return;
      }
      statements.forEach((queued, i) => {
        const one = answer.answers[i]!;
        if (one.ok) queued.resolve(one);
        else queued.reject(sqliteError(one));
      });
    });
    if (this.inFlight.length === 0) this.drained?.();
  }

  private failAll(err: Error): void {
    for (const statements of [...this.inFlight.splice(0), this.pending.splice(0)]) for (const queued of statements) queued.reject(err);
    this.closing ??= Promise.resolve();
    this.drained?.();
  }
}
