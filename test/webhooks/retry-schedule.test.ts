import assert from 'node:assert/strict';
import { it } from 'node:test';
import { nextAttemptAt, RETRY_DELAYS_MS } from '../../src/webhooks/retry-schedule.js';

// The retry schedule as the README and the served document state it, and how Retry-After moves it.

const NOW = Date.parse('2026-11-24T12:00:00Z');
const S = 1000;
const MIN = 60 * S;
const H = 60 * MIN;

it('retries after 5 s, 5 min, 30 min, 2 h, 5 h and 10 h, then gives up', () => {
  assert.deepEqual(
    [1, 2, 3, 4, 5, 6].map((attempts) => nextAttemptAt(attempts, NOW)! - NOW),
    [5 * S, 5 * MIN, 30 * MIN, 2 * H, 5 * H, 10 * H],
  );
  assert.equal(nextAttemptAt(RETRY_DELAYS_MS.length, NOW), undefined, 'seven attempts in all');
});

it('waits longer when Retry-After says so, in seconds or as a date, never shorter and never past 10 h', () => {
  assert.equal(nextAttemptAt(1, NOW, '120')! - NOW, 120 * S);
  assert.equal(nextAttemptAt(1, NOW, new Date(NOW + 3 * MIN).toUTCString())! - NOW, 3 * MIN);
  assert.equal(nextAttemptAt(3, NOW, '1')! - NOW, 30 * MIN, 'a shorter Retry-After does not hurry the schedule');
  assert.equal(nextAttemptAt(1, NOW, String(7 * 24 * 3600))! - NOW, 10 * H);
  for (const nonsense of ['', 'soon', '-5', '1.5']) assert.equal(nextAttemptAt(1, NOW, nonsense)! - NOW, 5 * S, nonsense);
  assert.equal(nextAttemptAt(RETRY_DELAYS_MS.length, NOW, '1'), undefined, 'Retry-After adds no attempt');
});
