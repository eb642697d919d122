import type pg from 'pg';
import type { PostgresCursor, PostgresPool, PostgresPoolClient } from 'kysely';
import { checkOut } from './postgres-connection.js';

/** Statement texts named at most: each connection keeps every named statement it ran, parsed and planned. */
const MAX_NAMED = 512;

/**
 * The statements a store runs again and again with new parameters (the batched writes of repositories/plants.ts),
 * run by PostgreSQL as named prepared statements: parsed and planned once per connection instead of at every
 * batch. Kysely runs on the pool this gives, which passes every other statement through as it comes.
 */
export class PreparedStatements {
  private readonly names = new Map<string, string>();

  /** Runs `text` as a named statement from now on (past MAX_NAMED texts, as it comes). */
  register(text: string): void {
    if (!this.names.has(text) && this.names.size < MAX_NAMED) this.names.set(text, `plantstore_write_${this.names.size}`);
  }

  /** Kysely's pool over `pool`: a registered text runs under its name. */
  pool(pool: pg.Pool): PostgresPool {
    const names = this.names;
    return {
      async connect(): Promise<PostgresPoolClient> {
        const { client, release } = await checkOut(pool);
        return {
          query: ((text: string | PostgresCursor<unknown>, values?: ReadonlyArray<unknown>) => {
            if (typeof text !== 'string') return client.query(text as unknown as pg.Submittable);
            const name = names.get(text);
            return name === undefined ? client.query(text, values as unknown[]) : client.query({ name, text, values: values as unknown[] });
          }) as unknown as PostgresPoolClient['query'],
          release,
        };
      },
      end: () => pool.end(),
    };
  }
}
