import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { recordBatch } from '../../src/import-format/records.js';
import { openStore } from '../../src/store/open-store.js';
import { PRUNED_EVENTS_PER_STEP } from '../../src/store/webhook-outbox.js';
import type { Store } from '../../src/store/store.js';
import { newWebhookSecret } from '../../src/webhooks/signing.js';
import { eventually } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { holdTransaction } from '../helpers/held-transaction.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';
import { bearer, rawRequest, seed, startApp, type RunningApp, addPlant } from '../helpers/http-app.js';
import { startReceiver, until, verifyDelivery as verify } from '../helpers/webhook-receiver.js';

// The new-plant webhook end to end: a real receiver on loopback verifies every delivery with the Standard
// Webhooks library, counts them, fails on purpose and recovers.

after(() => cleanupBackends());

const FAST = { pollMs: 20, leaseMs: 5_000, timeoutMs: 2_000, concurrency: 4, allowPrivateTargets: true };

/** Where this file's outbox tests send nothing: a delivery to it waits for the test to claim and answer it. */
const NEVER_SENT = 'http://127.0.0.1:9/never-sent';

/** User alice, an endpoint at NEVER_SENT, and alice's private plants `ids`: each event raised waits there. */
async function waitingDeliveries(store: Store, ids: readonly number[]) {
  await seed(store, { users: [{ name: 'alice' }] });
  const endpoint = await store.webhooks.addEndpoint(NEVER_SENT, newWebhookSecret());
  for (const id of ids) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
  return endpoint;
}

