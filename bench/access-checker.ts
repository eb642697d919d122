/**
 * The concurrency checker of the access rule (test/helpers/concurrency-checker.ts), run longer than `npm test`
 * runs it: on each backend, rounds of every session kind at once (HTTP on two instances, the CLI's store, CLI
 * processes, plain SQL sessions holding their transaction open, slow full listings), each round checked at
 * quiescence against the oracle of the base tables. Exits 1 on any 5xx or difference. Loopback only; bounded in time.
 *
 *   npm run soak -- --checker-seconds 60 --checker-seeds 3
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { runConcurrencyChecker } from '../test/helpers/concurrency-checker.js';
import { dropSchema, freshSchema, postgresUnavailableReason } from '../test/helpers/postgres.js';

const { values: args } = parseArgs({
  options: {
    'checker-seconds': { type: 'string', default: '60' },
    'checker-seeds': { type: 'string', default: '3' },
  },
  // The soak's own options come along from `npm run soak -- …`.
  strict: false,
});
const SECONDS = Number(args['checker-seconds']);
const SEEDS = Number(args['checker-seeds']);
const log = (line: string) => process.stderr.write(`${line}\n`);

async function main(): Promise<number> {
  let bad = 0;
  const postgres = (await postgresUnavailableReason()) === undefined;
  for (const backend of ['sqlite', ...(postgres ? ['postgres'] : [])]) {
    for (let seed = 1; seed <= SEEDS; seed++) {
      const dir = await mkdtemp(join(tmpdir(), 'plantstore-checker-'));
      const { schema, url } = freshSchema();
      const db = backend === 'sqlite' ? join(dir, 'plantstore.db') : url;
      try {
        const report = await runConcurrencyChecker({
          db,
          durationMs: SECONDS * 1000,
          seed,
          // Every other seed with groups that move between member grants and ranges.
          lowGroupBounds: seed % 2 === 0,
          rounds: Math.max(3, Math.round(SECONDS / 5)),
          cliRuns: 4,
        });
        const problems = [...report.failures, ...report.mismatches];
        log(`access checker ${backend} seed ${seed}: ${report.operations} operations, ${problems.length} problems`);
        for (const problem of problems.slice(0, 20)) log(`  ${problem}`);
        if (problems.length > 0) bad++;
      } finally {
        await rm(dir, { recursive: true, force: true });
        if (backend === 'postgres') await dropSchema(schema);
      }
    }
  }
  if (!postgres) log('access checker: PostgreSQL not reachable, SQLite only');
  return bad === 0 ? 0 : 1;
}

process.exitCode = await main();
