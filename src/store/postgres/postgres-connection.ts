import type { Socket } from 'node:net';
import pg from 'pg';
import { invalidInput } from '../../catalogue/errors.js';

// Connecting to PostgreSQL: the options, the URL's own parameters and the pool.

export interface PostgresOptions {
  /** postgres://user@host:port/database; an optional `schema=NAME` query parameter selects (and creates) a schema. */
  url: string;
  /** A read replica for the listings; token checks and all writes stay on the primary. */
  readUrl?: string;
  poolSize?: number;
  statementTimeoutMs?: number;
  /** Create the `?schema=` when it is not there; otherwise its absence is an error. Default true. */
  create?: boolean;
}

/** The URL's own parameters: `schema` (Plant Store's) and `application_name`, which the change feed's connection extends. */
function splitUrl(url: string): { connectionString: string; schema?: string; applicationName: string } {
  const parsed = new URL(url);
  // Two would leave it to chance which schema a command reads or changes.
  if (parsed.searchParams.getAll('schema').length > 1) throw invalidInput('the URL names ?schema= more than once: give one schema');
  const schema = parsed.searchParams.get('schema') ?? undefined;
  const applicationName = parsed.searchParams.get('application_name') ?? 'plantstore';
  parsed.searchParams.delete('schema');
  parsed.searchParams.delete('application_name');
  if (schema !== undefined && !/^[a-z_][a-z0-9_]{0,62}$/.test(schema)) {
    throw invalidInput(`invalid schema "${schema}": use lower-case letters, digits and underscores`);
  }
  return { connectionString: parsed.toString(), applicationName, ...(schema ? { schema } : {}) };
}

/**
 * What a pool's sessions are for. `listings`: the listing statement only, whose plan is kept (a generic plan) rather
 * than made again for every page: planning costs more than reading a page, and grows with the tables. Its union of
 * access paths removes duplicates by sorting, not hashing: a generic plan sizes the hash table by the planner's
 * guess of the rows, which grows with the tables, while a page's rows are a few times its limit whatever their size.
 * Other statements keep PostgreSQL's own choice, which some of them (a LIMIT chosen at run time) need.
 */
export type PoolUse = 'statements' | 'listings';

/**
 * And without JIT compilation: a generic plan's cost is guessed from a parameter's average selectivity, and a page of a
 * tag (listing.ts) can be guessed past `jit_above_cost`, when compiling it would cost tens of milliseconds a page
 * that reads a few hundred index entries. And without sequential scans where an index serves: every read of a
 * listing is an index probe or range, repeated for each token of a batch, while a small table (a few hundred tokens,
 * the groups' sizes) looks cheaper to read whole, and a plan made then is kept for the session.
 */
const LISTING_SETTINGS = ['-c plan_cache_mode=force_generic_plan', '-c enable_hashagg=off', '-c jit=off', '-c enable_seqscan=off'];

/**
 * Listing sessions kept open through a pause in reads. Writes keep the statements pool busy, but nothing else uses
 * the listings pool: without these, the first page after half a minute without one would open a session and plan
 * its statement again, which under a write flood waits behind every writer's backend for the machine's cores.
 */
const LISTING_SESSIONS_KEPT = 2;

/**
 * Every session at READ COMMITTED, whatever the database's or the role's default: the triggers that keep derived
 * rows (member grants, grants' tags, group sizes) and the writers' own reads of rows committed while they waited for a
 * lock are right at that level, where each statement reads what committed before it (migrations 0018, 0019, 0023,
 * 0024). Exports set their own level.
 */
const SESSION_SETTINGS = ['-c default_transaction_isolation=read\\ committed'];

