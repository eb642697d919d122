import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { WebhookOutbox } from '../../src/store/webhook-outbox.js';
import { DISPATCHER_DEFAULTS, WebhookDispatcher } from '../../src/webhooks/dispatcher.js';
import { eventually } from '../helpers/assertions.js';

describe('the webhook dispatcher while its outbox cannot be read', () => {
  it('warns once for each reason, not at every poll, and again after a read that succeeded', async () => {
    let failure: string | undefined = 'database unavailable';
    let reads = 0;
    const outbox = {
      dueEndpoints: async () => {
        reads++;
        if (failure !== undefined) throw new Error(failure);
        return { due: [], anyEnabled: true };
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
