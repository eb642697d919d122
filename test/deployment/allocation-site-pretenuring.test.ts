import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { pathToFileURL } from 'node:url';

// A serving process makes no allocation-site pretenuring decisions: once a per-request site is tenured, the
// objects each request makes survive every young collection and the process stays slower for its whole life
// (see src/allocation-site-pretenuring.ts). Each probe runs in a child that prints V8's pretenuring feedback,
// then, after a MARK line, makes array literals that all survive two young collections: feedback that tenures.

const DIST = (path: string) => pathToFileURL(join(import.meta.dirname, '../../dist', path)).href;

const SURVIVING_LITERALS = `
  console.log('MARK');
  const kept = [];
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 5000; i++) kept.push([i, i + 1]);
    gc({ type: 'minor' });
  }`;

/** Runs a probe; returns the pretenuring feedback V8 printed after its MARK line. */
function feedbackAfterMark(probe: string): string[] {
  const run = spawnSync(process.execPath, ['--expose-gc', '--trace-pretenuring-statistics', '--input-type=module', '-e', probe], {
    encoding: 'utf8',
    timeout: 60_000,
  });
  assert.equal(run.status, 0, run.stderr);
  const lines = run.stdout.split('\n');
  const mark = lines.indexOf('MARK');
  assert.ok(mark >= 0, `the probe printed no MARK line: ${run.stdout.slice(0, 500)}`);
  return lines.slice(mark + 1).filter((line) => line.includes('pretenuring:'));
}

describe('allocation-site pretenuring in a serving process', () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-pretenuring-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  // The control: this Node, left alone, weighs those literals for tenuring.
  const control = feedbackAfterMark(SURVIVING_LITERALS);

  it('without a server, surviving literals are weighed for tenuring', () => {
    assert.ok(
      control.some((line) => /AllocationSite.*=> (maybe tenure|tenure)/.test(line)),
      `no pretenuring feedback: ${control.join('\n')}`,
    );
  });

  it('once a Plant Store server has started, nothing is weighed for tenuring', () => {
    const feedback = feedbackAfterMark(`
      const { loadConfig } = await import(${JSON.stringify(DIST('config.js'))});
      const { startServer } = await import(${JSON.stringify(DIST('server.js'))});
      const server = await startServer(loadConfig({ db: ${JSON.stringify(join(dir, 'pretenuring.db'))}, host: '127.0.0.1', port: 0, logLevel: 'silent' }));
      for (let i = 0; i < 100; i++) await (await fetch(server.url + '/healthz')).text();
      ${SURVIVING_LITERALS}
      await server.stop();`);
    assert.deepEqual(feedback, []);
  });
});
