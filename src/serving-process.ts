import { executionAsyncResource } from 'node:async_hooks';
import { setFlagsFromString } from 'node:v8';

// The V8 settings of a serving process, set by its entry point (server.ts, runServer) and nowhere else. Each
// was found and measured on Node 20 (V8 11.3), where it is applied; another major version runs without them
// until they are measured there. The findings and figures are in docs/performance.md.

/** Whether this Node is the one the settings were measured on. */
export const TUNED_NODE_MAJOR = 20;
const nodeMajor = Number(process.versions.node.split('.')[0]);

let kept: object | undefined;
let tuned = false;

/** Applies the V8 settings below to this process, once; does nothing on another Node than TUNED_NODE_MAJOR. */
export function tuneServingProcess(): void {
  if (tuned || nodeMajor !== TUNED_NODE_MAJOR) return;
  tuned = true;
  stopAllocationSitePretenuring();
  keepTickObjectShape();
}

/**
 * Allocation-site pretenuring off: a request's objects are never allocated straight into the old generation.
 * V8 tenures an allocation site (a literal) when nearly all its objects survived the last young collections; a
 * cold process hit by many connections at once can tenure a literal made for every request, after which each
 * request's objects, and all they point to, survive young collections, and the process stays dearer a request for
 * its whole life. V8 reads the flag at every collection, so setting it while running takes effect from the next.
 */
function stopAllocationSitePretenuring(): void {
  setFlagsFromString('--no-allocation-site-pretenuring');
}

/**
 * One of Node's `process.nextTick` queue entries kept alive for the life of the process, so that the hidden
 * classes (maps) of those entries are never collected. Node builds each entry as a literal with computed keys,
 * and V8 gives such a literal's stores a cache that knows one map or gives up for good. When the server is idle,
 * no entry is alive and idle full collections free the maps; the next request makes new ones, the caches give up,
 * and every later `nextTick` (several per request, inside Node's streams) defines its properties in the runtime.
 */
function keepTickObjectShape(): void {
  process.nextTick(() => {
    // Inside a nextTick callback, the current async resource is that callback's queue entry.
    kept = executionAsyncResource();
  });
}

/** The queue entry kept alive, once the tick above has run (for tests). */
export const keptTickObject = (): object | undefined => kept;
