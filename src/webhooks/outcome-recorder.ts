import type { FinishedAttempt, WebhookOutbox } from '../store/webhook-outbox.js';

/** Where the dispatcher and its recorder report what they cannot do (the app's logger). */
export interface WarningLog {
  warn(details: object, message: string): void;
}

/** Outcomes recorded in one statement at most. */
const OUTCOMES_PER_STATEMENT = 500;
/**
 * The least time between the starts of two statements: outcomes that finish meanwhile wait for the next one, so that
 * a busy dispatcher writes one statement (and one commit) for many deliveries. A crash in the gap sends those
 * deliveries again once their leases end: at least once, as for any crash during a delivery. What waits is only the
 * record of an outcome (`webhooks deliveries`), never a delivery.
 */
const GAP_MS = 25;

/**
 * Records attempts' outcomes in the outbox in batches: what finishes while one statement records others, or within
 * GAP_MS of the last one's start, is recorded together by the next.
 */
export class OutcomeRecorder {
  private readonly queued: FinishedAttempt[] = [];
  private recording: Promise<void> | undefined;
  private lastStart = -Infinity;

  constructor(
    private readonly outbox: WebhookOutbox,
    private readonly log: WarningLog,
  ) {}

  record(attempt: FinishedAttempt): void {
    this.queued.push(attempt);
    this.recording ??= this.recordQueued();
  }

  /** Resolves once every outcome recorded so far is written (or has failed to be). */
  async settled(): Promise<void> {
    await this.recording;
  }

  private async recordQueued(): Promise<void> {
    while (this.queued.length > 0) {
      const wait = this.lastStart + GAP_MS - performance.now();
      if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
      this.lastStart = performance.now();
      const batch = this.queued.splice(0, OUTCOMES_PER_STATEMENT);
      try {
        await this.outbox.finish(batch);
      } catch (err) {
        // The leases run out and the deliveries are tried again: at least once, never lost.
        this.log.warn({ err, deliveries: batch.length }, 'webhook delivery outcomes not recorded');
      }
    }
    this.recording = undefined;
  }
}
