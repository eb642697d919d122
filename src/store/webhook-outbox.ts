import { sql, type Kysely, type RawBuilder } from 'kysely';
import { notFound } from '../catalogue/errors.js';
import type { Database } from './schema.js';
import { deliveredMessageId, eventsOf, storedEvents, type DeliveredEvent, type EventType } from '../catalogue/plant-events.js';
import { takingEndpoints } from './migrations/0016-webhook-event-types.js';

/** The enabled endpoints that take new plants (migration 0016). */
const NEW_PLANT_ENDPOINTS = takingEndpoints('plant.created');

/**
 * A delivery `d` that waits to be sent: pending, to an enabled endpoint. A disabled endpoint's deliveries wait for
 * `webhooks enable` instead, and are no backlog until then (metrics, doctor).
 */
export const WAITING_DELIVERY =
  "d.status = 'pending' AND EXISTS (SELECT 1 FROM webhook_endpoints p WHERE p.id = d.endpoint_id AND p.disabled_at IS NULL)";

/** A receiving endpoint as operators see it (never its secrets). */
export interface WebhookEndpoint {
  id: number;
  url: string;
  createdAt: Date;
  /** The event types it receives. */
  types: EventType[];
  /** Whether it chose them, and receives each in the Standard Webhooks envelope (else the original NewPlant). */
  envelope: boolean;
  disabledAt?: Date;
  disabledReason?: string;
  /** Until when the previous secret signs too, after a rotation. */
  previousSecretUntil?: Date;
}

/** One event for one endpoint, as `webhooks deliveries` lists it. */
export interface WebhookDelivery {
  eventId: number;
  /** The `webhook-id` the receiver sees (deliveredMessageId). */
  messageId: string;
  endpointId: number;
  /** What happened to the plant: its event's type. */
  type: EventType;
  plantId: number;
  status: 'pending' | 'delivered' | 'failed';
  attempts: number;
  nextAttemptAt?: Date;
  lastAttemptAt?: Date;
  lastStatus?: number;
  lastError?: string;
}

/** A delivery claimed by this process: what to send, where, signed with which secrets. */
export interface ClaimedDelivery {
  eventId: number;
  /** The `webhook-id`: the event's random id, so that no other event of the deployment's life has it, as the endpoint's body has it (deliveredMessageId). */
  messageId: string;
  endpointId: number;
  attempts: number;
  url: string;
  secrets: string[];
  /** The event, as the endpoint receives it (webhooks/event-body.ts). */
  event: DeliveredEvent;
  /** When this process's hold on the delivery ends (epoch ms): past it, another process may send it. */
  leaseUntil: number;
}

/** An attempt of a delivery, and how it ended. */
export interface FinishedAttempt {
  delivery: ClaimedDelivery;
  outcome: AttemptOutcome;
}

/** How an attempt ended: delivered, to be tried again at `retryAt`, failed for good, or the endpoint is gone (410). */
export type AttemptOutcome =
  | { kind: 'delivered'; status: number }
  | { kind: 'retry'; retryAt: number; status?: number; error?: string }
  | { kind: 'failed'; status?: number; error?: string }
  | { kind: 'gone'; status: number };

type Row = Record<string, string | number | null>;

/** The due deliveries of one endpoint, earliest first, as `columns`; the endpoint and the limit as SQL. */
export type DueDeliveries = (columns: string, endpoint: RawBuilder<unknown>, limit: RawBuilder<unknown>) => RawBuilder<unknown>;

/** An attempt's outcome as the outbox stores it: the delivery's new status and when it is next due. */
export interface StoredOutcome {
  eventId: number;
  endpointId: number;
  status: 'pending' | 'delivered' | 'failed';
  nextAttemptAt: number;
  lastStatus: number | null;
  lastError: string | null;
}

/**
 * How a database claims due deliveries, records their outcomes and forgets old events (part of DatabaseSeam's
 * WritingStatements).
 */
