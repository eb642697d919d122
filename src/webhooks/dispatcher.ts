import { eventBody } from './event-body.js';
import type { AttemptOutcome, ClaimedDelivery, WebhookOutbox } from '../store/webhook-outbox.js';
import { EndpointShares, type EndpointShare } from './endpoint-share.js';
import { OutcomeRecorder, type WarningLog } from './outcome-recorder.js';
import { nextAttemptAt } from './retry-schedule.js';
import { WebhookSender } from './sender.js';
import { signatureHeader } from './signing.js';

export interface DispatcherOptions {
  /** How often the outbox is looked at, whatever the commits (see nudge): what another process wrote is found so. */
  pollMs: number;
  /** How long a claimed delivery is this process's: past it (a crash), another process delivers it. */
  leaseMs: number;
  /** An attempt's deadline: without a status by then it has failed; a body still arriving then is cut off (see WebhookSender). */
  timeoutMs: number;
  /** Deliveries in flight at once, per process. */
  concurrency: number;
  /** Deliveries to one endpoint in flight at once, per process: a slow endpoint holds no more than this. */
  endpointConcurrency: number;
  /** Whether receivers at loopback, private and other non-public addresses are sent to (never link-local ones). */
  allowPrivateTargets: boolean;
  /** Told each attempt's outcome (metrics). */
  onAttempt?: (outcome: AttemptOutcome['kind']) => void;
}

/** How long a delivered or failed event stays listed (`webhooks deliveries`, `retry`) before it is pruned. */
export const KEPT_MS = 7 * 24 * 3_600_000;
const PRUNE_EVERY_MS = 10 * 60_000;
/** The least time between two claims that commits asked for (see nudge). */
const NUDGE_GAP_MS = 5;

/**
 * What a claim asks for: `look` first finds which endpoints have deliveries due (the poll's, and the first); `known`
 * claims at once for the endpoints the last look found enabled (a commit's: its deliveries are due now); `refill`
 * claims for the endpoints running low (see claimMore).
 */
type ClaimKind = 'look' | 'known' | 'refill';

export const DISPATCHER_DEFAULTS: DispatcherOptions = {
  pollMs: 500,
  leaseMs: 60_000,
  timeoutMs: 15_000,
  concurrency: 64,
  endpointConcurrency: 8,
  allowPrivateTargets: false,
};

/**
 * Delivers the outbox's new-plant events to their endpoints, in the background of a serving process: the API
 * never waits for a receiver. At most `concurrency` requests are in flight, and at most `endpointConcurrency` to one
 * endpoint, so that a slow receiver holds only its own share, never a request of the API nor another endpoint's
 * slots; free slots are shared out among the endpoints with deliveries due, in turn. Claims and outcomes are
 * written in batches: a claim takes what every endpoint has room for, and the outcomes that finish while one
 * statement records others are recorded together by the next.
 */
export class WebhookDispatcher {
  private timer: NodeJS.Timeout | undefined;
  private readonly inFlight = new Map<Promise<void>, ClaimedDelivery>();
  private readonly pruning: OutboxPruning;
  private claiming: Promise<void> | undefined;
  private lastClaimAt = 0;
  private nudgeTimer: NodeJS.Timeout | NodeJS.Immediate | undefined;
  /**
   * Asked for during a claim, to follow it: a claim for the endpoints running low, a commit's (see nudge), or a
   * poll's look, so that a busy drain still finds new endpoints. Each claims what the ones before it would.
   */
  private claimAgain: 'no' | 'refill' | 'nudged' | 'look' = 'no';
  /**
   * The endpoints the last look found enabled (undefined before the first): a commit's claim asks for these without
   * looking again, and with none enabled commits ask for no claim (the poll finds a new endpoint).
   */
  private enabled: readonly number[] | undefined;
  /** Why the last claim failed, while claims fail: each reason is logged once, not at every poll. */
  private claimFailure: string | undefined;
  private readonly shares: EndpointShares;
  private readonly outcomes: OutcomeRecorder;
  private stopped = false;
  private readonly sender: WebhookSender;

