import type { Store } from '../store/store.js';

/** Counts lookups (for metrics): a hit is a value found, a miss one the caller must read from the store. */
export interface CacheCounter {
  hit(): void;
  miss(): void;
}

/**
 * An in-memory cache that is correct across processes: it is emptied whenever the store's data version
 * changes (SQLite: another connection committed; PostgreSQL: a change notification arrived), and it holds
 * nothing while the store cannot tell (a lost notification connection). Bounded by entries and, with a
 * `weigh` function, by total weight (e.g. bytes): the oldest entries go first.
 */
export class VersionedCache<V> {
  private readonly entries = new Map<string, V>();
  private version: number | undefined;
  private weight = 0;

  constructor(
    private readonly store: Store,
    private readonly maxEntries: number,
    private readonly enabled = true,
    private readonly counter?: CacheCounter,
    private readonly budget?: { weigh: (value: V) => number; max: number },
  ) {}

  /** The current data version (after emptying the cache if it moved); pass it back to `set`. */
  begin(): number | undefined {
    if (!this.enabled) return undefined;
    const version = this.store.dataVersion();
    if (version !== this.version) {
      this.entries.clear();
      this.weight = 0;
      this.version = version;
    }
    return version;
  }

  get(key: string): V | undefined {
    const value = this.entries.get(key);
    if (this.counter) {
      if (value === undefined) this.counter.miss();
      else this.counter.hit();
    }
    return value;
  }

  /** Stores a value read at `readVersion`, unless the data changed since (then the value may be stale). */
  set(key: string, value: V, readVersion: number | undefined): void {
    if (readVersion === undefined || this.begin() !== readVersion || this.entries.has(key)) return;
    const weight = this.budget ? this.budget.weigh(value) : 0;
    while (this.entries.size > 0 && (this.entries.size >= this.maxEntries || (this.budget && this.weight + weight > this.budget.max))) {
      const oldest = this.entries.keys().next().value!;
      if (this.budget) this.weight -= this.budget.weigh(this.entries.get(oldest)!);
      this.entries.delete(oldest);
    }
    this.entries.set(key, value);
    this.weight += weight;
  }
}