export interface DeliveryClaims {
  /**
   * The statement that claims, for each endpoint of `quotas`, up to its number of due deliveries (`due` selects an
   * endpoint's, earliest first, as `columns`), sets their lease to `leaseUntil` and returns their event_id,
   * endpoint_id and attempts, and with `claimReturnsSent` also what they are sent with (`sent`, columns of their
   * event `e` and endpoint `p`). PostgreSQL skips rows another claim holds (FOR UPDATE SKIP LOCKED).
   */
  claimDeliveries(
    quotas: ReadonlyMap<number, number>,
    leaseUntil: number,
    due: DueDeliveries,
    sent: string,
  ): RawBuilder<Record<string, unknown>>;
  /**
   * Whether the claim returns what is sent too (one round trip on PostgreSQL); else it is read after the claim, as
   * SQLite's RETURNING cannot name the tables an UPDATE joins.
   */
  readonly claimReturnsSent: boolean;
  /**
   * The statement that records `outcomes`, at `now` (epoch ms), and lets their leases go. Its text is the same for
   * any number of outcomes where the database plans statements (PostgreSQL), so that it is planned once.
   */
  recordOutcomes(outcomes: readonly StoredOutcome[], now: number): RawBuilder<unknown>;
  /**
   * The statement that deletes the events with ids in (`after`, `upto`] raised before `before` (epoch ms) for which
   * no delivery waits, with their deliveries, judging each delivery as it stands once no other writer holds it: a
   * `webhooks retry` committed while the statement runs keeps its event (PostgreSQL locks the range's deliveries first).
   */
  pruneEvents(after: number, upto: number, before: number): RawBuilder<unknown>;
}

/** What WebhookOutbox asks of the database's statements: its own, and which texts to keep planned. */
export type OutboxStatements = DeliveryClaims & { prepare(text: string): void };

/** The events a step of pruning may delete: in its id range, raised before `before`. */
export const prunableEvents = (after: number, upto: number, before: number): RawBuilder<unknown> =>
  sql`e.id > ${after} AND e.id <= ${upto} AND e.created_at < ${before}`;

/** Events a step of the outbox's pruning reads and deletes at most (see WebhookOutbox.prune). */
export const PRUNED_EVENTS_PER_STEP = 5_000;

/** What a claimed delivery is sent with: its event `e` and its endpoint `p`. */
const CLAIMED_COLUMNS =
  'e.message_id, e.type, e.plant_id, e.name, e.tag, e.created_at, p.url, p.secret, p.previous_secret, p.previous_until, p.events';

/** A delivery `d` that is due at `now` and that no process holds: what a claim takes. */
const dueAt = (now: number) =>
  sql`d.status = 'pending' AND d.next_attempt_at <= ${now} AND (d.lease_until IS NULL OR d.lease_until < ${now})`;
const num = (v: unknown): number | undefined => (v === null || v === undefined ? undefined : Number(v));
const date = (v: unknown): Date | undefined => (v === null || v === undefined ? undefined : new Date(Number(v)));

/**
 * The webhook outbox and its endpoints (migration 0006), in SQL both backends run. Deliveries are claimed with a
 * lease, so that several processes (workers, instances) deliver each event once per endpoint; on PostgreSQL the
 * claim skips rows another claim holds (FOR UPDATE SKIP LOCKED) instead of waiting for them.
 */
export class WebhookOutbox {
  constructor(
    private readonly db: () => Kysely<Database>,
    /** Where the dispatcher's own writes run (DatabaseSeam.unfollowedWrites): claims, outcomes, releases. */
    private readonly dispatcherWrites: () => Kysely<Database>,
    /** The database's statements of deliveries (WritingStatements). */
    private readonly statements: OutboxStatements,
  ) {}

  /** A new endpoint, enabled; `events`: the types it chose (without: the original webhook, new plants alone). */
  async addEndpoint(url: string, secret: string, events?: readonly EventType[]): Promise<WebhookEndpoint> {
    const createdAt = Date.now();
    const stored = storedEvents(events);
    const { rows } = await sql<Row>`INSERT INTO webhook_endpoints (url, secret, created_at, events)
      VALUES (${url}, ${secret}, ${createdAt}, ${stored}) RETURNING id`.execute(this.db());
    return { id: Number(rows[0]!.id), url, createdAt: new Date(createdAt), ...eventsOf(stored) };
  }

