import { existsSync, statSync } from 'node:fs';
import { Worker } from 'node:worker_threads';
import { unavailable } from '../../catalogue/errors.js';

/** A statement's answer from the writer thread, or its failure (SQLite's code and message). */
export type StatementAnswer = { ok: true; rows: unknown[]; changes: number } | { ok: false; code: string | undefined; message: string };

/** What the writer thread answers to a batch: each statement's answer, or the failure that wrote none of them. */
export type BatchAnswer = { answers: StatementAnswer[] } | { failed: Extract<StatementAnswer, { ok: false }> };

/** What the serving thread asks: a batch of statements (text and parameters), or to close. */
export type ThreadRequest = { batch: Array<[sql: string, params: readonly unknown[]]>; close?: undefined } | { close: true };

/** The most statements one transaction takes: the rest wait for the next, so a commit never waits on a huge batch. */
const MAX_BATCH = 512;

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
  const sources = ['./group-commit-thread.ts', './sqlite-connection.ts'].map((file) => new URL(file, import.meta.url));
  const modified = (url: URL) => statSync(url, { throwIfNoEntry: false })?.mtimeMs ?? Infinity;
  if (existsSync(built) && sources.every((source) => modified(source) <= modified(built))) return new Worker(built, options);
  const source = JSON.stringify(sources[0]!.href);
  return new Worker(`import('tsx/esm/api').then(({ register }) => { register(); return import(${source}); })`, { ...options, eval: true });
}

/**
 * Group commit for a serving SQLite store: the statements that writes of this process send while a commit is under
 * way are written together, in one transaction, by a thread of their own (group-commit-thread.ts), and each is
 * answered once that transaction is durable. One fsync serves every write of a batch, and neither the wait for
 * the write lock nor the fsync runs on the event loop that serves requests. A statement that fails fails alone;
 * a batch that cannot be written (the lock held past the busy timeout, a full disk) fails every statement in it.
 */
export class GroupCommit {
  private readonly thread: Worker;
  private queue: Queued[] = [];
  private inFlight: Queued[] | undefined;
  private closing: Promise<void> | undefined;
  /** Resolves when the thread has exited, for whatever reason. */
  private readonly exited: Promise<void>;
  /** Called when the queue and the batch in flight are answered, while closing. */
  private drained: (() => void) | undefined;

  constructor(
    path: string,
    /** Called once per committed batch, before its statements are answered (the reader takes the commit in). */
    private readonly committed: () => void,
  ) {
    this.thread = startThread(path);
    this.thread.on('message', (answer: BatchAnswer) => this.answer(answer));
    this.thread.on('error', (err) => this.failAll(unavailable(`the database writer stopped: ${err.message}`)));
    this.exited = new Promise((resolve) => this.thread.once('exit', () => resolve()));
    void this.exited.then(() => this.failAll(unavailable('the database writer stopped')));
    this.thread.unref();
  }

  /** Runs one statement in the next batch; resolves with its rows (or rows changed) once the batch is committed. */
  execute(sql: string, params: readonly unknown[]): Promise<{ rows: unknown[]; changes: number }> {
    if (this.closing) return Promise.reject(unavailable('database unavailable'));
    return new Promise((resolve, reject) => {
      this.queue.push({ sql, params, resolve, reject });
      // Sent at once when no batch is under way (the store's writes of one poll of the event loop come as one
      // statement already: see batch.ts); otherwise they join the batch after the one under way.
      this.send();
    });
  }

  /** Answers what is queued and in flight, then stops the thread and its connection. */
  close(): Promise<void> {
    this.closing ??= (async () => {
      if (this.inFlight !== undefined || this.queue.length > 0) await new Promise<void>((resolve) => (this.drained = resolve));
      // Waiting for the thread to stop keeps the process alive.
      this.thread.ref();
      this.thread.postMessage({ close: true } satisfies ThreadRequest);
      await this.exited;
    })();
    return this.closing;
  }

  private send(): void {
    if (this.inFlight !== undefined || this.queue.length === 0) return;
    const batch = this.queue.length <= MAX_BATCH ? this.queue : this.queue.slice(0, MAX_BATCH);
    this.queue = this.queue.length <= MAX_BATCH ? [] : this.queue.slice(MAX_BATCH);
    this.inFlight = batch;
    // Waiting for a commit keeps the process alive; an idle thread does not.
    this.thread.ref();
    this.thread.postMessage({ batch: batch.map((q) => [q.sql, q.params]) } satisfies ThreadRequest);
  }

  private answer(answer: BatchAnswer): void {
    const batch = this.inFlight ?? [];
    this.inFlight = undefined;
    this.thread.unref();
    if ('failed' in answer) {
      const err = sqliteError(answer.failed);
      for (const queued of batch) queued.reject(err);
    } else {
      this.committed();
      batch.forEach((queued, i) => {
        const one = answer.answers[i]!;
        if (one.ok) queued.resolve(one);
        else queued.reject(sqliteError(one));
      });
    }
    this.send();
    if (this.inFlight === undefined) this.drained?.();
  }

  private failAll(err: Error): void {
    for (const queued of [...(this.inFlight ?? []), ...this.queue]) queued.reject(err);
    this.inFlight = undefined;
    this.queue = [];
    this.closing ??= Promise.resolve();
    this.drained?.();
  }
}
