import { EventEmitter } from 'node:events';
import type { IncomingHttpHeaders } from 'node:http';
import { Pool } from 'undici';
import { checkedLookup, urlRefusal } from './endpoint-address.js';

/** What a receiver answered. */
export interface ReceiverAnswer {
  status: number;
  headers: IncomingHttpHeaders;
}

/** Where one endpoint URL's deliveries go: parsed and judged once, not once per delivery. */
interface Target {
  refused: string | undefined;
  pool: Pool;
  path: string;
}

/** Targets kept at most: endpoints are few, and a URL never changes under its endpoint. */
const MAX_TARGETS = 1_000;

/** The most of a receiver's answer body read to keep its connection (undici's default). */
const DUMPED_BYTES = 256 * 1024;

/** undici's timeouts, which the dispatcher's log and `webhooks deliveries` name as the receiver's silence. */
const TIMEOUT_CODES = new Set(['UND_ERR_CONNECT_TIMEOUT', 'UND_ERR_HEADERS_TIMEOUT', 'UND_ERR_BODY_TIMEOUT']);

/**
 * An attempt under way: when its deadline is, and how to end it then. Before the answer's status the request is
 * aborted through `cancel` (an EventEmitter, which undici takes as a request's signal); after it, its body is cut off.
 */
interface Attempt {
  deadline: number;
  cancel: EventEmitter;
  body: { destroy(err: Error): unknown } | undefined;
  expired: boolean;
}

/**
 * Posts webhook bodies over kept-alive connections, an undici pool per receiving origin, so that a busy endpoint is
 * not paid a new connection (and TLS handshake) per delivery, nor node:http's request objects. Redirects are not
 * followed (a pool never does). Only addresses `addressRefusal` allows are connected to, judged after DNS resolution
 * on every new connection.
 */
export class WebhookSender {
  private readonly pools = new Map<string, Pool>();
  private readonly targets = new Map<string, Target>();
  private readonly lookup: ReturnType<typeof checkedLookup>;
  /**
   * Attempts under way, in the order they started, which is the order of their deadlines (every attempt has the same
   * timeout): one timer, set for the earliest, ends them. An AbortSignal.timeout per attempt cost more CPU than the
   * rest of a delivery's HTTP work (docs/performance.md).
   */
  private readonly attempts = new Set<Attempt>();
  private deadlineTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly allowPrivate: boolean,
    /** How long an attempt may take, from connecting to the end of the answer (see `post`). */
    private readonly timeoutMs: number,
  ) {
    this.lookup = checkedLookup(allowPrivate);
  }

  /**
   * Posts `body`; fails with ETIMEDOUT if the receiver has not answered with a status within the timeout. The
   * attempt has one deadline, from connecting to the end of the answer's body: the status decides the outcome, and a
   * body still arriving at the deadline is cut off (its connection closed) without changing it, so a receiver that
   * trickles its body after a 2xx neither holds the attempt past its lease nor gets the event again.
   */
  async post(url: string, headers: Record<string, string>, body: string): Promise<ReceiverAnswer> {
    const target = this.targetOf(url);
    // A literal address is connected to without a lookup: judged here.
    if (target.refused !== undefined) throw Object.assign(new Error(`refused: ${target.refused}`), { code: 'EWEBHOOKADDRESS' });
    const attempt: Attempt = { deadline: performance.now() + this.timeoutMs, cancel: new EventEmitter(), body: undefined, expired: false };
    this.attempts.add(attempt);
    this.deadlineTimer ??= this.endAt(attempt.deadline);
    try {
      let res: Awaited<ReturnType<Pool['request']>>;
      try {
        res = await target.pool.request({ path: target.path, method: 'POST', headers, body, signal: attempt.cancel });
      } catch (err) {
        throw this.named(err as NodeJS.ErrnoException, attempt);
      }
      // Read to the end, so that the connection can carry the next delivery; past the deadline or a body of more
      // than DUMPED_BYTES, it is dropped instead.
      attempt.body = res.body;
      await res.body.dump({ limit: DUMPED_BYTES }).catch(() => {});
      return { status: res.statusCode, headers: res.headers };
    } finally {
      this.attempts.delete(attempt);
    }
  }

  /** Ends every attempt whose deadline has passed, at `at` (performance.now()), then waits for the next one's. */
  private endAt(at: number): NodeJS.Timeout {
    const timer = setTimeout(
      () => {
        this.deadlineTimer = undefined;
        const now = performance.now();
        for (const attempt of this.attempts) {
          if (attempt.deadline > now) {
            this.deadlineTimer = this.endAt(attempt.deadline);
            return;
          }
          this.attempts.delete(attempt);
          attempt.expired = true;
          if (attempt.body === undefined) attempt.cancel.emit('abort');
          else attempt.body.destroy(Object.assign(new Error(`no answer within ${this.timeoutMs} ms`), { code: 'ETIMEDOUT' }));
        }
      },
      Math.max(0, Math.ceil(at - performance.now())),
    );
    timer.unref();
    return timer;
  }

  /** Cuts off every request in flight and closes every kept-alive connection (the process is stopping). */
  abortAll(): void {
    clearTimeout(this.deadlineTimer);
    this.deadlineTimer = undefined;
    const cut = Object.assign(new Error('cut off: the process is stopping'), { code: 'ECANCELED' });
    for (const pool of this.pools.values()) pool.destroy(cut).catch(() => {});
    this.pools.clear();
    this.targets.clear();
  }

  private targetOf(url: string): Target {
    let target = this.targets.get(url);
    if (target === undefined) {
      const parsed = new URL(url);
      target = {
        refused: urlRefusal(parsed, this.allowPrivate),
        pool: this.poolFor(parsed.origin),
        path: `${parsed.pathname}${parsed.search}`,
      };
      if (this.targets.size >= MAX_TARGETS) this.targets.clear();
      this.targets.set(url, target);
    }
    return target;
  }

  private poolFor(origin: string): Pool {
    let pool = this.pools.get(origin);
    if (pool === undefined) {
      pool = new Pool(origin, {
        connect: { lookup: this.lookup, timeout: this.timeoutMs },
        headersTimeout: this.timeoutMs,
        bodyTimeout: this.timeoutMs,
      });
      this.pools.set(origin, pool);
    }
    return pool;
  }

  /** undici's errors as an operator reads them: a timeout is ETIMEDOUT; a connection's failure, its own code. */
  private named(err: NodeJS.ErrnoException, attempt: Attempt): Error {
    if (attempt.expired || (err.code !== undefined && TIMEOUT_CODES.has(err.code))) {
      return Object.assign(new Error(`no answer within ${this.timeoutMs} ms`), { code: 'ETIMEDOUT' });
    }
    const cause = (err as { cause?: NodeJS.ErrnoException }).cause;
    if (err.code === 'UND_ERR_SOCKET' && cause?.code !== undefined) return cause;
    return err;
  }
}