  async listEndpoints(): Promise<WebhookEndpoint[]> {
    const { rows } =
      await sql<Row>`SELECT id, url, created_at, disabled_at, disabled_reason, previous_until, events FROM webhook_endpoints ORDER BY id`.execute(
        this.db(),
      );
    const now = Date.now();
    return rows.map((r) => ({
      id: Number(r.id),
      url: String(r.url),
      createdAt: new Date(Number(r.created_at)),
      ...eventsOf(r.events === null ? null : String(r.events)),
      ...(r.disabled_at === null ? {} : { disabledAt: date(r.disabled_at)!, disabledReason: String(r.disabled_reason ?? '') }),
      ...(r.previous_until !== null && Number(r.previous_until) > now ? { previousSecretUntil: date(r.previous_until)! } : {}),
    }));
  }

  removeEndpoint(id: number): Promise<void> {
    return this.changeEndpoint(id, sql`DELETE FROM webhook_endpoints WHERE id = ${id}`);
  }

  /** A new secret; the current one goes on signing too until `previousUntil` (epoch ms). */
  rotateSecret(id: number, secret: string, previousUntil: number): Promise<void> {
    return this.changeEndpoint(
      id,
      sql`UPDATE webhook_endpoints SET previous_secret = secret, previous_until = ${previousUntil}, secret = ${secret} WHERE id = ${id}`,
    );
  }

  /** Enables a disabled endpoint again (its failed deliveries stay failed until retried); false if it was enabled. */
  async enableEndpoint(id: number): Promise<boolean> {
    const { numAffectedRows } =
      await sql`UPDATE webhook_endpoints SET disabled_at = NULL, disabled_reason = NULL WHERE id = ${id} AND disabled_at IS NOT NULL`.execute(
        this.db(),
      );
    if (Number(numAffectedRows ?? 0) > 0) return true;
    await this.requireEndpoint(id);
    return false;
  }

  /** Endpoint `id`, named by the caller where it found nothing: one that does not exist is the caller's mistake. */
  private async requireEndpoint(id: number | undefined): Promise<void> {
    if (id === undefined) return;
    const { rows } = await sql`SELECT 1 FROM webhook_endpoints WHERE id = ${id}`.execute(this.db());
    if (rows.length === 0) throw notFound(`no webhook endpoint with id ${id}`);
  }

  /** Runs `statement`, which changes endpoint `id`; an endpoint it did not find is the caller's mistake. */
  private async changeEndpoint(id: number, statement: RawBuilder<unknown>): Promise<void> {
    const { numAffectedRows } = await statement.execute(this.db());
    if (Number(numAffectedRows ?? 0) === 0) throw notFound(`no webhook endpoint with id ${id}`);
  }

  async listDeliveries(filter: { endpointId?: number; limit: number }): Promise<WebhookDelivery[]> {
    const where = filter.endpointId === undefined ? sql`` : sql`WHERE d.endpoint_id = ${filter.endpointId}`;
    const { rows } =
      await sql<Row>`SELECT d.event_id, e.message_id, d.endpoint_id, e.type, e.plant_id, d.status, d.attempts, d.next_attempt_at, d.last_attempt_at,
        d.last_status, d.last_error, p.events FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id
        JOIN webhook_endpoints p ON p.id = d.endpoint_id ${where}
      ORDER BY d.event_id DESC, d.endpoint_id LIMIT ${filter.limit}`.execute(this.db());
    if (rows.length === 0) await this.requireEndpoint(filter.endpointId);
    return rows.map((r) => ({
      eventId: Number(r.event_id),
      messageId: deliveredMessageId(String(r.message_id), r.events !== null),
      endpointId: Number(r.endpoint_id),
      type: r.type as EventType,
      plantId: Number(r.plant_id),
      status: r.status as WebhookDelivery['status'],
      attempts: Number(r.attempts),
      ...(r.status === 'pending' ? { nextAttemptAt: date(r.next_attempt_at)! } : {}),
      ...(r.last_attempt_at === null ? {} : { lastAttemptAt: date(r.last_attempt_at)! }),
      ...(r.last_status === null ? {} : { lastStatus: num(r.last_status)! }),
      ...(r.last_error === null ? {} : { lastError: String(r.last_error) }),
    }));
  }

