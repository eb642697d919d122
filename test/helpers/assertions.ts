import assert from 'node:assert/strict';
import type { IncomingHttpHeaders } from 'node:http';
import type { Store } from '../../src/store/store.js';
import type { RawResponse } from './http-app.js';

export const INT32_MAX = 2_147_483_647;

export function assertJsonType(headers: IncomingHttpHeaders): void {
  assert.match(String(headers['content-type']), /^application\/json(;|$)/, `content-type was ${headers['content-type']}`);
}

/** An error response: the status, application/json, and exactly the contract's Error body with `code`. */
export function assertError(res: RawResponse, status: number, code: number): { error: number; message: string } {
  assert.equal(res.status, status, `expected ${status}, got ${res.status}: ${res.text}`);
  assertJsonType(res.headers);
  const body = res.body as Record<string, unknown>;
  assert.equal(typeof body, 'object', `body is not a JSON object: ${res.text}`);
  assert.notEqual(body, null);
  assert.deepEqual(Object.keys(body).sort(), ['error', 'message'], `Error body has other fields: ${res.text}`);
  assert.ok(Number.isInteger(body.error), 'error is an integer');
  assert.ok((body.error as number) >= -(2 ** 31) && (body.error as number) <= INT32_MAX, 'error fits int32');
  assert.equal(typeof body.message, 'string');
  assert.ok((body.message as string).length > 0, 'message is not empty');
  assert.equal(body.error, code, `expected error code ${code}: ${res.text}`);
  return body as { error: number; message: string };
}

/** The target of a `Link: <…>; rel="next"` header (RFC 8288), checked to be one; undefined without the header. */
export function nextLink(link: string | string[] | undefined): string | undefined {
  if (link === undefined) return undefined;
  const match = /^<([^>]+)>; rel="next"$/.exec(String(link));
  assert.ok(match, `Link header is RFC 8288 rel="next": ${link}`);
  return match[1];
}

/**
 * Polls `probe` (every 50 ms, for at most `timeoutMs`) until `until` holds of its value, and returns that value;
 * fails naming `what` and the last value seen. Without `until`, the probe's value must be `true`.
 */
export async function eventually<T>(
  what: string,
  probe: () => Promise<T> | T,
  { until = (value: T) => value === true, timeoutMs = 10_000 }: { until?: (value: T) => boolean; timeoutMs?: number } = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: T;
  do {
    last = await probe();
    if (until(last)) return last;
    await new Promise((r) => setTimeout(r, 50));
  } while (Date.now() < deadline);
  assert.fail(`${what}: not within ${timeoutMs} ms; last ${JSON.stringify(last)}`);
}

/** Waits until the store's change feed follows the log and holds still, so that late changes cannot empty a cache mid-test. */
export async function settleChangeFeed(store: Store): Promise<void> {
  for (let last = -1, i = 0; i < 50; i++) {
    const live = store.changes.sync();
    const now = store.changes.position;
    if (live && now === last) return;
    last = now;
    await new Promise((r) => setTimeout(r, 100));
  }
}
