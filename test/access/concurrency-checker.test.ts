import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { runConcurrencyChecker } from '../helpers/concurrency-checker.js';
import { heldSessionsSkip } from '../helpers/held-transaction.js';

// The fast form of the concurrency checker (test/helpers/concurrency-checker.ts): every session kind at once for a
// few seconds, then every listing on both instances against the oracle of the base tables. `npm run soak` runs it
// longer, with other seeds.

after(() => cleanupBackends());

const SEED = Number(process.env.PLANTSTORE_CHECKER_SEED ?? 49);

for (const backend of BACKENDS) {
  describe(`concurrent sessions changing access [${backend.name}]`, { skip: backend.skip || heldSessionsSkip(backend.name) }, () => {
    for (const lowGroupBounds of [false, true]) {
      const groups = lowGroupBounds ? ', groups going ranged and back' : '';
      it(`leave every listing equal to the oracle, with no 5xx${groups}`, async (t) => {
        const report = await runConcurrencyChecker({ db: await backend.freshDb(), durationMs: 5_000, seed: SEED, lowGroupBounds });
        t.diagnostic(`${report.operations} operations, seed ${SEED}`);
        assert.ok(report.operations > 50, `only ${report.operations} operations ran`);
        assert.deepEqual(report.failures, [], 'answers that must not be');
        assert.deepEqual(report.mismatches, [], 'listings that differ from the oracle');
      });
    }
  });
}