  /**
   * Deliveries that failed or wait for a later attempt (of one endpoint, or one event) are due now. A failed one
   * starts its schedule again; a waiting one keeps its count of attempts. One being sent is left alone: its outcome
   * decides. Resolves to how many are due for enabled endpoints (`due`) and how many wait for disabled ones to be
   * enabled (`held`), counted apart so that neither is told as the other.
   */
  async retry(filter: { endpointId?: number; eventId?: number }): Promise<{ due: number; held: number }> {
    const now = Date.now();
    const endpoint = filter.endpointId === undefined ? sql`` : sql` AND endpoint_id = ${filter.endpointId}`;
    const event = filter.eventId === undefined ? sql`` : sql` AND event_id = ${filter.eventId}`;
    // One `now` for both: a delivery the first statement makes due (next_attempt_at = now) is not retried again by
    // the second, so each is counted once even when its endpoint is enabled or disabled between them.
    const retried = async (disabled: boolean): Promise<number> => {
      const state = disabled ? sql`IS NOT NULL` : sql`IS NULL`;
      const { numAffectedRows } = await sql`UPDATE webhook_deliveries
        SET attempts = CASE WHEN status = 'failed' THEN 0 ELSE attempts END, status = 'pending', next_attempt_at = ${now}, lease_until = NULL
        WHERE (status = 'failed' OR (status = 'pending' AND next_attempt_at > ${now} AND (lease_until IS NULL OR lease_until < ${now})))${endpoint}${event}
          AND endpoint_id IN (SELECT id FROM webhook_endpoints WHERE disabled_at ${state})`.execute(this.db());
      return Number(numAffectedRows ?? 0);
    };
    const held = await retried(true);
    const due = await retried(false);
    if (due + held === 0) await this.requireEndpoint(filter.endpointId);
    return { due, held };
  }

  /**
   * The enabled endpoints that have a delivery due and not claimed, and every enabled endpoint (so that a dispatcher
   * learns which ones another process disabled or removed): read-only, and from the per-endpoint index, so that most
   * looks, which find nothing due, take no write lock (on SQLite a claim would wait behind another process's import,
   * and this process's own writes behind it).
   */
  async dueEndpoints(): Promise<{ due: number[]; enabled: number[] }> {
    const now = Date.now();
    const { rows } = await sql<Row>`SELECT p.id, CASE WHEN EXISTS (
        SELECT 1 FROM webhook_deliveries d WHERE d.endpoint_id = p.id AND ${dueAt(now)}) THEN 1 ELSE 0 END AS due
      FROM webhook_endpoints p WHERE p.disabled_at IS NULL ORDER BY p.id`.execute(this.db());
    return {
      due: rows.filter((r) => Number(r.due) === 1).map((r) => Number(r.id)),
      enabled: rows.map((r) => Number(r.id)),
    };
  }

  /**
   * Claims, for each endpoint in `quotas`, up to its number of due deliveries, earliest due first, for `leaseMs`:
   * no other process takes them meanwhile. One statement for all endpoints; on PostgreSQL it skips rows another
   * claim holds (FOR UPDATE SKIP LOCKED) instead of waiting for them. A disabled endpoint's deliveries are not
   * claimed: they wait for `webhooks enable`, whatever the caller last learnt of the endpoint (a refill claims
   * without a look first).
   */
  async claim(quotas: ReadonlyMap<number, number>, leaseMs: number): Promise<ClaimedDelivery[]> {
    if (quotas.size === 0) return [];
    const now = Date.now();
    // The endpoint's check names the endpoint, not the row: one test per endpoint, not one per delivery.
    const due: DueDeliveries = (columns, endpoint, limit) =>
      sql`SELECT ${sql.raw(columns)} FROM webhook_deliveries d WHERE d.endpoint_id = ${endpoint} AND ${dueAt(now)}
        AND EXISTS (SELECT 1 FROM webhook_endpoints ep WHERE ep.id = ${endpoint} AND ep.disabled_at IS NULL)
        ORDER BY d.next_attempt_at LIMIT ${limit}`;
    const claim = this.statements.claimDeliveries(quotas, now + leaseMs, due, CLAIMED_COLUMNS) as RawBuilder<Row>;
    const claimed = await this.planned(claim);
    const rows = this.statements.claimReturnsSent ? claimed : await this.readSent(claimed);
    return rows.map((r) => {
      const previous = r.previous_secret !== null && Number(r.previous_until) > now ? [String(r.previous_secret)] : [];
      return {
        eventId: Number(r.event_id),
        messageId: deliveredMessageId(String(r.message_id), r.events !== null),
        endpointId: Number(r.endpoint_id),
        attempts: Number(r.attempts),
        url: String(r.url),
        secrets: [String(r.secret), ...previous],
        event: {
          sequence: Number(r.event_id),
          type: r.type as EventType,
          plant: { id: Number(r.plant_id), name: String(r.name), ...(r.tag === null ? {} : { tag: String(r.tag) }) },
          createdAt: Number(r.created_at),
          envelope: r.events !== null,
        },
        leaseUntil: now + leaseMs,
      };
    });
  }

