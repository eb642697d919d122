import { sql, type RawBuilder } from 'kysely';
import { prunableEvents, type DueDeliveries } from '../webhook-outbox.js';

/**
 * SQLite's claim of due deliveries (WritingStatements.claimDeliveries): each endpoint's due rows, up to its quota,
 * in one UPDATE. Writes run one at a time, so no claim can hold a row another is reading.
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
