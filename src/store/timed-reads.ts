import type { Viewer } from '../catalogue/access-rule.js';
import { seesEverything } from '../catalogue/access-rule.js';
import type { Awaitable } from '../awaitable.js';
import type { RequestReads, StoreDialect } from './dialect.js';
import type { HotQuery, PageRequest, QueryTimer, TokenCredential, UserCredential, VisiblePage } from './store.js';
import { storeErrorOf } from './writes.js';

const EMPTY_PAGE: VisiblePage = Object.freeze({ json: '[]', ids: [], more: false, next: undefined, groupIds: [], cacheable: true });

/**
 * The request path's reads as the store serves them: timed while metrics are on (failures too), with an error that
 * means the database cannot be reached turned into "unavailable" (503). Synchronous when the backend's read is: no
 * promise on SQLite's request path.
 */
export class TimedReads {
  private timer: QueryTimer | undefined;

  private readonly reads: RequestReads;

  constructor(private readonly dialect: StoreDialect) {
    this.reads = dialect.reads;
  }

  timeQueries(timer: QueryTimer | undefined): void {
    this.timer = timer;
  }

  ping(): Awaitable<void> {
    return this.hot('ping', () => this.reads.ping());
  }

  findToken(hash: Buffer): Awaitable<TokenCredential | undefined> {
    return this.hot('find_token', () => this.reads.findToken(hash));
  }

  findUser(name: string): Awaitable<UserCredential | undefined> {
    return this.hot('find_user', () => this.reads.findUser(name));
  }

  /** The access rule's listing (catalogue/access-rule.ts): admins see every plant, others what the paths give them. */
  listVisiblePlants(viewer: Viewer, page: PageRequest): Awaitable<VisiblePage> {
    if (page.limit === 0) return EMPTY_PAGE;
    if (seesEverything(viewer)) return this.hot('all_plants', () => this.reads.allPlants(page, viewer.userId));
    return this.hot('visible_plants', () => this.reads.visiblePlants(viewer.userId, page, viewer.groups ?? []));
  }

  private hot<R>(name: HotQuery, run: () => Awaitable<R>): Awaitable<R> {
    const timer = this.timer;
    const started = timer === undefined ? 0 : performance.now();
    let result: Awaitable<R>;
    try {
      result = run();
    } catch (err) {
      timer?.(name, (performance.now() - started) / 1000);
      throw storeErrorOf(this.dialect, err);
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
        throw storeErrorOf(this.dialect, err);
      },
    );
  }
}
