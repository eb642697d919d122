import type { FastifyReply } from 'fastify';

/**
 * Replies sent back to back once the event loop has run every request that arrived in the same poll
 * (setImmediate callbacks run right after the poll phase), as Redis writes its replies just before its loop
 * sleeps again.
 *
 * Why: a response written to a peer that sleeps waiting for it makes the kernel wake the peer inside the write,
 * on this process's CPU time. For a client on the same host (a local proxy or sidecar, a load generator) that is
 * most of a response's kernel time, and more on a virtual machine, where waking an idle CPU is an interrupt
 * through the hypervisor. Written one at a time between requests, nearly every response pays it; written together,
 * the first wakes the peer and the others find it running. A response waits while the rest of its poll's requests
 * are handled; a lone one waits one turn of the loop. Measurements: docs/performance.md.
 */
export class RepliesAfterPoll {
  private queued: Array<{ reply: FastifyReply; send: () => void }> = [];
  private readonly sendQueued = (): void => {
    const batch = this.queued;
    this.queued = [];
    for (const { reply, send } of batch) {
      try {
        send();
      } catch (err) {
        // Fastify answers a failing hook itself; whatever still throws must not hold back the rest of the batch.
        reply.log.error({ err }, 'sending a reply failed');
        reply.raw.destroy();
      }
    }
  };

  /** Runs `send` (which sends `reply`) after the current poll's other requests have been handled. */
  send(reply: FastifyReply, send: () => void): void {
    if (this.queued.length === 0) setImmediate(this.sendQueued);
    this.queued.push({ reply, send });
  }
}
