import type { Store } from '../store/store.js';

/** Counts lookups (for metrics): a hit is a value found, a miss one the caller must read from the store. */
export interface CacheCounter {
  hit(): void;
  miss(): void;
}

/**
 * An in-memory cache that is correct across processes: it is emptied whenever the store's data version
 * changes (SQLite: another connection committed; PostgreSQL: a change notification arrived), and it holds
 * nothing while the store cannot tell (a lost notification connection). Bounded: the oldest entry goes first.
 */
export class VersionedCache<V> {
  private readonly entries = new Map<string, V>();
  private version: number | undefined;

  constructor(
    private readonly store: Store,
    private readonly maxEntries: number,
    private readonly enabled = true,
    private readonly counter?: CacheCounter,
  ) {}

  /** The current data version (after emptying the cache if it moved); pass it back to `set`. */
  begin(): number | undefined {
    if (!this.enabled) return undefined;
    const version = this.store.dataVersion();
    if (version !== this.version) {
      this.entries.clear();
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
    if (readVersion === undefined || this.begin() !== readVersion) return;
    if (this.entries.size >= this.maxEntries) this.entries.delete(this.entries.keys().next().value!);
    this.entries.set(key, value);
  }
}
