import type { SeamHealth, DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { QueryTimer } from './records.js';

/** Health checks and observability (metrics); the metrics cost nothing while unused. */
export interface Health extends SeamHealth {
  readonly backend: DatabaseSeam['backend'];
  /** Resolves when the database answers a trivial query; rejects otherwise. */
  ping(): Promise<void>;
  /** Reports every hot-path query's duration to `timer` from now on; undefined stops it. */
  timeQueries(timer: QueryTimer | undefined): void;
}

export function storeHealth(d: DatabaseSeam, hot: HotQueries): Health {
  return {
    backend: d.backend,
    ping: async () => hot.run('ping', () => d.reads.ping()),
    ...(d.health.followFile ? { followFile: d.health.followFile } : {}),
    timeQueries: (timer) => hot.timeWith(timer),
    poolStats: () => d.health.poolStats(),
  };
}
