import type { ClaimedDelivery } from '../store/webhook-outbox.js';

/** Consecutive failures after which an endpoint rests as a whole instead of being given deliveries one by one. */
const FAILURES_BEFORE_REST = 5;
/** The first rest; each failed probe after it doubles the rest, up to MAX_REST_MS. */
const FIRST_REST_MS = 5_000;
const MAX_REST_MS = 5 * 60_000;
/**
 * Rounds of an endpoint's share that wait claimed, behind the round in flight: enough that a busy endpoint's next
 * claim commits while half of them are still to send, so that its slots do not stand empty waiting for the claim,
 * and that each claim (a commit, with its flush to disk) takes many deliveries: on a slow machine a busy drain's
 * commits cost more than its sends. A slow endpoint's deliveries that would outlast their lease in the queue are
 * given back (see the dispatcher's pump), so depth does not strand them.
 */
const QUEUED_ROUNDS = 16;

/**
 * One endpoint's share of a dispatcher: how many of its deliveries are in flight (never more than `cap`, so that a
 * slow or dead endpoint holds only its own slots), and a circuit breaker. After FAILURES_BEFORE_REST failures in a
 * row the endpoint rests (it is given nothing); then one delivery probes it: a success closes the breaker, a failure
 * rests it again, twice as long. Its deliveries meanwhile stay due in the outbox, their attempts unspent. Each
 * process keeps its own breaker: what one learns about an endpoint, the others learn from their own attempts.
 */
export class EndpointShare {
  inFlight = 0;
  /**
   * Claimed and not yet sent: up to `depth` rounds of `cap` deliveries, so that claims come in batches and the next
   * claim's commit is waited for while deliveries are still being sent. One whose lease has run short by the time
   * its turn comes is not sent but given back (see the dispatcher's pump).
   */
  readonly queued: ClaimedDelivery[] = [];
  /** The last claim got all it asked for: more may be due. */
  moreDue = false;
  /**
   * Whether the endpoint is disabled, as far as this process knows: it answered 410 Gone, or a look found it disabled
   * or removed. Nothing is claimed for it or sent to it; what waits for it goes back to the outbox, pending.
   */
  disabled = false;
  /**
   * The earliest start of a look (epoch ms) that, finding the endpoint enabled, enables it here again: a look that
   * started earlier may have read the outbox before the endpoint was disabled there.
   */
  private enabledByLooksFrom = 0;
  private failures = 0;
  private rests = 0;
  private restUntil = 0;

  constructor(
    readonly cap: number,
    readonly depth: number,
  ) {}

  /** How many more deliveries may be claimed for the endpoint now. */
  room(now: number): number {
    if (this.disabled) return 0;
    if (this.failures < FAILURES_BEFORE_REST) return (1 + this.depth) * this.cap - this.inFlight - this.queued.length;
    // Resting, or the probe already claimed: nothing; else the probe.
    return now < this.restUntil || this.inFlight > 0 || this.queued.length > 0 ? 0 : 1;
  }

  /** Whether so few wait that the next claim should be made now (if more may be due). */
  get runningLow(): boolean {
    return !this.disabled && this.moreDue && this.queued.length <= (this.depth * this.cap) / 2;
  }

  /** Whether one more delivery may be sent to the endpoint now. */
  mayStart(now: number): boolean {
    if (this.disabled) return false;
    if (this.failures < FAILURES_BEFORE_REST) return this.inFlight < this.cap;
    return now >= this.restUntil && this.inFlight === 0;
  }

  /**
   * The endpoint is disabled; only a look started at `from` (epoch ms) or later enables it here again (Infinity: none,
   * until `disabledFrom` says from when).
   */
  disable(from: number): void {
    this.enabledByLooksFrom = this.disabled ? Math.max(this.enabledByLooksFrom, from) : from;
    this.disabled = true;
    this.moreDue = false;
  }

  /** Looks started at `from` (epoch ms) or later may enable the endpoint again: its disabling is in the outbox. */
  disabledFrom(from: number): void {
    if (this.disabled && this.enabledByLooksFrom === Infinity) this.enabledByLooksFrom = from;
  }

  /** A look started at `lookedAt` (epoch ms) found the endpoint enabled. */
  foundEnabled(lookedAt: number): void {
    if (this.disabled && lookedAt >= this.enabledByLooksFrom) this.disabled = false;
  }

  succeeded(): void {
    this.failures = 0;
    this.rests = 0;
    this.restUntil = 0;
  }

  /**
   * Counts a failure; resolves to the rest it starts (ms), or 0 if it starts none. Attempts that were in flight when
   * a rest started and fail during it do not lengthen it: only a failed probe does.
   */
  failed(now: number): number {
    this.failures += 1;
    if (this.failures < FAILURES_BEFORE_REST || now < this.restUntil) return 0;
    this.rests += 1;
    const rest = Math.min(MAX_REST_MS, FIRST_REST_MS * 2 ** (this.rests - 1));
    this.restUntil = now + rest;
    return rest;
  }
}

/** The shares of the endpoints a dispatcher sends to, and how its free slots are shared out among them. */
export class EndpointShares {
  private readonly shares = new Map<number, EndpointShare>();
  /** Where the next sharing out starts, so that no endpoint is always served first. */
  private turn = 0;

  constructor(
    private readonly cap: number,
    /** How many rounds of `cap` deliveries may wait, queued, for each endpoint. */
    private readonly depth = QUEUED_ROUNDS,
  ) {}

  of(endpoint: number): EndpointShare {
    let share = this.shares.get(endpoint);
    if (share === undefined) {
      share = new EndpointShare(this.cap, this.depth);
      this.shares.set(endpoint, share);
    }
    return share;
  }

  /** How many deliveries a process sending `concurrency` at once may hold, in flight and queued. */
  claimable(concurrency: number): number {
    return (1 + this.depth) * concurrency;
  }

  /** The endpoints running low (EndpointShare.runningLow). */
  runningLow(): number[] {
    return [...this.shares].filter(([, share]) => share.runningLow).map(([endpoint]) => endpoint);
  }

  /** What a look started at `lookedAt` (epoch ms) found: the endpoints `enabled`; any other is disabled or removed. */
  looked(enabled: readonly number[], lookedAt: number): void {
    const found = new Set(enabled);
    for (const [endpoint, share] of this.shares) {
      if (found.has(endpoint)) share.foundEnabled(lookedAt);
      else share.disable(lookedAt);
    }
  }

  /** Every endpoint's share. */
  all(): IterableIterator<EndpointShare> {
    return this.shares.values();
  }

  /** How many deliveries to claim for each endpoint with due ones: `free` slots, given one at a time in turn. */
  shareOut(due: readonly number[], free: number): Map<number, number> {
    const now = Date.now();
    const room = new Map(due.map((endpoint) => [endpoint, this.of(endpoint).room(now)]));
    const quotas = new Map<number, number>();
    const start = due.length === 0 ? 0 : this.turn++ % due.length;
    for (let given = true; free > 0 && given;) {
      given = false;
      for (let i = 0; i < due.length && free > 0; i++) {
        const endpoint = due[(start + i) % due.length]!;
        const left = room.get(endpoint)!;
        if (left <= 0) continue;
        room.set(endpoint, left - 1);
        quotas.set(endpoint, (quotas.get(endpoint) ?? 0) + 1);
        free -= 1;
        given = true;
      }
    }
    return quotas;
  }
}
