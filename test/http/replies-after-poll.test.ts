import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { FastifyReply } from 'fastify';
import { RepliesAfterPoll } from '../../src/http/replies-after-poll.js';

// The batching itself; that pipelined requests still get their own pages in order is tested over HTTP (plants.test.ts).

function fakeReply(events: string[], name: string): FastifyReply {
  return {
    log: { error: () => events.push(`${name} logged`) },
    raw: { destroy: () => events.push(`${name} destroyed`) },
  } as unknown as FastifyReply;
}

describe('replies sent after the poll', () => {
  it('sends nothing at once, then every queued reply in the order queued', async () => {
    const events: string[] = [];
    const replies = new RepliesAfterPoll();
    for (const name of ['a', 'b', 'c']) replies.send(fakeReply(events, name), () => events.push(`${name} sent`));
    assert.deepEqual(events, []);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(events, ['a sent', 'b sent', 'c sent']);
  });

  it('a send that throws closes its own connection and holds back none of the others', async () => {
    const events: string[] = [];
    const replies = new RepliesAfterPoll();
    replies.send(fakeReply(events, 'a'), () => events.push('a sent'));
    replies.send(fakeReply(events, 'b'), () => {
      throw new Error('boom');
    });
    replies.send(fakeReply(events, 'c'), () => events.push('c sent'));
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(events, ['a sent', 'b logged', 'b destroyed', 'c sent']);
    // The next poll's replies start a batch of their own.
    replies.send(fakeReply(events, 'd'), () => events.push('d sent'));
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(events.at(-1), 'd sent');
  });
});