export function createPool(url: string, options: PostgresOptions, use: PoolUse = 'statements'): { pool: pg.Pool; schema?: string } {
  const { connectionString, schema, applicationName } = splitUrl(url);
  const settings = [...SESSION_SETTINGS, ...(schema ? [`-c search_path=${schema}`] : []), ...(use === 'listings' ? LISTING_SETTINGS : [])];
  const size = options.poolSize ?? 10;
  const pool = new pg.Pool({
    connectionString,
    max: size,
    ...(use === 'listings' ? { min: Math.min(LISTING_SESSIONS_KEPT, size) } : {}),
    connectionTimeoutMillis: 5_000,
    idleTimeoutMillis: 30_000,
    statement_timeout: options.statementTimeoutMs ?? 5_000,
    application_name: applicationName,
    options: settings.join(' '),
    // bigint ids and epoch-millisecond times fit in a double; parse them as numbers for this pool only.
    types: {
      getTypeParser: ((oid: number, format?: string) =>
        oid === 20
          ? Number
          : (pg.types.getTypeParser(oid, format as 'text') as (value: string) => unknown)) as typeof pg.types.getTypeParser,
    },
  });
  // An idle connection dropped by the server (restart, pg_terminate_backend) must not crash the process;
  // the pool discards it and the next query opens a fresh one.
  pool.on('error', () => {});
  const timeout = options.statementTimeoutMs ?? 5_000;
  if (timeout > 0) {
    const deadline = timeout + ANSWER_GRACE_MS;
    pool.on('connect', (client) => awaitAnswersWithin(client, deadline));
    // Only a connection a bulk command had without the wait gets it back: setting it anew costs every checkout.
    pool.on('release', (_err: unknown, client: pg.PoolClient) => {
      if (withoutWait.delete(client)) socketOf(client).setTimeout(deadline);
    });
  }
  return { pool, ...(schema ? { schema } : {}) };
}

/**
 * How long past the statement timeout a statement may go without a byte of its answer before its connection is
 * given up. The server ends a statement at the timeout itself, and says so at once; silence after that means the
 * way to it is lost without being closed (a firewall or proxy dropping traffic), which TCP reports only after
 * about 15 minutes of retransmissions, holding the request, and the pool's connection, that long.
 */
const ANSWER_GRACE_MS = 2_000;

const socketOf = (client: pg.Client): Socket => (client as unknown as { connection: { stream: Socket } }).connection.stream;

/**
 * Ends `client`'s connection when a statement of it gets no answer within `deadline` ms of silence: its statements
 * fail (a 503 for a request) and the pool opens a new connection for the next. An idle connection may be silent.
 */
function awaitAnswersWithin(client: pg.Client, deadline: number): void {
  const socket = socketOf(client);
  const internals = client as unknown as { _getActiveQuery?: () => unknown; _queryQueue?: unknown[] };
  socket.setTimeout(deadline);
  socket.on('timeout', () => {
    const waiting = internals._getActiveQuery?.() != null || (internals._queryQueue?.length ?? 0) > 0;
    if (waiting) socket.destroy(Object.assign(new Error(`PostgreSQL did not answer within ${deadline / 1000} s`), { code: 'ETIMEDOUT' }));
  });
}

/** Connections checked out without the wait for an answer (withoutStatementTimeout), until they are released. */
const withoutWait = new WeakSet<pg.ClientBase>();

/**
 * Lifts the statement timeout for the rest of `client`'s transaction, for a bulk command (an import, an export) whose
 * one statement may rightly run for minutes, silent: the server's timeout and the wait for an answer both. The
 * pool sets the wait again when the connection is released.
 */
export async function withoutStatementTimeout(client: pg.ClientBase): Promise<void> {
  await client.query('SET LOCAL statement_timeout = 0');
  withoutWait.add(client);
  socketOf(client as pg.Client).setTimeout(0);
}

/**
 * A client out of `pool` until `release()`. Checked out, a pg client has none of the pool's listeners: a
 * connection the server ends meanwhile (a restart, pg_terminate_backend) would raise an uncaught 'error' and end
 * the process. Its statements fail instead, and the pool drops it when it is released.
 */
export async function checkOut(pool: pg.Pool): Promise<{ client: pg.PoolClient; release: () => void }> {
  const client = await pool.connect();
  let lost: Error | undefined;
  const onError = (err: Error) => (lost = err);
  client.on('error', onError);
  return {
    client,
    release: () => {
      client.off('error', onError);
      client.release(lost);
    },
  };
}
