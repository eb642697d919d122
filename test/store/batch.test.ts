import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Batch } from '../../src/store/batch.js';

// The batching of calls made in one turn of the event loop, with a bound on runs at once: what the PostgreSQL token
// reads rely on to gather the requests that come while a statement is in flight, and not to wait behind one stuck.

/** A run that answers each item doubled once `release()` is called, recording the items of each run. */
function controlledRuns() {
  const runs: number[][] = [];
  const waiting: Array<() => void> = [];
  const run = (items: readonly number[]) => {
    runs.push([...items]);
    return new Promise<number[]>((resolve) => waiting.push(() => resolve(items.map((i) => i * 2))));
  };
  const release = () => waiting.shift()?.();
  return { runs, run, release };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

describe('Batch', () => {
  it('runs the calls of one turn together, and without a bound each later turn at once', async () => {
    const { runs, run, release } = controlledRuns();
    const batch = new Batch(run, 100, { eachAloneOnFailure: false, inFlight: Infinity });
    const first = [batch.add(1), batch.add(2)];
    await turn();
    const second = [batch.add(3)];
    await turn();
    assert.deepEqual(runs, [[1, 2], [3]]);
    release();
    release();
    assert.deepEqual(await Promise.all([...first, ...second]), [2, 4, 6]);
  });

  it('with one run in flight, gathers every call made meanwhile into the next run', async () => {
    const { runs, run, release } = controlledRuns();
    const batch = new Batch(run, 100, { eachAloneOnFailure: false, inFlight: 1, patienceMs: 10_000 });
    const answers = [batch.add(1)];
    await turn();
    for (let i = 2; i <= 4; i++) {
      answers.push(batch.add(i));
      await turn();
    }
    assert.deepEqual(runs, [[1]], 'nothing else runs while the first is in flight');
    release();
    await turn();
    await turn();
    assert.deepEqual(runs, [[1], [2, 3, 4]]);
    release();
    assert.deepEqual(await Promise.all(answers), [2, 4, 6, 8]);
  });

  it('keeps the largest run at `max`, the rest waiting for the next', async () => {
    const { runs, run, release } = controlledRuns();
    const batch = new Batch(run, 2, { eachAloneOnFailure: false, inFlight: 1, patienceMs: 10_000 });
    const answers = [1, 2, 3, 4, 5].map((i) => batch.add(i));
    await turn();
    assert.deepEqual(runs, [[1, 2]]);
    for (let i = 0; i < 3; i++) {
      release();
      await turn();
      await turn();
    }
    assert.deepEqual(runs, [[1, 2], [3, 4], [5]]);
    assert.deepEqual(await Promise.all(answers), [2, 4, 6, 8, 10]);
  });

  it('lets the next run go once a run in flight has outlasted its patience, and gives each its own answers', async () => {
    const { runs, run, release } = controlledRuns();
    const batch = new Batch(run, 100, { eachAloneOnFailure: false, inFlight: 1, patienceMs: 30 });
    const stuck = batch.add(1);
    await turn();
    const later = batch.add(2);
    await sleep(5);
    assert.deepEqual(runs, [[1]]);
    await sleep(60);
    assert.deepEqual(runs, [[1], [2]], 'the stuck run no longer holds the next back');
    release();
    release();
    assert.equal(await stuck, 2);
    assert.equal(await later, 4);
  });

  it('fails every call of a failed run alike, and still runs those that came meanwhile', async () => {
    let calls = 0;
    let fail: (err: Error) => void = () => {};
    const batch = new Batch(
      (items: readonly number[]) => {
        calls++;
        return calls === 1 ? new Promise<number[]>((_, reject) => (fail = reject)) : Promise.resolve(items.map((i) => -i));
      },
      100,
      { eachAloneOnFailure: false, inFlight: 1, patienceMs: 10_000 },
    );
    const failing = [batch.add(1), batch.add(2)];
    await turn();
    const next = batch.add(3);
    fail(new Error('connection lost'));
    for (const answer of failing) await assert.rejects(answer, /connection lost/);
    assert.equal(await next, -3);
  });
});
