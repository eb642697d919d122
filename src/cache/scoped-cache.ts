/** Counts lookups (for metrics): a hit is a value found, a miss one the caller must read from the store. */
export interface CacheCounter {
  hit(): void;
  miss(): void;
}

export interface ScopedCacheOptions<V> {
  maxEntries: number;
  /** With `weigh`: the most the entries may weigh together (e.g. bytes); the oldest go first. */
  maxWeight?: number;
  weigh?: (value: V) => number;
  /** Scopes that empty this cache whole (so entries need not list them). */
  emptiedBy?: readonly string[];
  counter?: CacheCounter;
}

/**
 * The catalogue positions an entry depends on, when that is known: those after `after`, through `through`
 * (Infinity for all of them). A change confined to a position outside leaves the entry as it is.
 */
export interface Span {
  after: number;
  through: number;
}

/**
 * What a batch of changes drops, by scope: every entry in the scope (`all`), or only the entries whose span holds
 * one of the catalogue positions listed (entries without a span are always dropped).
 */
export type Drops = ReadonlyMap<string, 'all' | readonly number[]>;

interface Entry<V> {
  value: V;
  scopes: readonly string[];
  weight: number;
  span: Span | undefined;
}

const holdsAny = (span: Span, positions: readonly number[]): boolean => positions.some((p) => p > span.after && p <= span.through);

/**
 * Remembering which dropped scope at which position lets a read that was under way when its scope was
 * dropped be refused; past this many the memory is let go and every read under way is refused instead.
 */
const MAX_REMEMBERED_DROPS = 10_000;

/**
 * An in-memory cache whose entries each say what they depend on, as scope names ("user:7", "group:3"), so
 * that a change drops exactly the entries it can affect and nothing else. Bounded by entries and, with a
 * `weigh` function, by total weight: the oldest entries go first.
 *
 * Values read while a change was being applied must not be stored afterwards: `set` takes the change feed's
 * position from when the read began, and refuses the value when one of its scopes was dropped since.
 */
export class ScopedCache<V> {
  private readonly entries = new Map<string, Entry<V>>();
  private readonly byScope = new Map<string, Set<string>>();
  private weight = 0;
  /** scope -> position of the last batch that dropped it */
  private readonly dropped = new Map<string, number>();
  /** Reads that began before this position are never stored (the cache was emptied, or `dropped` forgotten). */
  private floor = 0;
  private readonly emptiedBy: ReadonlySet<string>;

  constructor(private readonly options: ScopedCacheOptions<V>) {
    this.emptiedBy = new Set(options.emptiedBy ?? []);
  }

  get size(): number {
    return this.entries.size;
  }

  get(key: string): V | undefined {
    const value = this.entries.get(key)?.value;
    const counter = this.options.counter;
    if (counter) {
      if (value === undefined) counter.miss();
      else counter.hit();
    }
    return value;
  }

  /** A lookup that may not use the cache now (caching off, or changes not followed): counted as a miss. */
  bypass(): undefined {
    this.options.counter?.miss();
    return undefined;
  }

  /**
   * Stores `value`, read from the store when the feed stood at `readAt`, unless a change to its scopes came since.
   * With a `span`, changes confined to catalogue positions outside it leave it in place.
   */
  set(key: string, value: V, scopes: readonly string[], readAt: number, span?: Span): void {
    if (readAt < this.floor) return;
    for (const scope of scopes) if ((this.dropped.get(scope) ?? -1) > readAt) return;
    if (this.entries.has(key)) this.remove(key);
    const { maxEntries, maxWeight, weigh } = this.options;
    const weight = weigh ? weigh(value) : 0;
    while (this.entries.size > 0 && (this.entries.size >= maxEntries || (maxWeight !== undefined && this.weight + weight > maxWeight))) {
      this.remove(this.entries.keys().next().value!);
    }
    this.entries.set(key, { value, scopes, weight, span });
    this.weight += weight;
    for (const scope of scopes) {
      let keys = this.byScope.get(scope);
      if (keys === undefined) this.byScope.set(scope, (keys = new Set()));
      keys.add(key);
    }
  }

  /**
   * Drops the entries that `drops` names (everything for a scope in `emptiedBy`), as of feed position `position`.
   * A read under way in a scope named is not stored, whatever its span: it began before the change.
   */
  drop(drops: Drops, position: number): void {
    for (const scope of this.emptiedBy) {
      if (drops.has(scope)) return this.clear(position);
    }
    for (const [scope, positions] of drops) {
      this.dropped.set(scope, position);
      const keys = this.byScope.get(scope);
      if (keys === undefined) continue;
      for (const key of keys) {
        const span = this.entries.get(key)?.span;
        if (positions === 'all' || span === undefined || holdsAny(span, positions)) this.remove(key);
      }
    }
    if (this.dropped.size > MAX_REMEMBERED_DROPS) {
      this.dropped.clear();
      this.floor = position;
    }
  }

  clear(position: number): void {
    this.entries.clear();
    this.byScope.clear();
    this.dropped.clear();
    this.weight = 0;
    this.floor = position;
  }

  private remove(key: string): void {
    const entry = this.entries.get(key);
    if (entry === undefined) return;
    this.entries.delete(key);
    this.weight -= entry.weight;
    for (const scope of entry.scopes) {
      const keys = this.byScope.get(scope);
      if (keys === undefined) continue;
      keys.delete(key);
      if (keys.size === 0) this.byScope.delete(scope);
    }
  }
}
