import { setFlagsFromString } from 'node:v8';

/**
 * Turns V8's allocation-site pretenuring off for this process, so that a request's objects are never allocated
 * straight into the old generation.
 *
 * Why: V8 tenures an allocation site (an object or array literal) when nearly all of its objects survived the
 * last young collections. A request's objects live for about a millisecond, but a cold process hit by many
 * connections at once keeps a burst of them alive across a collection, and a literal made for every request
 * can be tenured then (which one was not found: the feedback names sites by address). From then on its objects
 * are born old, and everything they point to survives each young collection until the next full one: in such
 * a process about half of what was allocated survived each young collection, mostly strings, against nearly
 * nothing in the others. It stays about 1.7 times dearer a request for its whole life: 10 of 102 serving
 * processes started under load here (cached pages at 22-31 µs of CPU instead of 14-15), 0 of 144 with
 * pretenuring off, whose healthy processes cost the same (15.0 against 15.3 µs, 24 each, interleaved).
 *
 * V8 reads the flag at every collection, so setting it while running takes effect from the next one.
 */
export function stopAllocationSitePretenuring(): void {
  setFlagsFromString('--no-allocation-site-pretenuring');
}
