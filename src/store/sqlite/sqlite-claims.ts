import { sql, type RawBuilder } from 'kysely';
import { prunableEvents, type DueDeliveries, type StoredOutcome } from '../webhook-outbox.js';

/**
 * SQLite's claim of due deliveries (WritingStatements.claimDeliveries): each endpoint's due rows, up to its quota,
 * in one UPDATE. Writes run one at a time, so no claim can hold a row another is reading. What is sent is read
 * after it (claimReturnsSent is false): a RETURNING clause cannot name the tables an UPDATE joins.
 */
export function claimDeliveriesSqlite(
  quotas: ReadonlyMap<number, number>,
  leaseUntil: number,
  due: DueDeliveries,
): RawBuilder<Record<string, unknown>> {
  const perEndpoint = [...quotas].map(
    ([endpoint, n]) => sql`SELECT * FROM (${due('d.event_id, d.endpoint_id', sql`${endpoint}`, sql`${n}`)})`,
  );
  return sql`UPDATE webhook_deliveries SET lease_until = ${leaseUntil} WHERE (event_id, endpoint_id) IN (${sql.join(
    perEndpoint,
    sql` UNION ALL `,
  )}) RETURNING event_id, endpoint_id, attempts`;
}

/**
 * SQLite's delete of old events nobody waits for (WritingStatements.pruneEvents): one statement, and writes run one
 * at a time, so a retry commits wholly before it or after it.
 */
export function pruneEventsSqlite(after: number, upto: number, before: number): RawBuilder<unknown> {
  return sql`DELETE FROM webhook_events AS e WHERE ${prunableEvents(after, upto, before)}
    AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.status = 'pending')`;
}

/**
 * SQLite's record of outcomes (WritingStatements.recordOutcomes): the outcomes as one JSON array of rows, so that the
 * writer thread prepares the statement once rather than once for each number of outcomes.
 */
export function recordOutcomesSqlite(outcomes: readonly StoredOutcome[], now: number): RawBuilder<unknown> {
  const rows = JSON.stringify(outcomes.map((o) => [o.eventId, o.endpointId, o.status, o.nextAttemptAt, o.lastStatus, o.lastError]));
  return sql`WITH outcome AS (SELECT value ->> 0 AS event_id, value ->> 1 AS endpoint_id, value ->> 2 AS status,
      value ->> 3 AS next_attempt_at, value ->> 4 AS last_status, value ->> 5 AS last_error FROM json_each(${rows}))
    UPDATE webhook_deliveries SET status = outcome.status, attempts = webhook_deliveries.attempts + 1,
      next_attempt_at = outcome.next_attempt_at, lease_until = NULL, last_attempt_at = ${now}, last_status = outcome.last_status,
      last_error = outcome.last_error
    FROM outcome WHERE webhook_deliveries.event_id = outcome.event_id AND webhook_deliveries.endpoint_id = outcome.endpoint_id`;
}
