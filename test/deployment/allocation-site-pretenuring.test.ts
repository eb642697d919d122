import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { runProbe, startServerSource } from '../helpers/node-probe.js';

// A serving process makes no allocation-site pretenuring decisions: once a per-request site is tenured, the
// objects each request makes survive every young collection and the process stays slower for its whole life
// (see src/serving-process.ts). Each probe runs in a child that prints V8's pretenuring feedback,
// then, after a MARK line, makes array literals that all survive the young collections after them: feedback
// that tenures.

const SURVIVING_LITERALS = `
  console.log('MARK');
  const kept = [];
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < 5000; i++) kept.push([i, i + 1]);
    gc({ type: 'minor' });
  }`;

/** Runs a probe; returns the pretenuring feedback V8 printed after its MARK line. */
function feedbackAfterMark(probe: string): string[] {
  const stdout = runProbe(['--expose-gc', '--trace-pretenuring-statistics'], probe);
  const lines = stdout.split('\n');
  const mark = lines.indexOf('MARK');
  assert.ok(mark >= 0, `the probe printed no MARK line: ${stdout.slice(0, 500)}`);
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
      ${startServerSource(join(dir, 'pretenuring.db'))}
      for (let i = 0; i < 100; i++) await (await fetch(server.url + '/healthz')).text();
      ${SURVIVING_LITERALS}
      await server.stop();`);
    assert.deepEqual(feedback, []);
  });
});
