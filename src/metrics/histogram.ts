import type { Metric, Registry } from 'prom-client';

/** One label set's buckets: an observation is a short bucket search and three additions, nothing allocated. */
export class Buckets {
  readonly counts: Float64Array;
  sum = 0;
  count = 0;

  constructor(private readonly bounds: readonly number[]) {
    this.counts = new Float64Array(bounds.length);
  }

  observe(value: number): void {
    const { bounds } = this;
    let i = 0;
    while (i < bounds.length && value > bounds[i]!) i++;
    if (i < bounds.length) this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

/**
 * A labelled histogram for the hot path. prom-client's own Histogram rebuilds and validates a label-hash
 * string on every observation (microseconds each); this one keeps per-label-set arrays and gives prom-client
 * the same exposition (`_bucket` with `le`, `_sum`, `_count`) only when scraped. It is a regular registry
 * member, so the cluster aggregation sums it like any other histogram.
 */
export class HotHistogram<L extends string> {
  readonly type = 'histogram';
  readonly aggregator = 'sum';
  private readonly series = new Map<string, { labels: Record<L, string>; buckets: Buckets }>();

  constructor(
    readonly name: string,
    readonly help: string,
    private readonly bounds: readonly number[],
    registry: Registry,
  ) {
    registry.registerMetric(this as unknown as Metric);
  }

  /** The series of one label set, made once; keep it and call `observe` on it. */
  labels(labels: Record<L, string>): Buckets {
    const key = JSON.stringify(labels);
    let found = this.series.get(key);
    if (!found) this.series.set(key, (found = { labels: { ...labels }, buckets: new Buckets(this.bounds) }));
    return found.buckets;
  }

  async get(): Promise<{
    name: string;
    help: string;
    type: string;
    aggregator: string;
    values: Array<{ metricName: string; labels: Record<string, string | number>; value: number }>;
  }> {
    const values: Array<{ metricName: string; labels: Record<string, string | number>; value: number }> = [];
    for (const { labels, buckets } of this.series.values()) {
      let cumulative = 0;
      this.bounds.forEach((bound, i) => {
        cumulative += buckets.counts[i]!;
        values.push({ metricName: `${this.name}_bucket`, labels: { le: bound, ...labels }, value: cumulative });
      });
      values.push({ metricName: `${this.name}_bucket`, labels: { le: '+Inf', ...labels }, value: buckets.count });
      values.push({ metricName: `${this.name}_sum`, labels, value: buckets.sum });
      values.push({ metricName: `${this.name}_count`, labels, value: buckets.count });
    }
    return { name: this.name, help: this.help, type: this.type, aggregator: this.aggregator, values };
  }

  reset(): void {
    this.series.clear();
  }
}