  /**
   * Runs `statement` on the dispatcher's writes as a text PostgreSQL keeps planned: claims and outcomes come many
   * times a second while the outbox drains, and parsing and planning each anew was a large part of the database's
   * time for them (docs/performance.md, "Claims and outcomes planned once").
   */
  private async planned(statement: RawBuilder<Row>): Promise<Row[]> {
    const db = this.dispatcherWrites();
    const compiled = statement.compile(db);
    this.statements.prepare(compiled.sql);
    return (await db.executeQuery(compiled)).rows;
  }

  /** What the claimed deliveries `claimed` are sent with, read after the claim (DeliveryClaims.claimReturnsSent). */
  private async readSent(claimed: Row[]): Promise<Row[]> {
    if (claimed.length === 0) return [];
    const events = [...new Set(claimed.map((r) => Number(r.event_id)))];
    const endpoints = [...new Set(claimed.map((r) => Number(r.endpoint_id)))];
    const { rows: sent } = await sql<Row>`SELECT e.id AS event_id, p.id AS endpoint_id, ${sql.raw(CLAIMED_COLUMNS)}
      FROM webhook_events e CROSS JOIN webhook_endpoints p WHERE e.id IN (${sql.join(events)}) AND p.id IN (${sql.join(endpoints)})`.execute(
      this.db(),
    );
    const byKey = new Map(sent.map((r) => [`${r.event_id} ${r.endpoint_id}`, r]));
    return claimed.flatMap((r) => {
      const read = byKey.get(`${r.event_id} ${r.endpoint_id}`);
      return read === undefined ? [] : [{ ...read, attempts: r.attempts ?? 0 }];
    });
  }

  /**
   * Records attempts' outcomes and lets their leases go, in one statement for all of them; an endpoint that answered
   * 410 Gone is disabled.
   */
  async finish(attempts: readonly FinishedAttempt[]): Promise<void> {
    if (attempts.length === 0) return;
    const now = Date.now();
    const outcomes = attempts.map(({ delivery, outcome }): StoredOutcome => ({
      eventId: delivery.eventId,
      endpointId: delivery.endpointId,
      status: outcome.kind === 'delivered' ? 'delivered' : outcome.kind === 'retry' ? 'pending' : 'failed',
      nextAttemptAt: outcome.kind === 'retry' ? outcome.retryAt : now,
      lastStatus: 'status' in outcome && outcome.status !== undefined ? outcome.status : null,
      lastError: 'error' in outcome && outcome.error !== undefined ? outcome.error.slice(0, 500) : null,
    }));
    await this.planned(this.statements.recordOutcomes(outcomes, now) as RawBuilder<Row>);
    const gone = [...new Set(attempts.filter((a) => a.outcome.kind === 'gone').map((a) => a.delivery.endpointId))];
    if (gone.length > 0) {
      await sql`UPDATE webhook_endpoints SET disabled_at = ${now}, disabled_reason = ${'the endpoint answered 410 Gone'}
        WHERE id IN (${sql.join(gone)}) AND disabled_at IS NULL`.execute(this.dispatcherWrites());
    }
  }

  /** Lets go of deliveries this process claimed but will not finish (it is stopping): another may send them at once. */
  async release(deliveries: readonly ClaimedDelivery[]): Promise<void> {
    if (deliveries.length === 0) return;
    const keys = deliveries.map((d) => sql`(CAST(${d.eventId} AS bigint), CAST(${d.endpointId} AS bigint))`);
    await sql`UPDATE webhook_deliveries SET lease_until = NULL WHERE status = 'pending'
      AND (event_id, endpoint_id) IN (VALUES ${sql.join(keys)})`.execute(this.dispatcherWrites());
  }

