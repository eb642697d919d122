import { ApiError } from './error-codes.js';

/** Rows a full listing reads first; each chunk its client takes at once doubles the next, up to MAX_CHUNK. */
export const FIRST_CHUNK = 20;
export const MAX_CHUNK = 1000;
/** A chunk asked for within this long of the previous one means the client keeps up. */
const KEEPING_UP_MS = 20;
/** What a refused listing is told to wait, in seconds. */
const RETRY_AFTER_SECONDS = 1;

export interface ListingLimits {
  /** Full listings running at once in this process. */
  perProcess: number;
  /** Full listings running at once for one user (all their tokens together). */
  perUser: number;
  /**
   * The slowest client a full listing serves: it must take at least this many bytes a second, averaged over
   * `rateWindowSeconds`, or its connection is closed. A client stalled on purpose would otherwise hold a slot,
   * and the memory of a chunk, for as long as it likes.
   */
  minBytesPerSecond: number;
  rateWindowSeconds: number;
}

/** One full listing in progress, as the streams see it. */
export interface StreamHandle {
  /** Waits for this listing's turn to read its next chunk, and says how many rows to read. */
  next(): Promise<number>;
  /** Counts bytes handed to the client. */
  sent(bytes: number): void;
  /** Frees the listing's slot (when the response ends, however it ends). */
  release(): void;
}

interface Running {
  user: number;
  bytes: number;
  since: number;
  cutOff: () => void;
}

/**
 * The full listings of a process (responses streamed chunk by chunk). They are bounded three ways, so that
 * neither many listings nor slow readers can take the process from everyone else:
 * - At most `perProcess` at once, and `perUser` for one user: past them a listing is refused at once (503 or
 *   429, with Retry-After) rather than queued without end.
 * - One chunk per event-loop turn across all of them: between two chunks the process answers whatever else
 *   arrived. SQLite reads are synchronous, and a listing whose client reads fast would otherwise run chunk after
 *   chunk without ever yielding.
 * - A listing reads its next chunk only when its client has taken the previous one (back-pressure), starts with
 *   small chunks and grows them only while the client keeps up, and is cut off when its client takes less than
 *   `minBytesPerSecond`: memory stays flat however many slow readers connect.
 */
export class ListingStreams {
  private readonly running = new Set<Running>();
  private readonly byUser = new Map<number, number>();
  private readonly waiting: Array<() => void> = [];
  private turnScheduled = false;
  private readonly sweeper: NodeJS.Timeout;

  constructor(private readonly limits: ListingLimits) {
    this.sweeper = setInterval(() => this.cutOffSlowReaders(), Math.min(5_000, (limits.rateWindowSeconds * 1000) / 3));
    this.sweeper.unref();
  }

  /** The 503 or 429 that would refuse a listing of `user` now, if any. */
  refusal(user: number): ApiError | undefined {
    if (this.running.size >= this.limits.perProcess) {
      return new ApiError('busy', 'Too many full listings are being served right now; retry shortly, or ask for a page with limit', {
        'retry-after': String(RETRY_AFTER_SECONDS),
      });
    }
    if ((this.byUser.get(user) ?? 0) >= this.limits.perUser) {
      return new ApiError(
        'too_many_listings',
        `At most ${this.limits.perUser} full listing${this.limits.perUser === 1 ? '' : 's'} at once per user; retry when one has ended`,
        {
          'retry-after': String(RETRY_AFTER_SECONDS),
        },
      );
    }
    return undefined;
  }

  /** Takes a slot for a listing of `user`, or throws the 503/429 that refuses it. `cutOff` closes its connection. */
  admit(user: number, cutOff: () => void): StreamHandle {
    const refusal = this.refusal(user);
    if (refusal !== undefined) throw refusal;
    const ofUser = this.byUser.get(user) ?? 0;
    const entry: Running = { user, bytes: 0, since: performance.now(), cutOff };
    this.running.add(entry);
    this.byUser.set(user, ofUser + 1);
    let chunk = FIRST_CHUNK;
    let askedAt = -Infinity;
    let released = false;
    return {
      next: async () => {
        // The client took the last chunk at once: it can take a larger one.
        const now = performance.now();
        if (now - askedAt < KEEPING_UP_MS) chunk = Math.min(2 * chunk, MAX_CHUNK);
        await this.turn();
        askedAt = performance.now();
        return chunk;
      },
      sent: (bytes) => {
        entry.bytes += bytes;
      },
      release: () => {
        if (released) return;
        released = true;
        this.running.delete(entry);
        const left = (this.byUser.get(user) ?? 1) - 1;
        if (left === 0) this.byUser.delete(user);
        else this.byUser.set(user, left);
      },
    };
  }

  close(): void {
    clearInterval(this.sweeper);
  }

  /** Resolves in a later event-loop turn, one waiter per turn. */
  private turn(): Promise<void> {
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      this.scheduleTurn();
    });
  }

  private scheduleTurn(): void {
    if (this.turnScheduled || this.waiting.length === 0) return;
    this.turnScheduled = true;
    setImmediate(() => {
      this.turnScheduled = false;
      this.waiting.shift()?.();
      this.scheduleTurn();
    });
  }

  private cutOffSlowReaders(): void {
    const now = performance.now();
    for (const entry of this.running) {
      const elapsed = now - entry.since;
      if (elapsed < this.limits.rateWindowSeconds * 1000) continue;
      if ((entry.bytes * 1000) / elapsed < this.limits.minBytesPerSecond) entry.cutOff();
      else {
        entry.bytes = 0;
        entry.since = now;
      }
    }
  }
}