for (const backend of BACKENDS) {
  describe(`new-plant webhook [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;

    before(async () => {
      db = await backend.freshDb();
      store = await openStore({ db });
      ({ tokens } = await seed(store, { users: [{ name: 'alice' }] }));
      // Logs captured: a delivery that fails says so in the log.
      server = await startApp(store, { webhooks: FAST, captureLogs: true, logRequests: false });
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    /** The newest delivery to endpoint `id`. */
    const latestDelivery = async (id: number) => (await store.webhooks.listDeliveries({ endpointId: id, limit: 1 }))[0];

    /** The log lines the dispatcher wrote about endpoint `id`. */
    const logged = (id: number) =>
      server
        .logs()
        .split('\n')
        .filter((line) => line.includes('"endpointId"'))
        .map((line) => JSON.parse(line) as { endpointId: number; msg: string; status?: number; error?: string; retryAt?: string })
        .filter((line) => line.endpointId === id);

    const create = (id: number, name: string) =>
      rawRequest(
        server.url,
        '/plants',
        { ...bearer(tokens.alice!), 'content-type': 'application/json' },
        'POST',
        JSON.stringify({ id, name }),
      );

    it('delivers every plant added, over HTTP, by the CLI and by an import, signed, once each', async () => {
      const receiver = await startReceiver();
      const secret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, secret);
      try {
        assert.equal((await create(101, 'Over HTTP')).status, 200);
        await addPlant(store, { name: 'By the CLI', owner: 'alice', public: false, id: 102 });
        await store.bulk.importRecords(recordBatch([{ type: 'plant', id: 103, name: 'Imported', owner: 'alice' }]));
        await until(() => receiver.received.length >= 3, 'three deliveries');
        await new Promise((resolve) => setTimeout(resolve, 200));
        // Up to 8 deliveries to one endpoint are in flight at once, so they may arrive in any order.
        const payloads = receiver.received.map((got) => verify(secret, got) as { id: number; name: string }).sort((a, b) => a.id - b.id);
        assert.deepEqual(payloads, [
          { id: 101, name: 'Over HTTP' },
          { id: 102, name: 'By the CLI' },
          { id: 103, name: 'Imported' },
        ]);
        const ids = receiver.received.map((got) => got.headers['webhook-id']);
        assert.equal(new Set(ids).size, 3, 'one webhook-id per event');
        for (const got of receiver.received) assert.match(String(got.headers['webhook-signature']), /^v1,[A-Za-z0-9+/]+=*$/);
        assert.throws(() => verify(newWebhookSecret(), receiver.received[0]!), /signature/i, 'another secret does not verify');
        const deliveries = await store.webhooks.listDeliveries({ limit: 10 });
        assert.deepEqual(
          deliveries.map((d) => [d.plantId, d.status, d.attempts]),
          [
            [103, 'delivered', 1],
            [102, 'delivered', 1],
            [101, 'delivered', 1],
          ],
        );
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });

    it('gives every event a webhook-id of its own, also after the outbox is restored to an earlier state', async () => {
      const receiver = await startReceiver();
      const secret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, secret);
      try {
        assert.equal((await create(151, 'Before the restore')).status, 200);
        await until(() => receiver.received.length === 1, 'the first delivery');
        await new Promise((resolve) => setTimeout(resolve, 200));
        // What a backup taken before that event brings back: an outbox without it, its numbering where it was then.
        await plainSql(
          db,
          backend.name === 'sqlite'
            ? "DELETE FROM webhook_deliveries; DELETE FROM webhook_events; DELETE FROM sqlite_sequence WHERE name = 'webhook_events'"
            : 'TRUNCATE webhook_deliveries, webhook_events RESTART IDENTITY',
        );
        assert.equal((await create(152, 'After the restore')).status, 200);
        await until(() => receiver.received.length === 2, 'the second delivery');
        const [first, second] = receiver.received.map((got) => String(got.headers['webhook-id']));
        assert.match(first!, /^msg_[0-9a-f]{32}$/);
        assert.notEqual(second, first, 'a receiver that skips ids it has seen would drop the second plant');
        assert.deepEqual(verify(secret, receiver.received[1]!), { id: 152, name: 'After the restore' });
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });

    it('retries a failed delivery with the same webhook-id, honouring Retry-After, until it is taken', async () => {
      const receiver = await startReceiver((n) => (n === 1 ? { status: 503, headers: { 'retry-after': '1' } } : { status: 204 }));
      const secret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, secret);
      try {
        assert.equal((await create(201, 'Retried')).status, 200);
        await until(() => receiver.received.length >= 2, 'a second attempt', 15_000);
        const [first, second] = receiver.received;
        assert.equal(first!.headers['webhook-id'], second!.headers['webhook-id']);
        // `webhooks deliveries` names it as the receiver saw it.
        assert.equal((await latestDelivery(endpoint.id))?.messageId, first!.headers['webhook-id']);
        const gap = Number(second!.headers['webhook-timestamp']) - Number(first!.headers['webhook-timestamp']);
        assert.ok(gap >= 1, `retried after Retry-After (${gap} s) or the 5 s schedule`);
        assert.deepEqual(verify(secret, second!), { id: 201, name: 'Retried' });
        await until(() => receiver.received.length === 2, 'no third attempt');
        await new Promise((resolve) => setTimeout(resolve, 200));
        const delivery = await latestDelivery(endpoint.id);
        assert.deepEqual([delivery?.plantId, delivery?.status, delivery?.attempts, delivery?.lastStatus], [201, 'delivered', 2, 204]);
        assert.equal(receiver.received.length, 2);
        const [line, ...more] = logged(endpoint.id);
        assert.match(line?.msg ?? '', /webhook delivery failed; it is tried again later/);
        assert.equal(line?.status, 503);
        assert.ok(line?.retryAt, 'the line says when');
        assert.deepEqual(more, [], 'a delivered attempt is not logged as a failure');
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });

    it('sends now, when asked, a delivery that waits for a later attempt', async () => {
      // The receiver's outage is over, but the schedule says an hour: `webhooks retry` must not wait for it.
      const receiver = await startReceiver((n) => (n === 1 ? { status: 503, headers: { 'retry-after': '3600' } } : { status: 204 }));
      const secret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, secret);
      try {
        assert.equal((await create(251, 'Waiting')).status, 200);
        await until(() => receiver.received.length >= 1, 'a first attempt');
        await eventually('its outcome recorded', () => latestDelivery(endpoint.id), {
          until: (d) => d?.attempts === 1 && d.status === 'pending',
        });
        assert.deepEqual(await store.webhooks.retry({ endpointId: endpoint.id }), { due: 1, held: 0 });
        await until(() => receiver.received.length >= 2, 'the second attempt, now', 3_000);
        assert.deepEqual(verify(secret, receiver.received[1]!), { id: 251, name: 'Waiting' });
        await eventually('delivered', () => latestDelivery(endpoint.id), { until: (d) => d?.status === 'delivered' });
        assert.deepEqual(await store.webhooks.retry({ endpointId: endpoint.id }), { due: 0, held: 0 }, 'nothing left to send');
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });

    it('says why a delivery failed: a refused connection is named as such, in the delivery and in the log', async () => {
      // A loopback port that was just free: nothing listens there.
      const closed = createServer().listen(0, '127.0.0.1');
      await once(closed, 'listening');
      const { port } = closed.address() as AddressInfo;
      await new Promise((resolve) => closed.close(resolve));
      const endpoint = await store.webhooks.addEndpoint(`http://127.0.0.1:${port}/hook`, newWebhookSecret());
      try {
        assert.equal((await create(271, 'Refused')).status, 200);
        const delivery = await eventually('the first attempt recorded', () => latestDelivery(endpoint.id), {
          until: (d) => d?.attempts === 1,
        });
        assert.match(delivery?.lastError ?? '', /ECONNREFUSED/);
        await eventually('the log line', () => logged(endpoint.id).length, { until: (n) => n >= 1 });
        assert.match(logged(endpoint.id)[0]!.error ?? '', /ECONNREFUSED/);
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
      }
    });

    it('disables an endpoint that answers 410 Gone, and never follows a redirect', async () => {
      const gone = await startReceiver(() => ({ status: 410 }));
      const redirecting = await startReceiver(() => ({ status: 302, headers: { location: 'http://127.0.0.1:1/elsewhere' } }));
      const a = await store.webhooks.addEndpoint(gone.url, newWebhookSecret());
      const b = await store.webhooks.addEndpoint(redirecting.url, newWebhookSecret());
      try {
        assert.equal((await create(301, 'Gone')).status, 200);
        await until(() => gone.received.length >= 1 && redirecting.received.length >= 1, 'both endpoints tried');
        await new Promise((resolve) => setTimeout(resolve, 200));
        const endpoints = await store.webhooks.listEndpoints();
        assert.match(endpoints.find((e) => e.id === a.id)?.disabledReason ?? '', /410/);
        assert.match(logged(a.id)[0]?.msg ?? '', /answered 410 Gone and is disabled/);
        assert.equal(endpoints.find((e) => e.id === b.id)?.disabledAt, undefined);
        const redirected = await latestDelivery(b.id);
        assert.equal(redirected?.status, 'pending', 'a redirect is a failed attempt, tried again later');
        assert.equal(redirected?.lastStatus, 302);
        assert.equal(redirecting.received.length, 1);
      } finally {
        await store.webhooks.removeEndpoint(a.id);
        await store.webhooks.removeEndpoint(b.id);
        await gone.close();
        await redirecting.close();
      }
    });

    it('signs with the old and the new secret while a rotation overlaps', async () => {
      const receiver = await startReceiver();
      const old = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, old);
      const fresh = newWebhookSecret();
      await store.webhooks.rotateSecret(endpoint.id, fresh, Date.now() + 60_000);
      try {
        assert.equal((await create(401, 'Rotated')).status, 200);
        await until(() => receiver.received.length >= 1, 'a delivery');
        const [got] = receiver.received;
        assert.equal(String(got!.headers['webhook-signature']).split(' ').length, 2);
        assert.deepEqual(verify(old, got!), { id: 401, name: 'Rotated' });
        assert.deepEqual(verify(fresh, got!), { id: 401, name: 'Rotated' });
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });

    it('answers writes and reads while every delivery hangs at a receiver that never answers', async () => {
      const hanging = await startReceiver(() => 'hold');
      const endpoint = await store.webhooks.addEndpoint(hanging.url, newWebhookSecret());
      try {
        for (let i = 0; i < FAST.concurrency + 2; i++) assert.equal((await create(601 + i, `Unheard ${i}`)).status, 200);
        await until(() => hanging.received.length === FAST.concurrency, 'every delivery slot taken by the hanging receiver');
        // Every slot is stuck, and the API still answers: it never waits for a receiver.
        assert.equal((await create(699, 'Still answered')).status, 200);
        const listed = await rawRequest(server.url, '/plants', bearer(tokens.alice!));
        assert.ok((listed.body as Array<{ name: string }>).some((p) => p.name === 'Still answered'));
        assert.equal(hanging.received.length, FAST.concurrency, 'no more than the slots were sent');
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await hanging.close();
      }
    });

    it('prunes events nobody waits for, never one with a delivery still pending', async () => {
      const failing = await startReceiver(() => ({ status: 500 }));
      const endpoint = await store.webhooks.addEndpoint(failing.url, newWebhookSecret());
      try {
        assert.equal((await create(501, 'Waiting')).status, 200);
        await until(() => failing.received.length >= 1, 'a failed attempt');
        assert.ok((await store.webhooks.prune(Date.now() + 1)) > 0, 'the delivered events of the tests above are pruned');
        const left = await store.webhooks.listDeliveries({ limit: 100 });
        assert.deepEqual(
          left.map((d) => [d.plantId, d.status]),
          [[501, 'pending']],
        );
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await failing.close();
      }
    });
  });

  describe(`the webhook backlog [${backend.name}]`, { skip: backend.skip }, () => {
    it('prunes a large outbox a step at a time, oldest first, and stops at the first step of newer events', async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      try {
        const endpoint = await store.webhooks.addEndpoint(NEVER_SENT, newWebhookSecret());
        const old = Date.now() - 1_000_000;
        const before = old + 500_000;
        // Two and a half steps of old events, then one of new ones, as the outbox's triggers raise them.
        const events = 2.5 * PRUNED_EVENTS_PER_STEP;
        const all = events + PRUNED_EVENTS_PER_STEP;
        await plainSql(
          db,
          `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${all})
           INSERT INTO webhook_events (plant_id, name, created_at, message_id) SELECT i, 'Plant', CASE WHEN i <= ${events} THEN ${old} ELSE ${before + 1} END, 'msg_' || i FROM n`,
        );
        // Old events still waited for stay; old ones delivered go with their deliveries; a new one waits for its week.
        const deliveries = (from: number, to: number, status: string) =>
          `INSERT INTO webhook_deliveries (event_id, endpoint_id, status, next_attempt_at) SELECT id, ${endpoint.id}, '${status}', 0 FROM webhook_events WHERE plant_id BETWEEN ${from} AND ${to}`;
        await plainSql(db, deliveries(10, 19, 'pending'));
        await plainSql(db, deliveries(20, 29, 'delivered'));
        await plainSql(db, deliveries(events + 10, events + 19, 'delivered'));
        assert.equal(await store.webhooks.prune(before), events - 10);
        const left = await plainQuery<{ n: number | string; deliveries: number | string }>(
          db,
          `SELECT count(*) AS n, (SELECT count(*) FROM webhook_deliveries) AS deliveries FROM webhook_events`,
        );
        assert.deepEqual(
          [Number(left[0]!.n), Number(left[0]!.deliveries)],
          [10 + PRUNED_EVENTS_PER_STEP, 20],
          'the waited-for old events and every new one are kept, with their deliveries',
        );
        assert.equal(await store.webhooks.prune(before), 0, 'a pass that finds nothing old deletes nothing');
        // A week later for the new ones too, but a pass told to end after one step: the oldest step's only.
        let steps = 0;
        assert.equal(await store.webhooks.prune(before + 2, () => steps++ < 1), PRUNED_EVENTS_PER_STEP - 10);
        const [{ n }] = (await plainQuery<{ n: number | string }>(db, 'SELECT count(*) AS n FROM webhook_events')) as [
          { n: number | string },
        ];
        assert.equal(Number(n), 20, 'a pass ends when told to');
      } finally {
        await store.close();
      }
    });

    it('a retry held open while a prune runs keeps its event: the prune reads the delivery as the retry left it', async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      try {
        await waitingDeliveries(store, [1, 2, 3]);
        const weekAgo = Date.now() - 8 * 24 * 3_600_000;
        await plainSql(db, `UPDATE webhook_events SET created_at = ${weekAgo}`);
        await plainSql(db, "UPDATE webhook_deliveries SET status = 'failed', attempts = 8");
        // What `webhooks retry` writes for plant 2's event, committed while the prune's step waits for it.
        const retry = await holdTransaction(
          db,
          "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = 0 WHERE event_id = (SELECT id FROM webhook_events WHERE plant_id = 2)",
        );
        const pruned = store.webhooks.prune(Date.now() - 7 * 24 * 3_600_000);
        await new Promise((resolve) => setTimeout(resolve, 500));
        await retry.commit();
        assert.equal(await pruned, 2);
        const left = await plainQuery<{ plant_id: number | string; status: string }>(
          db,
          'SELECT e.plant_id, d.status FROM webhook_events e JOIN webhook_deliveries d ON d.event_id = e.id',
        );
        assert.deepEqual(
          left.map((r) => [Number(r.plant_id), r.status]),
          [[2, 'pending']],
        );
      } finally {
        await store.close();
      }
    });

    it("a claim beside another process's claim held open takes only what that one does not hold", async () => {
      const db = await backend.freshDb();
      const store = await openStore({ db });
      try {
        const endpoint = await waitingDeliveries(store, [1, 2, 3]);
        // What another process's claim of plant 2's delivery writes, its commit held back.
        const other = await holdTransaction(
          db,
          `UPDATE webhook_deliveries SET lease_until = ${Date.now() + 600_000} WHERE event_id = (SELECT id FROM webhook_events WHERE plant_id = 2)`,
        );
        // PostgreSQL skips the held row at once; SQLite's claim waits for the other writer's commit.
        let settled = false;
        const claiming = store.webhooks.claim(new Map([[endpoint.id, 10]]), 60_000).finally(() => (settled = true));
        await new Promise((resolve) => setTimeout(resolve, 500));
        const settledFirst = settled;
        await other.commit();
        assert.equal(settledFirst, backend.name === 'postgres', 'a claim waits for no other claim where the database can skip it');
        const claimed = await claiming;
        assert.deepEqual(
          claimed.map((d) => d.event.plant.name).sort(),
          ['Plant 1', 'Plant 3'],
          'each delivery is claimed by one process, with what it is sent with',
        );
        assert.deepEqual(await store.webhooks.claim(new Map([[endpoint.id, 10]]), 60_000), [], 'the other claim still holds its lease');
      } finally {
        await store.close();
      }
    });

    it('records a batch of outcomes of every kind as they were, whatever their errors hold', async () => {
      // No server: this test claims and answers the deliveries itself, as a dispatcher would.
      const store = await backend.open();
      const endpoint = await waitingDeliveries(store, [1, 2, 3, 4]);
      const claimed = await store.webhooks.claim(new Map([[endpoint.id, 10]]), 60_000);
      assert.deepEqual(
        claimed.map((d) => [d.event.plant.name, d.url, d.attempts]),
        [1, 2, 3, 4].map((id) => [`Plant ${id}`, NEVER_SENT, 0]),
        'the claim returns what each delivery is sent with',
      );
      // Quotes, backslashes, braces and commas are what array and JSON literals would have to escape.
      const error = 'ECONNRESET: "peer" said {no}, \\ then ; left é';
      const retryAt = Date.now() + 60_000;
      const outcomes = [
        { kind: 'delivered', status: 204 },
        { kind: 'retry', retryAt, status: 503, error },
        { kind: 'retry', retryAt, error: 'ETIMEDOUT' },
        { kind: 'failed', status: 500, error: 'answered 500' },
      ] as const;
      await store.webhooks.finish(claimed.map((delivery, i) => ({ delivery, outcome: outcomes[i]! })));
      const listed = (await store.webhooks.listDeliveries({ limit: 10 })).sort((a, b) => a.plantId - b.plantId);
      assert.deepEqual(
        listed.map((d) => [d.status, d.attempts, d.lastStatus, d.lastError, d.nextAttemptAt?.getTime()]),
        [
          ['delivered', 1, 204, undefined, undefined],
          ['pending', 1, 503, error, retryAt],
          ['pending', 1, undefined, 'ETIMEDOUT', retryAt],
          ['failed', 1, 500, 'answered 500', undefined],
        ],
      );
      assert.deepEqual(await store.webhooks.claim(new Map([[endpoint.id, 10]]), 60_000), [], 'nothing is due or unleased');
    });

    it(
      'makes a delivery due in the millisecond its plant was written, so that a claim right after takes it',
      { skip: backend.name === 'sqlite' && "SQLite's triggers floor the clock, as Node does" },
      async () => {
        const db = await backend.freshDb();
        const store = await openStore({ db });
        try {
          const endpoint = await waitingDeliveries(store, []);
          // Plants written one after another, each delivery's due time compared with the clock read right after, in
          // whole milliseconds as a claim reads it: a clock rounded to the nearest millisecond, as PostgreSQL's
          // trigger read it before migration 0022, made the deliveries of a millisecond's second half due after it.
          await plainSql(
            db,
            `DO $$
            DECLARE due bigint; after bigint;
            BEGIN
              FOR i IN 1..200 LOOP
                INSERT INTO plants (name, owner_id, created_at) SELECT 'Plant ' || i, id, 0 FROM users WHERE name = 'alice';
                after := floor(extract(epoch FROM clock_timestamp()) * 1000);
                SELECT max(next_attempt_at) INTO due FROM webhook_deliveries;
                IF due > after THEN RAISE EXCEPTION 'plant % is due at %, after %', i, due, after; END IF;
              END LOOP;
            END $$`,
          );
          assert.equal((await store.webhooks.claim(new Map([[endpoint.id, 200]]), 60_000)).length, 200);
        } finally {
          await store.close();
        }
      },
    );

    it("leaves out a disabled endpoint's deliveries until it is enabled again", async () => {
      // No server: this test claims and answers the deliveries itself, as a dispatcher would.
      const store = await backend.open();
      const endpoint = await waitingDeliveries(store, [1, 2]);
      assert.equal((await store.webhooks.backlog()).pending, 2);
      const [first] = await store.webhooks.claim(new Map([[endpoint.id, 1]]), 60_000);
      await store.webhooks.finish([{ delivery: first!, outcome: { kind: 'gone', status: 410 } }]);
      assert.ok((await store.webhooks.listEndpoints())[0]!.disabledAt, 'the 410 disabled the endpoint');
      assert.equal((await store.webhooks.backlog()).pending, 0, 'the other delivery waits for enable, not in the backlog');
      await store.webhooks.enableEndpoint(endpoint.id);
      assert.equal((await store.webhooks.backlog()).pending, 1);
    });
  });

  describe(`webhook endpoints sharing the dispatcher [${backend.name}]`, { skip: backend.skip }, () => {
    const SHARED = { ...FAST, concurrency: 4, endpointConcurrency: 2, timeoutMs: 20_000, leaseMs: 60_000 };

    it('a receiver that never answers holds only its own share: the others are delivered meanwhile', { timeout: 60_000 }, async () => {
      const store = await backend.open();
      await seed(store, { users: [{ name: 'alice' }] });
      const hanging = await startReceiver(() => 'hold');
      const healthy = await startReceiver();
      await store.webhooks.addEndpoint(hanging.url, newWebhookSecret());
      await store.webhooks.addEndpoint(healthy.url, newWebhookSecret());
      const server = await startApp(store, { webhooks: SHARED });
      try {
        for (let id = 1; id <= 40; id++) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
        await until(
          () => healthy.received.length === 40,
          'every plant at the healthy receiver, while the other holds its requests',
          10_000,
        );
        assert.equal(hanging.received.length, 2, 'the hanging receiver holds its share of two, no more');
      } finally {
        await server.close();
        await hanging.close();
        await healthy.close();
      }
    });

    it(
      'a claimed delivery whose lease runs short while it waits is given back, not sent: two dispatchers never both send it',
      { timeout: 60_000 },
      async () => {
        const store = await backend.open();
        await seed(store, { users: [{ name: 'alice' }] });
        // A slow receiver: each claim queues more than can be sent inside its 2 s lease, one at a time.
        const receiver = await startReceiver(() => ({ status: 200, delayMs: 600 }));
        await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
        const options = { ...FAST, leaseMs: 2_000, timeoutMs: 1_000, concurrency: 1, endpointConcurrency: 1 };
        const first = await startApp(store, { webhooks: options });
        const second = await startApp(store, { webhooks: options });
        try {
          for (let id = 1; id <= 30; id++) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
          const ids = () => receiver.received.map((got) => String(got.headers['webhook-id']));
          await until(() => new Set(ids()).size === 30, 'every plant at the receiver', 40_000);
          // Sent past its lease, a queued delivery would also have been claimed and sent by the other dispatcher.
          assert.equal(ids().length, 30, 'no webhook-id twice');
        } finally {
          await first.close();
          await second.close();
          await receiver.close();
        }
      },
    );

    it(
      'a receiver that answers 2xx and then trickles its body has the event once: the attempt ends at its deadline',
      { timeout: 30_000 },
      async () => {
        const store = await backend.open();
        await seed(store, { users: [{ name: 'alice' }] });
        const receiver = await startReceiver(() => ({ status: 200, trickleMs: 100 }));
        await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
        // Each chunk within the timeout: only a deadline for the whole answer ends the attempt before its lease.
        const server = await startApp(store, { webhooks: { ...FAST, leaseMs: 2_000, timeoutMs: 1_000 } });
        try {
          await addPlant(store, { id: 1, name: 'Trickled', owner: 'alice', public: false });
          await until(() => receiver.received.length >= 1, 'the delivery');
          // Three leases: long enough for a delivery still being read to be claimed and sent again.
          await new Promise((resolve) => setTimeout(resolve, 6_000));
          assert.equal(receiver.received.length, 1, 'the same event sent again');
          const [delivery] = await store.webhooks.listDeliveries({ limit: 1 });
          assert.deepEqual([delivery?.status, delivery?.attempts], ['delivered', 1]);
        } finally {
          await server.close();
          await receiver.close();
        }
      },
    );

    it('an endpoint that keeps failing rests as a whole, then a probe brings it back', { timeout: 60_000 }, async () => {
      const store = await backend.open();
      await seed(store, { users: [{ name: 'alice' }] });
      const receiver = await startReceiver((n) => ({ status: n <= 6 ? 503 : 200 }));
      const endpoint = await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
      const server = await startApp(store, { webhooks: SHARED, captureLogs: true, logRequests: false });
      try {
        for (let id = 1; id <= 30; id++) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
        await new Promise((resolve) => setTimeout(resolve, 3_000));
        // Five failures in a row start a rest of 5 s; what was in flight then finishes, and nothing more is sent.
        assert.ok(receiver.received.length <= 5 + SHARED.endpointConcurrency, `${receiver.received.length} attempts during the rest`);
        const rest = server
          .logs()
          .split('\n')
          .filter((line) => line.includes('keeps failing'));
        assert.equal(rest.length, 1, 'one log line when the rest starts');
        assert.equal((JSON.parse(rest[0]!) as { endpointId: number }).endpointId, endpoint.id);
        await until(
          () => new Set(receiver.received.slice(6).map((got) => got.headers['webhook-id'])).size === 30,
          'every plant after the probe',
          30_000,
        );
      } finally {
        await server.close();
        await receiver.close();
      }
    });
  });

  describe(`webhook receivers' addresses [${backend.name}]`, { skip: backend.skip }, () => {
    it('sends nothing to a loopback receiver unless private receivers are allowed, and says why', { timeout: 30_000 }, async () => {
      const store = await backend.open();
      await seed(store, { users: [{ name: 'alice' }] });
      const receiver = await startReceiver();
      // Registered past the CLI's check of what is written (as plain SQL could): the sender judges each connection.
      const literal = await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
      const named = await store.webhooks.addEndpoint(receiver.url.replace('127.0.0.1', 'localhost'), newWebhookSecret());
      const server = await startApp(store, { webhooks: { ...FAST, allowPrivateTargets: false } });
      try {
        await addPlant(store, { id: 1, name: 'Kept inside', owner: 'alice', public: false });
        for (const endpoint of [literal, named]) {
          const newest = async () => (await store.webhooks.listDeliveries({ endpointId: endpoint.id, limit: 1 }))[0];
          const last = await eventually('the attempt recorded', newest, { until: (d) => (d?.attempts ?? 0) >= 1 });
          assert.match(String(last?.lastError), /^EWEBHOOKADDRESS: refused: .*(loopback|this machine)/);
        }
        assert.equal(receiver.received.length, 0);
      } finally {
        await server.close();
        await receiver.close();
      }
    });
  });

  describe(`webhook deliveries pushed by commits [${backend.name}]`, { skip: backend.skip }, () => {
    it('sends a new plant at once, without waiting for the next look at the outbox', { timeout: 30_000 }, async () => {
      const store = await backend.open();
      const { tokens } = await seed(store, { users: [{ name: 'alice' }] });
      const receiver = await startReceiver();
      const secret = newWebhookSecret();
      // Registered before the server starts: its first look sees the endpoint. The outbox is polled once a minute
      // here: only the commit itself can start the delivery in time.
      await store.webhooks.addEndpoint(receiver.url, secret);
      const server = await startApp(store, { webhooks: { ...FAST, pollMs: 60_000 } });
      try {
        for (const id of [1, 2, 3]) {
          const res = await rawRequest(
            server.url,
            '/plants',
            { ...bearer(tokens.alice!), 'content-type': 'application/json' },
            'POST',
            JSON.stringify({ id, name: `Pushed ${id}` }),
          );
          assert.equal(res.status, 200);
          await until(() => receiver.received.length === id, `plant ${id} delivered`, 5_000);
        }
        // Not through HTTP: the commit reaches the dispatcher through the change feed.
        await addPlant(store, { id: 4, name: 'Pushed 4', owner: 'alice', public: false });
        await until(() => receiver.received.length === 4, 'a plant written by the store directly, as the CLI and imports write', 5_000);
        assert.deepEqual(verify(secret, receiver.received[3]!), { id: 4, name: 'Pushed 4' });
      } finally {
        await server.close();
        await receiver.close();
      }
    });

    if (backend.name === 'postgres') {
      it("hears at once of another process's commit, before any client has called the instance", { timeout: 30_000 }, async () => {
        const db = await backend.freshDb();
        const store = await openStore({ db });
        const other = await openStore({ db });
        await seed(store, { users: [{ name: 'alice' }] });
        const receiver = await startReceiver();
        await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
        // Polled once a minute: only the other writer's announcement, through the change feed, can start it in time.
        const server = await startApp(store, { webhooks: { ...FAST, pollMs: 60_000 } });
        try {
          await new Promise((resolve) => setTimeout(resolve, 300));
          await addPlant(other, { id: 1, name: 'From elsewhere', owner: 'alice', public: false });
          await until(() => receiver.received.length === 1, "the other writer's plant", 3_000);
        } finally {
          await server.close();
          await receiver.close();
          await other.close();
          await store.close();
        }
      });
    }

    it("a commit's deliveries are claimed without a look: the endpoints are the last look's", { timeout: 30_000 }, async () => {
      const store = await backend.open();
      await seed(store, { users: [{ name: 'alice' }] });
      const receiver = await startReceiver();
      await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
      let looks = 0;
      const dueEndpoints = store.webhooks.dueEndpoints.bind(store.webhooks);
      store.webhooks.dueEndpoints = () => ((looks += 1), dueEndpoints());
      const server = await startApp(store, { webhooks: { ...FAST, pollMs: 60_000 } });
      try {
        // The change feed follows the log once its first read is back: commits before it wait for the poll.
        await until(() => looks === 1 && store.changes.sync(), 'the first look, and the change feed following');
        for (let id = 1; id <= 5; id++) {
          await addPlant(store, { id, name: `Claimed ${id}`, owner: 'alice', public: false });
          await until(() => receiver.received.length === id, `plant ${id} delivered`, 5_000);
        }
        assert.equal(looks, 1, 'no look after the first: each commit claimed at once');
      } finally {
        await server.close();
        await receiver.close();
      }
    });

    it('with no endpoint enabled, commits ask for no look at the outbox; the poll finds a new endpoint', { timeout: 30_000 }, async () => {
      const store = await backend.open();
      await seed(store, { users: [{ name: 'alice' }] });
      let looks = 0;
      const dueEndpoints = store.webhooks.dueEndpoints.bind(store.webhooks);
      store.webhooks.dueEndpoints = () => ((looks += 1), dueEndpoints());
      const server = await startApp(store, { webhooks: { ...FAST, pollMs: 300 } });
      const receiver = await startReceiver();
      try {
        await until(() => looks >= 1, 'the first look');
        const before = looks;
        const started = Date.now();
        for (let id = 1; id <= 50; id++) await addPlant(store, { id, name: `Unheard ${id}`, owner: 'alice', public: false });
        const polls = Math.ceil((Date.now() - started) / 300) + 1;
        assert.ok(looks - before <= polls, `${looks - before} looks for 50 commits in ${Date.now() - started} ms: only the polls`);
        await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
        await addPlant(store, { id: 51, name: 'Heard', owner: 'alice', public: false });
        await until(() => receiver.received.length === 1, 'the plant after the endpoint, by the next poll', 5_000);
      } finally {
        await server.close();
        await receiver.close();
      }
    });
  });
}
