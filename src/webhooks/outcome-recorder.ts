import type { FinishedAttempt, WebhookOutbox } from '../store/webhook-outbox.js';
import type { WarningLog } from './dispatcher.js';

/** Outcomes recorded in one statement at most. */
const OUTCOMES_PER_STATEMENT = 500;

/**
 * Records attempts' outcomes in the outbox in batches: what finishes while one statement records others is recorded
 * together by the next, so that a busy dispatcher writes one statement for many deliveries and an idle one is not
 * kept waiting.
 */
export class OutcomeRecorder {
  private readonly queued: FinishedAttempt[] = [];
  private recording: Promise<void> | undefined;

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
