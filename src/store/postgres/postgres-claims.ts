import { sql, type RawBuilder } from 'kysely';
import { prunableEvents, type DueDeliveries, type StoredOutcome } from '../webhook-outbox.js';

/**
 * PostgreSQL's claim of due deliveries (WritingStatements.claimDeliveries): the rows are found and locked first,
 * skipping those another claim holds, then updated by their ctid (a TID scan) and joined to their event and
 * endpoint by key (read, not locked), so that what is sent comes back with the claim. Joined to the table instead,
 * the update is planned for the LIMIT's unknown n and reads the whole table into a hash.
 */
export function claimDeliveriesPostgres(
  quotas: ReadonlyMap<number, number>,
  leaseUntil: number,
  due: DueDeliveries,
  sent: string,
): RawBuilder<Record<string, unknown>> {
  return sql`UPDATE webhook_deliveries w SET lease_until = ${leaseUntil} FROM webhook_events e, webhook_endpoints p
    WHERE w.ctid = ANY (ARRAY(
      SELECT c.ctid FROM unnest(${[...quotas.keys()]}::bigint[], ${[...quotas.values()]}::int[]) AS q (endpoint_id, n)
      CROSS JOIN LATERAL (${due('d.ctid', sql`q.endpoint_id`, sql`q.n`)} FOR UPDATE OF d SKIP LOCKED) c))
    AND e.id = w.event_id AND p.id = w.endpoint_id
    RETURNING w.event_id, w.endpoint_id, w.attempts, ${sql.raw(sent)}`;
}

/**
 * PostgreSQL's record of outcomes (WritingStatements.recordOutcomes): one array per column, so that the text is the
 * same for any number of outcomes and is planned once per connection (a VALUES list was parsed and planned at each
 * batch, its parameters typed one by one).
 */
export function recordOutcomesPostgres(outcomes: readonly StoredOutcome[], now: number): RawBuilder<unknown> {
  const column = <T>(of: (o: StoredOutcome) => T): T[] => outcomes.map(of);
  return sql`UPDATE webhook_deliveries w SET status = o.status, attempts = w.attempts + 1, next_attempt_at = o.next_attempt_at,
      lease_until = NULL, last_attempt_at = ${now}, last_status = o.last_status, last_error = o.last_error
    FROM unnest(${column((o) => o.eventId)}::bigint[], ${column((o) => o.endpointId)}::bigint[], ${column((o) => o.status)}::text[],
      ${column((o) => o.nextAttemptAt)}::bigint[], ${column((o) => o.lastStatus)}::int[], ${column((o) => o.lastError)}::text[])
      AS o (event_id, endpoint_id, status, next_attempt_at, last_status, last_error)
    WHERE w.event_id = o.event_id AND w.endpoint_id = o.endpoint_id`;
}

/**
 * PostgreSQL's delete of old events nobody waits for (WritingStatements.pruneEvents). The range's deliveries are
 * locked first (a CTE with FOR UPDATE is read once, whole), and a row another transaction holds is waited for and read
 * as that one committed it: judged by the statement's own snapshot, a delivery a held `webhooks retry` made pending
 * again was still failed, and went with its event. Once locked, no retry changes them until the delete commits.
 */
export function pruneEventsPostgres(after: number, upto: number, before: number): RawBuilder<unknown> {
  // Only the deliveries of events old enough to go: the range's newer ones are being sent, and their outcomes must
  // not wait for the prune.
  return sql`WITH held AS (SELECT d.event_id, d.status FROM webhook_deliveries d
      WHERE d.event_id > ${after} AND d.event_id <= ${upto} AND d.event_id IN (SELECT e.id FROM webhook_events e WHERE ${prunableEvents(after, upto, before)})
      ORDER BY d.event_id, d.endpoint_id FOR UPDATE)
    DELETE FROM webhook_events e WHERE ${prunableEvents(after, upto, before)}
      AND NOT EXISTS (SELECT 1 FROM held h WHERE h.event_id = e.id AND h.status = 'pending')`;
}
