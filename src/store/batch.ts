/**
 * The calls made during one turn of the event loop, run as one: `run` is given every item (at most `max`) and
 * answers each its own result, in order. Concurrent writes of a serving process become one statement and one round
 * trip instead of one each. When `run` fails as a whole and the batch held more than one item, each item is run
 * alone, so that one item's failure (an owner deleted meanwhile) is its own; unless `eachAloneOnFailure` is false,
 * for calls whose failure can only be the database's (a read), where that would only repeat it.
 */
export class Batch<I, R> {
  private pending: Array<{ item: I; resolve(result: R): void; reject(err: unknown): void }> = [];
  private scheduled = false;

  constructor(
    private readonly run: (items: readonly I[]) => Promise<readonly R[]>,
    private readonly max = 256,
    private readonly options: { eachAloneOnFailure: boolean } = { eachAloneOnFailure: true },
  ) {}

  add(item: I): Promise<R> {
    return new Promise((resolve, reject) => {
      this.pending.push({ item, resolve, reject });
      if (!this.scheduled) {
        this.scheduled = true;
        setImmediate(() => this.flush());
      }
    });
  }

  private flush(): void {
    this.scheduled = false;
    while (this.pending.length > 0) {
      const batch = this.pending.splice(0, this.max);
      void this.settle(batch);
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
