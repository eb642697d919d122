import { confinedTo, scope, scopesOf } from '../catalogue/change-scopes.js';
import type { ChangeBatch, ChangeFeed } from '../store/change-log.js';
import { ScopedCache, type ScopedCacheOptions } from './scoped-cache.js';

/**
 * The caches of answers (token checks, JWT users, pages), kept right by the change feed: each batch of changes
 * is turned into the scopes it can affect (change-scopes.ts), once, and every cache drops the entries in them.
 */
export class AnswerCaches {
  private readonly caches: Array<ScopedCache<unknown>> = [];

  constructor(
    private readonly feed: ChangeFeed,
    /** PLANTSTORE_CACHE: off, every lookup is a miss and every answer is read from the database. */
    private readonly enabled: boolean,
  ) {
    feed.subscribe((batch, position) => this.apply(batch, position));
  }

  /** A cache that follows the feed; a batch that may have changed anything empties it. */
  create<V>(options: ScopedCacheOptions<V>): ScopedCache<V> {
    const cache = new ScopedCache<V>({ ...options, emptiedBy: [scope.everything, ...(options.emptiedBy ?? [])] });
    this.caches.push(cache as ScopedCache<unknown>);
    return cache;
  }

  /**
   * Once per request, before a cached answer is used: brings the feed up to date and says whether cached
   * answers may be used now (not while changes cannot be followed, nor with caching off).
   */
  usable(): boolean {
    return this.feed.sync() && this.enabled;
  }

  /** Where the feed stands: pass it to `set` for a value read from now on. */
  get position(): number {
    return this.feed.position;
  }

  private apply(batch: ChangeBatch, position: number): void {
    const drops = new Map<string, 'all' | number[]>();
    if (batch === 'everything') drops.set(scope.everything, 'all');
    else
      for (const change of batch) {
        const at = confinedTo(change);
        for (const name of scopesOf(change)) {
          const positions = drops.get(name);
          if (at === undefined) drops.set(name, 'all');
          else if (positions === undefined) drops.set(name, [at]);
          else if (positions !== 'all') positions.push(at);
        }
      }
    for (const cache of this.caches) cache.drop(drops, position);
  }
}
