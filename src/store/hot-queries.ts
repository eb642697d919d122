import type { Awaitable } from '../awaitable.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQuery, QueryTimer } from './records.js';
import { storeErrorOf } from './writes.js';

/**
 * The request path's reads as the store runs them: timed while metrics are on (failures too), with an error that
 * means the database cannot be reached turned into "unavailable" (503). Synchronous when the backend's read is: no
 * promise on SQLite's request path. Shared by the roles that serve requests (credentials, listing, health).
 */
export class HotQueries {
  private timer: QueryTimer | undefined;

  constructor(private readonly seam: DatabaseSeam) {}

  /** Reports every hot query's duration to `timer` from now on; undefined stops it. */
  timeWith(timer: QueryTimer | undefined): void {
    this.timer = timer;
  }

  run<R>(name: HotQuery, read: () => Awaitable<R>): Awaitable<R> {
    const timer = this.timer;
    const started = timer === undefined ? 0 : performance.now();
    let result: Awaitable<R>;
    try {
      result = read();
    } catch (err) {
      timer?.(name, (performance.now() - started) / 1000);
      throw storeErrorOf(this.seam, err);
    }
    if (!(result instanceof Promise)) {
      timer?.(name, (performance.now() - started) / 1000);
      return result;
    }
    return result.then(
      (value) => {
        timer?.(name, (performance.now() - started) / 1000);
        return value;
      },
      (err: unknown) => {
        timer?.(name, (performance.now() - started) / 1000);
        throw storeErrorOf(this.seam, err);
      },
    );
  }
}