  constructor(
    private readonly outbox: WebhookOutbox,
    private readonly log: WarningLog,
    private readonly options: DispatcherOptions = DISPATCHER_DEFAULTS,
  ) {
    this.sender = new WebhookSender(options.allowPrivateTargets, options.timeoutMs);
    if (options.leaseMs <= options.timeoutMs) throw new Error('a webhook lease must be longer than the timeout of an attempt');
    this.shares = new EndpointShares(Math.min(options.endpointConcurrency, options.concurrency));
    this.outcomes = new OutcomeRecorder(outbox, log);
    this.pruning = new OutboxPruning(outbox, log, () => !this.stopped);
  }

  start(): void {
    this.timer = setInterval(() => this.claimMore(), this.options.pollMs);
    this.timer.unref();
    this.claimMore();
  }

  /**
   * A plant was committed, by this process or (as its change feed tells) by another: its deliveries are claimed now
   * rather than at the next poll, which stays as the backstop. The claim asks for the endpoints the last look found
   * enabled, without a look of its own: a round trip less between a commit and its arrival. An endpoint added since
   * is found by the next poll's look. Under a flood of writes these claims are at least NUDGE_GAP_MS apart, and
   * never two at a time.
   */
  nudge(): void {
    // Before start() nothing is claimed; after stop() nothing more.
    if (this.stopped || this.timer === undefined || this.nudgeTimer !== undefined || this.enabled?.length === 0) return;
    if (this.claiming !== undefined) {
      if (this.claimAgain !== 'look') this.claimAgain = 'nudged';
      return;
    }
    const claim = () => {
      this.nudgeTimer = undefined;
      this.claimMore('known');
    };
    const wait = this.lastClaimAt + NUDGE_GAP_MS - Date.now();
    // A timer of 0 waits a millisecond: past the gap, the claim goes once this turn of the event loop is done.
    this.nudgeTimer = wait > 0 ? setTimeout(claim, wait).unref() : setImmediate(claim);
  }

