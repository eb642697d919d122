import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import type { WebhookOutbox } from '../../src/store/webhook-outbox.js';
import { DISPATCHER_DEFAULTS, WebhookDispatcher } from '../../src/webhooks/dispatcher.js';
import { newWebhookSecret } from '../../src/webhooks/signing.js';
import { eventually } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { addPlant, seed } from '../helpers/http-app.js';
import { startReceiver } from '../helpers/webhook-receiver.js';

after(() => cleanupBackends());

describe('the webhook dispatcher while its outbox cannot be read', () => {
  it('warns once for each reason, not at every poll, and again after a read that succeeded', async () => {
    let failure: string | undefined = 'database unavailable';
    let reads = 0;
    const outbox = {
      dueEndpoints: async () => {
        reads++;
        if (failure !== undefined) throw new Error(failure);
        return { due: [], enabled: [] };
      },
      claim: async () => [],
      prune: async () => 0,
      release: async () => undefined,
    } as unknown as WebhookOutbox;
    const warned: string[] = [];
    const log = { warn: (fields: { err?: Error }) => void warned.push(fields.err?.message ?? '') };
    const dispatcher = new WebhookDispatcher(outbox, log, { ...DISPATCHER_DEFAULTS, pollMs: 5 });
    /** Waits for `polls` more reads of the outbox. */
    const polls = async (polls: number) => {
      const from = reads;
      await eventually('the outbox is read', () => reads, { until: (n) => n >= from + polls });
    };
    dispatcher.start();
    try {
      await polls(10);
      assert.deepEqual(warned, ['database unavailable']);
      failure = 'the database file was replaced';
      await polls(5);
      assert.deepEqual(warned, ['database unavailable', 'the database file was replaced']);
      failure = undefined;
      await polls(2);
      failure = 'the database file was replaced';
      await polls(5);
      assert.deepEqual(warned, ['database unavailable', 'the database file was replaced', 'the database file was replaced']);
    } finally {
      await dispatcher.stop();
    }
  });
});

for (const backend of BACKENDS) {
  describe(`the webhook dispatcher and an endpoint gone or removed [${backend.name}]`, { skip: backend.skip }, () => {
    const PLANTS = 120;
    const OPTIONS = {
      ...DISPATCHER_DEFAULTS,
      pollMs: 20,
      leaseMs: 5_000,
      timeoutMs: 2_000,
      concurrency: 16,
      endpointConcurrency: 4,
      allowPrivateTargets: true,
    };

    it('sends no more than was in flight, and leaves the rest pending until the endpoint is enabled', { timeout: 60_000 }, async () => {
      const store = await backend.open();
      let status = 410;
      const receiver = await startReceiver(() => ({ status }));
      await seed(store, { users: [{ name: 'alice' }] });
      const endpoint = await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
      for (let id = 1; id <= PLANTS; id++) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
      const dispatcher = new WebhookDispatcher(store.webhooks, { warn: () => undefined }, OPTIONS);
      const deliveries = async () => store.webhooks.listDeliveries({ endpointId: endpoint.id, limit: PLANTS + 1 });
      const count = (list: Awaited<ReturnType<typeof deliveries>>, of: string) => list.filter((d) => d.status === of).length;
      dispatcher.start();
      try {
        await eventually('the 410 disables the endpoint', async () => (await store.webhooks.listEndpoints())[0]?.disabledAt !== undefined);
        // Polls and refills enough to send the backlog, were it still sent.
        await new Promise((resolve) => setTimeout(resolve, 20 * OPTIONS.pollMs));
        const sent = receiver.received.length;
        assert.ok(sent <= OPTIONS.endpointConcurrency, `${sent} requests to the gone endpoint: only those in flight`);
        const settled = await eventually('no delivery held', deliveries, {
          until: (list) => count(list, 'pending') === PLANTS - sent && count(list, 'failed') === sent,
        });
        assert.ok(
          settled.filter((d) => d.status === 'pending').every((d) => d.attempts === 0),
          'the deliveries not sent keep their attempts',
        );
        assert.equal(receiver.received.length, sent, 'nothing more sent while the endpoint is disabled');

        status = 200;
        assert.equal(await store.webhooks.enableEndpoint(endpoint.id), true);
        await eventually('the pending deliveries delivered after enable', deliveries, {
          until: (list) => count(list, 'delivered') === PLANTS - sent,
          timeoutMs: 30_000,
        });
        assert.equal(receiver.received.length, PLANTS, 'each delivery sent once');
      } finally {
        await dispatcher.stop();
        await receiver.close();
        await store.close();
      }
    });

    it('sends nothing more of what it queued for an endpoint another process removed', { timeout: 60_000 }, async () => {
      const store = await backend.open();
      const receiver = await startReceiver(() => ({ status: 200, delayMs: 50 }));
      await seed(store, { users: [{ name: 'alice' }] });
      const endpoint = await store.webhooks.addEndpoint(receiver.url, newWebhookSecret());
      for (let id = 1; id <= PLANTS; id++) await addPlant(store, { id, name: `Plant ${id}`, owner: 'alice', public: false });
      const dispatcher = new WebhookDispatcher(store.webhooks, { warn: () => undefined }, OPTIONS);
      dispatcher.start();
      try {
        await eventually('the first deliveries received', () => receiver.received.length >= OPTIONS.endpointConcurrency);
        await store.webhooks.removeEndpoint(endpoint.id);
        const atRemoval = receiver.received.length;
        await new Promise((resolve) => setTimeout(resolve, 40 * OPTIONS.pollMs));
        // In flight at the removal, and what was started before the next look: a round or two, not the queue.
        assert.ok(
          receiver.received.length <= atRemoval + 2 * OPTIONS.endpointConcurrency,
          `${receiver.received.length - atRemoval} requests after the removal`,
        );
      } finally {
        await dispatcher.stop();
        await receiver.close();
        await store.close();
      }
    });
  });
}
