import { sql, type RawBuilder } from 'kysely';
import { prunableEvents, type DueDeliveries } from '../webhook-outbox.js';

/**
 * PostgreSQL's claim of due deliveries (WritingStatements.claimDeliveries): the rows are found and locked first,
 * skipping those another claim holds, then updated by their ctid (a TID scan). Joined to the table instead, the
 * update is planned for the LIMIT's unknown n and reads the whole table into a hash.
 */
export function claimDeliveriesPostgres(
  quotas: ReadonlyMap<number, number>,
  leaseUntil: number,
  due: DueDeliveries,
): RawBuilder<Record<string, unknown>> {
  return sql`UPDATE webhook_deliveries w SET lease_until = ${leaseUntil} WHERE w.ctid = ANY (ARRAY(
    SELECT c.ctid FROM unnest(${[...quotas.keys()]}::bigint[], ${[...quotas.values()]}::int[]) AS q (endpoint_id, n)
    CROSS JOIN LATERAL (${due('d.ctid', sql`q.endpoint_id`, sql`q.n`)} FOR UPDATE OF d SKIP LOCKED) c)) RETURNING w.event_id, w.endpoint_id, w.attempts`;
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
