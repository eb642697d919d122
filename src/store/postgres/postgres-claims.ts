import { sql, type RawBuilder } from 'kysely';
import type { DueDeliveries } from '../webhook-outbox.js';

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
