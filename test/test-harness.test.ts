import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { after, describe, it } from 'node:test';
import { PG_PROBE_ENV, PG_REACHABLE, requirePostgres } from './helpers/postgres.js';

const run = promisify(execFile);
const ROOT = new URL('..', import.meta.url).pathname;
const PROBE = join(ROOT, 'test', 'helpers', 'probe-postgres-once.ts');
// Nothing listens on port 1 here: a refused connection, answered at once.
const NOWHERE = 'postgres://postgres@127.0.0.1:1/test';
const printProbe = ['-e', `process.stdout.write(process.env.${PG_PROBE_ENV})`];

describe('the test run probes PostgreSQL once', () => {
  it('hands every test file the answer of one probe: why PostgreSQL is not reachable', async () => {
    const env = { ...process.env, PLANTSTORE_TEST_PG_URL: NOWHERE, [PG_PROBE_ENV]: '' };
    const { stdout } = await run(process.execPath, ['--import', 'tsx', PROBE, process.execPath, ...printProbe], { env, cwd: ROOT });
    assert.match(stdout, /^PostgreSQL not reachable at postgres:\/\/127\.0\.0\.1:1\/test: .*ECONNREFUSED/);
  });

  it('a file that is handed the answer does not probe again', async () => {
    // The URL points nowhere, yet the answer handed down says reachable: the answer wins.
    const script = `import { requirePostgres } from ${JSON.stringify(join(ROOT, 'test', 'helpers', 'postgres.ts'))};
      process.stdout.write(String(await requirePostgres()));`;
    const env = { ...process.env, PLANTSTORE_TEST_PG_URL: NOWHERE, [PG_PROBE_ENV]: PG_REACHABLE, CI: 'false' };
    const { stdout } = await run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { env, cwd: ROOT });
    assert.equal(stdout, 'false');
  });

  it('under CI=true, an unreachable PostgreSQL fails instead of skipping', async () => {
    const script = `import { requirePostgres } from ${JSON.stringify(join(ROOT, 'test', 'helpers', 'postgres.ts'))};
      await requirePostgres();`;
    const env = { ...process.env, PLANTSTORE_TEST_PG_URL: NOWHERE, [PG_PROBE_ENV]: '', CI: 'true' };
    await assert.rejects(
      run(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], { env, cwd: ROOT }),
      (err: Error & { stderr: string }) => /CI=true requires PostgreSQL: PostgreSQL not reachable/.test(err.stderr),
    );
  });

  it('this run itself was handed a probe answer, and it matches what the suites see', async () => {
    assert.ok(process.env[PG_PROBE_ENV] !== undefined || process.env.npm_lifecycle_event !== 'test', 'npm test runs the probe');
    if (process.env.CI === 'true') assert.equal(await requirePostgres(), false);
  });
});

describe('the closing summary counts suites skipped as a whole', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-harness-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('names each skipped suite and its reason', async () => {
    const file = join(dir, 'sample.test.mjs');
    writeFileSync(
      file,
      `import { describe, it } from 'node:test';
       describe('needs a service', { skip: 'skipped: not there' }, () => { it('a', () => {}); });
       describe('runs', () => { it('b', () => {}); });`,
    );
    const reporter = join(ROOT, 'test', 'helpers', 'skipped-suites-reporter.mjs');
    // Without the runner's own marker, or the child would report to this run instead of to its reporter.
    const { NODE_TEST_CONTEXT: _, ...env } = process.env;
    const { stdout } = await run(process.execPath, ['--test', `--test-reporter=${reporter}`, file], { cwd: dir, env });
    assert.equal(stdout, 'ℹ suites skipped 1\n  needs a service: skipped: not there\n');
  });
});
