import { sql, type Kysely, type Migration } from 'kysely';

/**
 * Due deliveries are found per endpoint, in the order they are due, from an index: each endpoint's share of the
 * dispatcher is claimed on its own (a slow endpoint cannot take the others' slots), and a claim reads only the rows
 * it takes, never the whole backlog, whatever the table's statistics say. The index over all endpoints is dropped:
 * no statement uses it any more, and every write of a delivery paid for it.
 */
export function webhookDueByEndpoint(): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`CREATE INDEX webhook_deliveries_due_by_endpoint ON webhook_deliveries (endpoint_id, next_attempt_at) WHERE status = 'pending'`.execute(
        db,
      );
      await sql`DROP INDEX webhook_deliveries_due`.execute(db);
    },
  };
}
