import { executionAsyncResource } from 'node:async_hooks';

let kept: object | undefined;
let scheduled = false;

/**
 * Keeps one of Node's `process.nextTick` queue entries alive for the life of the process, so that the hidden
 * classes (V8 maps) of those entries are never collected.
 *
 * Why: Node builds each entry as an object literal with computed keys (`{ [async_id_symbol]: …, callback, args }`),
 * and V8 (Node 20) gives such a literal's stores a cache that knows one map or gives up for good ("megamorphic").
 * When the server is idle, no entry is alive, and a few full garbage collections (V8's memory reducer runs them
 * on idle) free the maps; the next request makes new ones, the caches give up, and from then on every
 * `nextTick` (several per HTTP request, inside Node's streams) defines its four properties in the runtime.
 * An entry kept alive keeps its maps (and so every later entry's) alive.
 */
export function keepTickObjectShape(): void {
  if (scheduled) return;
  scheduled = true;
  process.nextTick(() => {
    // Inside a nextTick callback, the current async resource is that callback's queue entry.
    kept = executionAsyncResource();
  });
}

/** The queue entry kept alive, once the tick above has run (for tests). */
export const keptTickObject = (): object | undefined => kept;