  /** Stops claiming and abandons deliveries in flight (their leases run out, and another attempt follows). */
  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    clearTimeout(this.nudgeTimer as NodeJS.Timeout | undefined);
    clearImmediate(this.nudgeTimer as NodeJS.Immediate | undefined);
    this.sender.abortAll();
    await this.claiming;
    await this.pruning.settled();
    const abandoned = [...this.inFlight.values(), ...[...this.shares.all()].flatMap((share) => share.queued.splice(0))];
    await Promise.all(this.inFlight.keys());
    await this.outcomes.settled();
    await giveBack(this.outbox, this.log, abandoned);
  }

  /**
   * Claims due deliveries for the free slots of every endpoint, and starts them; one claim at a time. A look first
   * finds which endpoints have deliveries due; a commit's claim (`known`) asks for every endpoint the last look found
   * enabled; a refill claims at once for the endpoints whose last claim got all it asked for and that are running
   * low. The last two are a statement fewer.
   */
  private claimMore(kind: ClaimKind = 'look'): void {
    if (this.stopped) return;
    if (this.claiming !== undefined) {
      if (kind === 'look') this.claimAgain = 'look';
      else if (kind === 'known' && this.claimAgain !== 'look') this.claimAgain = 'nudged';
      else if (this.claimAgain === 'no') this.claimAgain = 'refill';
      return;
    }
    this.lastClaimAt = Date.now();
    this.claimAgain = 'no';
    this.pruning.startIfDue();
    this.claiming = Promise.resolve()
      .then(async () => {
        if (kind !== 'look') return kind === 'refill' ? this.shares.runningLow() : (this.enabled ?? []);
        const lookedAt = Date.now();
        const { due, enabled } = await this.outbox.dueEndpoints();
        this.enabled = enabled;
        // An endpoint another process disabled or removed is sent nothing more (its queue is given back by pump).
        this.shares.looked(enabled, lookedAt);
        return due;
      })
      .then(async (due) => {
        const queued = [...this.shares.all()].reduce((sum, share) => sum + share.queued.length, 0);
        const quotas = this.shares.shareOut(due, this.shares.claimable(this.options.concurrency) - this.inFlight.size - queued);
        const claimed = await this.outbox.claim(quotas, this.options.leaseMs);
        const got = new Map<number, number>();
        for (const delivery of claimed) got.set(delivery.endpointId, (got.get(delivery.endpointId) ?? 0) + 1);
        for (const [endpoint, quota] of quotas) this.shares.of(endpoint).moreDue = got.get(endpoint) === quota;
        for (const delivery of claimed) this.shares.of(delivery.endpointId).queued.push(delivery);
        // Every endpoint: one whose rest has ended may have deliveries a claim queued while it rested.
        for (const share of this.shares.all()) this.pump(share);
        this.claimFailure = undefined;
      })
      .catch((err: unknown) => {
        const reason = (err as Error).message;
        if (reason === this.claimFailure) return;
        this.claimFailure = reason;
        this.log.warn({ err }, 'webhook outbox not readable; trying again (said again only for another reason)');
      })
      .finally(() => {
        this.claiming = undefined;
        // A poll, a commit or a free slot during the claim may have made due what the claim's query did not see.
        if (this.claimAgain === 'look') this.claimMore('look');
        else if (this.claimAgain === 'nudged') this.nudge();
        else if (this.claimAgain === 'refill') this.claimMore('refill');
      });
  }

  /**
   * Sends the endpoint's queued deliveries while it has room, and the process too. One whose lease would end before
   * an attempt could (a slow endpoint's queue moves slowly) is given back to the outbox instead: another process may
   * take it over once the lease is past, and must not find it still being sent. A disabled endpoint's are all given
   * back, unattempted: they wait in the outbox, pending, for `webhooks enable`.
   */
  private pump(share: EndpointShare): void {
    if (share.disabled) {
      const queued = share.queued.splice(0);
      if (queued.length > 0) void giveBack(this.outbox, this.log, queued);
      return;
    }
    const now = Date.now();
    const expiring: ClaimedDelivery[] = [];
    while (share.queued.length > 0 && this.inFlight.size < this.options.concurrency && share.mayStart(now)) {
      const delivery = share.queued.shift()!;
      if (delivery.leaseUntil - now > this.options.timeoutMs) this.send(delivery, share);
      else expiring.push(delivery);
    }
    if (expiring.length > 0) void giveBack(this.outbox, this.log, expiring);
  }

  private send(delivery: ClaimedDelivery, share: EndpointShare): void {
    share.inFlight += 1;
    const running = this.deliver(delivery, share).finally(() => {
      this.inFlight.delete(running);
      share.inFlight -= 1;
      if (this.stopped) return;
      this.pump(share);
      // A slot of the process's is free: another endpoint's queue may have waited for it.
      if (this.inFlight.size < this.options.concurrency) for (const other of this.shares.all()) this.pump(other);
      // Claims come in batches: once half of what waits for the endpoint is sent, if more may be due.
      if (share.runningLow) this.claimMore('refill');
    });
    this.inFlight.set(running, delivery);
  }

  private async deliver(delivery: ClaimedDelivery, share: EndpointShare): Promise<void> {
    const outcome = await this.attempt(delivery);
    // Cut off by stop(): not an attempt of the receiver's; the delivery is released for another process.
    if (this.stopped && outcome.kind !== 'delivered') return;
    this.options.onAttempt?.(outcome.kind);
    if (outcome.kind === 'delivered') share.succeeded();
    // Gone is no success: the endpoint is disabled here at once, and no look that may predate the record undoes it.
    else if (outcome.kind === 'gone') share.disable(Infinity);
    else {
      const rest = share.failed(Date.now());
      if (rest > 0) {
        // What waits for a resting endpoint goes back to the outbox, due: another process may send it meanwhile.
        const queued = share.queued.splice(0);
        if (queued.length > 0) void giveBack(this.outbox, this.log, queued);
        this.log.warn(
          { endpointId: delivery.endpointId, restMs: rest },
          'webhook endpoint keeps failing; it is given no delivery until a probe after the rest succeeds',
        );
      }
    }
    if (outcome.kind !== 'delivered') this.report(delivery, outcome);
    this.outcomes.record({ delivery, outcome });
    if (outcome.kind === 'gone') void this.outcomes.settled().then(() => share.disabledFrom(Date.now()));
  }

  /** One log line for each attempt that did not deliver: an operator sees a failing receiver without asking. */
  private report(delivery: ClaimedDelivery, outcome: Exclude<AttemptOutcome, { kind: 'delivered' }>): void {
    const details = {
      endpointId: delivery.endpointId,
      eventId: delivery.eventId,
      attempt: delivery.attempts + 1,
      ...('status' in outcome && outcome.status !== undefined ? { status: outcome.status } : {}),
      ...('error' in outcome && outcome.error !== undefined ? { error: outcome.error } : {}),
    };
    if (outcome.kind === 'retry') {
      this.log.warn({ ...details, retryAt: new Date(outcome.retryAt).toISOString() }, 'webhook delivery failed; it is tried again later');
    } else if (outcome.kind === 'failed') {
      this.log.warn(details, 'webhook delivery failed for good: no attempt left (webhooks retry sends it again)');
    } else {
      this.log.warn(details, 'webhook endpoint answered 410 Gone and is disabled (webhooks enable turns it back on)');
    }
  }

  private async attempt(delivery: ClaimedDelivery): Promise<AttemptOutcome> {
    const body = eventBody(delivery.event);
    const msgId = delivery.messageId;
    const timestamp = new Date();
    const attempts = delivery.attempts + 1;
    const retry = (status?: number, error?: string, retryAfter?: string | null): AttemptOutcome => {
      const at = nextAttemptAt(attempts, Date.now(), retryAfter);
      return at === undefined ? { kind: 'failed', status, error } : { kind: 'retry', retryAt: at, status, error };
    };
    try {
      const headers = {
        'content-type': 'application/json',
        'webhook-id': msgId,
        'webhook-timestamp': String(Math.floor(timestamp.getTime() / 1000)),
        'webhook-signature': signatureHeader(delivery.secrets, msgId, timestamp, body),
        'user-agent': 'plantstore-webhooks',
      };
      // A redirect is not followed (the sender never does): it could lead a delivery (and its signature) anywhere.
      const res = await this.sender.post(delivery.url, headers, body);
      if (res.status >= 200 && res.status < 300) return { kind: 'delivered', status: res.status };
      if (res.status === 410) return { kind: 'gone', status: 410 };
      const retryAfter = res.headers['retry-after'];
      return retry(res.status, `answered ${res.status}`, typeof retryAfter === 'string' ? retryAfter : null);
    } catch (err) {
      return retry(undefined, failureReason(err));
    }
  }
}

