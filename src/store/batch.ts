/**
 * The calls made during one turn of the event loop (or, see below, while a run is in flight), run as one: `run` is
 * given every item (at most `max`) and answers each its own result, in order. Concurrent writes of a serving process
 * become one statement and one round trip instead of one each. When `run` fails as a whole and the batch held more
 * than one item, each item is run alone, so that one item's failure (an owner deleted meanwhile) is its own; unless
 * `eachAloneOnFailure` is false, for calls whose failure can only be the database's (a read), where that would only
 * repeat it.
 *
 * With `inFlight`, at most that many runs go at once, and the calls made meanwhile wait to be run together when one
 * ends: under load a run then gathers what arrived during the last, so there are fewer, larger runs. A run that
 * has not ended after `patienceMs` holds nothing back any more, so that one stuck round trip (a connection the
 * network dropped silently, a row lock held) delays the others by that long, not until it ends.
 *
 * By default one run at a time (ONE_RUN_AT_A_TIME): on a few cores fewer, larger statements cost the service and the
 * database less a row than more of them side by side, each waking a backend; a statement of a few hundred rows takes
 * a few ms.
 */
export class Batch<I, R> {
  private pending: Array<{ item: I; resolve(result: R): void; reject(err: unknown): void }> = [];
  private scheduled = false;
  /** Runs in flight that still hold the next back (see inFlight). */
  private holding = 0;

  constructor(
    private readonly run: (items: readonly I[]) => Promise<readonly R[]>,
    private readonly max = 256,
    private readonly options: BatchOptions = { eachAloneOnFailure: true, ...ONE_RUN_AT_A_TIME },
  ) {}

  add(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      this.schedule();
    });
  }

  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => this.flush());
  }

  private flush(): void {
    this.scheduled = false;
    const { inFlight = Infinity, patienceMs } = this.options;
    while (this.pending.length > 0 && this.holding < inFlight) {
      const batch = this.pending.splice(0, this.max);
      this.holding++;
      let holds = true;
      const release = () => {
        if (!holds) return;
        holds = false;
        this.holding--;
        if (this.pending.length > 0) this.schedule();
      };
      const patience = inFlight === Infinity || patienceMs === undefined ? undefined : setTimeout(release, patienceMs);
      patience?.unref();
      void this.settle(batch).finally(() => {
        clearTimeout(patience);
        release();
      });
    }
  }

  private async settle(batch: Batch<I, R>['pending']): Promise<void> {
    try {
      const results = await this.run(batch.map((b) => b.item));
      batch.forEach((b, i) => b.resolve(results[i]!));
    } catch (err) {
      if (batch.length > 1 && this.options.eachAloneOnFailure) for (const b of batch) void this.settle([b]);
      else for (const b of batch) b.reject(err);
    }
  }
}

export interface BatchOptions {
  eachAloneOnFailure: boolean;
  /** The most runs at once (see Batch); every call is run at its turn's end when unset. */
  inFlight?: number;
  /** How long a run in flight holds the next back at most, in ms (see Batch). */
  patienceMs?: number;
}

/** One run at a time, held back by the one in flight for at most 20 ms (see Batch). */
export const ONE_RUN_AT_A_TIME = { inFlight: 1, patienceMs: 20 } as const;
