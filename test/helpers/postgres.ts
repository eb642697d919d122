import { randomBytes } from 'node:crypto';
import pg from 'pg';

/** The PostgreSQL server the tests use; each test run works in schemas of its own, dropped afterwards. */
export const PG_URL = process.env.PLANTSTORE_TEST_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

/** Set by probe-postgres-once.ts for every test file of one run: PG_REACHABLE, or why PostgreSQL is not. */
export const PG_PROBE_ENV = 'PLANTSTORE_TEST_PG_PROBE';
export const PG_REACHABLE = 'reachable';

let availability: Promise<string | undefined> | undefined;
const PROBE_ATTEMPTS = 3;
const PROBE_TIMEOUT_MS = 10_000;

/**
 * Resolves to undefined when PostgreSQL answers, or to the reason it does not. Under CI (CI=true) a missing
 * PostgreSQL is a failure, not a skip: the caller throws instead of skipping.
 */
export function postgresUnavailableReason(): Promise<string | undefined> {
  const probed = process.env[PG_PROBE_ENV];
  if (probed !== undefined && probed !== '') return Promise.resolve(probed === PG_REACHABLE ? undefined : probed);
  availability ??= (async () => {
    let reason = '';
    // Patient: on a busy machine a PostgreSQL that is up may take seconds to accept a connection. One that is not
    // listening refuses at once, and is not asked again.
    for (let attempt = 1; attempt <= PROBE_ATTEMPTS; attempt++) {
      const client = new pg.Client({ connectionString: PG_URL, connectionTimeoutMillis: PROBE_TIMEOUT_MS });
      try {
        await client.connect();
        await client.query('SELECT 1');
        return undefined;
      } catch (err) {
        reason = `PostgreSQL not reachable at ${PG_URL.replace(/\/\/[^@]*@/, '//')}: ${(err as Error).message}`;
        if ((err as NodeJS.ErrnoException).code === 'ECONNREFUSED') break;
      } finally {
        await client.end().catch(() => {});
      }
    }
    return reason;
  })();
  return availability;
}

/** For suites that only make sense on PostgreSQL: a skip reason, or a thrown error under CI. */
export async function requirePostgres(): Promise<string | false> {
  const reason = await postgresUnavailableReason();
  if (reason === undefined) return false;
  if (process.env.CI === 'true') throw new Error(`CI=true requires PostgreSQL: ${reason}`);
  return `skipped: ${reason}`;
}

/** A new, unique schema name and the database URL that selects it (the store creates the schema). */
export function freshSchema(base: string = PG_URL): { schema: string; url: string } {
  const schema = `pstest_${process.pid}_${randomBytes(4).toString('hex')}`;
  const url = new URL(base);
  url.searchParams.set('schema', schema);
  return { schema, url: url.toString() };
}

export async function dropSchema(schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    // A session that a failed test left open in the schema would hold the drop, and the test process, for good:
    // after a wait, the sessions holding locks in the schema are ended and the drop runs again.
    await client.query(`SET lock_timeout = '10s'`);
    try {
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    } catch (err) {
      if ((err as { code?: string }).code !== '55P03') throw err;
      await client.query(
        `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND l.pid <> pg_backend_pid()`,
        [schema],
      );
      await client.query(`SET lock_timeout = 0`);
      await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    }
  } finally {
    await client.end();
  }
}

/** Runs one SQL statement against the test server as a superuser (for pg_terminate_backend and the like). */
export async function adminQuery<R extends pg.QueryResultRow>(text: string, values: unknown[] = []): Promise<R[]> {
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  try {
    return (await client.query<R>(text, values)).rows;
  } finally {
    await client.end();
  }
}