  /**
   * Forgets events older than `before` (epoch ms) that no delivery waits for: the outbox does not grow for ever.
   * Events are walked in id order (the order they were raised in, so of their age), PRUNED_EVENTS_PER_STEP at a
   * time, until a step's events are all newer than `before`: a pass reads what it deletes and a step more, not the
   * whole outbox (a week of events at a few a second is 10^6; their scan took 38 ms of a SQLite serving thread).
   * Each step is read on the store's own connection, without a lock, and its delete, when there is one, goes through
   * the dispatcher's writes (SQLite: the writer thread, so that the serving thread never waits for the write lock);
   * the next step comes after the requests that came meanwhile. A serving process that never sends a webhook starts no
   * SQLite writer thread for a pass that finds nothing. A pass ends early once `goOn` says so (the process stops).
   */
  async prune(before: number, goOn: () => boolean = () => true): Promise<number> {
    let pruned = 0;
    for (let after = 0; goOn();) {
      const { rows } = await sql<Row>`SELECT max(id) AS upto, min(created_at) AS oldest FROM (
        SELECT id, created_at FROM webhook_events WHERE id > ${after} ORDER BY id LIMIT ${PRUNED_EVENTS_PER_STEP}) step`.execute(this.db());
      const { upto, oldest } = rows[0] ?? {};
      if (upto === null || upto === undefined || Number(oldest) >= before) return pruned;
      const { numAffectedRows } = await this.statements.pruneEvents(after, Number(upto), before).execute(this.dispatcherWrites());
      pruned += Number(numAffectedRows ?? 0);
      after = Number(upto);
      await new Promise((resolve) => setImmediate(resolve));
    }
    return pruned;
  }

  /** Deliveries waiting (WAITING_DELIVERY), and when the oldest of them was raised (epoch ms), for metrics. */
  async backlog(): Promise<{ pending: number; oldestCreatedAt?: number }> {
    const { rows } = await sql<Row>`SELECT count(*) AS pending, min(e.created_at) AS oldest FROM webhook_deliveries d
      JOIN webhook_events e ON e.id = d.event_id WHERE ${sql.raw(WAITING_DELIVERY)}`.execute(this.db());
    const oldest = num(rows[0]?.oldest);
    return { pending: Number(rows[0]?.pending ?? 0), ...(oldest === undefined ? {} : { oldestCreatedAt: oldest }) };
  }
}

/**
 * The statements an import runs before its commit to raise one event per plant it added (and their deliveries),
 * instead of a trigger per row: for the plants after catalogue position `before`, then the deliveries of the events
 * after `lastEvent`, each only of the rows `imported` says the import wrote (PostgreSQL: its own transaction's, as
 * schema-names.ts writtenHere; another writer's plant, change or delete, committed meanwhile, raised its event and
 * its deliveries by trigger). `messageId` is the SQL of a new message id where the table's column does not draw one
 * itself (migration 0010: SQLite). Nothing is raised while no endpoint is enabled. Values are integers the import
 * read itself, written as literals.
 */
export function importedPlantEvents(
  { imported, messageId }: { imported: string | undefined; messageId: string | undefined },
  before: number,
  lastEvent: number,
  now: number,
): string[] {
  for (const n of [before, lastEvent, now]) if (!Number.isSafeInteger(n)) throw new Error(`not an integer: ${n}`);
  const ours = imported === undefined ? '' : ` AND ${imported}`;
  const [column, value] = messageId === undefined ? ['', ''] : [', message_id', `, ${messageId}`];
  return [
    `INSERT INTO webhook_events (plant_id, name, tag, created_at${column}) SELECT api_id, name, tag, ${now}${value} FROM plants ` +
      `WHERE id > ${before}${ours} AND EXISTS (SELECT 1 FROM ${NEW_PLANT_ENDPOINTS}) ORDER BY id`,
    // In a query of its own, webhook_events is the one table `imported` can be about, as plants is above.
    `INSERT INTO webhook_deliveries (event_id, endpoint_id, next_attempt_at) SELECT e.id, p.id, ${now} ` +
      `FROM (SELECT id FROM webhook_events WHERE id > ${lastEvent}${ours}) e CROSS JOIN (SELECT id FROM ${NEW_PLANT_ENDPOINTS}) p`,
  ];
}

/** The last event id so far (0 for none): what `importedPlantEvents` counts from. */
export const LAST_EVENT_SQL = 'SELECT coalesce(max(id), 0) AS last FROM webhook_events';