/**
 * Every PRUNE_EVERY_MS, one pass over the outbox forgetting what it no longer needs (WebhookOutbox.prune), one pass at
 * a time. Claims do not wait for it: a pass over a large outbox takes many steps.
 */
class OutboxPruning {
  private startedAt = 0;
  private running: Promise<void> | undefined;

  constructor(
    private readonly outbox: WebhookOutbox,
    private readonly log: WarningLog,
    /** Whether a pass under way goes on (the dispatcher has not stopped). */
    private readonly goOn: () => boolean,
  ) {}

  startIfDue(): void {
    const now = Date.now();
    if (this.running !== undefined || now - this.startedAt < PRUNE_EVERY_MS) return;
    this.startedAt = now;
    this.running = this.outbox
      .prune(now - KEPT_MS, this.goOn)
      .then(() => undefined)
      .catch((err: unknown) => this.log.warn({ err }, 'webhook outbox not pruned; the next pass tries again'))
      .finally(() => (this.running = undefined));
  }

  /** Resolves once the pass under way, if any, has ended. */
  async settled(): Promise<void> {
    await this.running;
  }
}

/** Lets go of claimed deliveries this process will not send: they are due again for any process. */
function giveBack(outbox: WebhookOutbox, log: WarningLog, deliveries: readonly ClaimedDelivery[]): Promise<void> {
  return outbox.release(deliveries).catch((err: unknown) => log.warn({ err }, 'webhook deliveries not released'));
}

/** What went wrong, by its class: the error's code (ECONNREFUSED, ECONNRESET, …) and its message. */
function failureReason(err: unknown): string {
  const error = err as NodeJS.ErrnoException;
  return error.code === undefined || error.message.includes(error.code) ? error.message : `${error.code}: ${error.message}`;
}
