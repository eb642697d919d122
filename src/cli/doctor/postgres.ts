import pg from 'pg';
import type { StoreConfig } from '../../config.js';
import { checkOut } from '../../store/postgres/postgres-connection.js';
import { fail, ok, reason, schemaChecks, skip, warn, type Check } from './check.js';

/** The URL as it may be printed: no password. */
export function withoutPassword(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password) parsed.password = '***';
    return parsed.toString();
  } catch {
    return '(unparsable URL)';
  }
}

function connectionSettings(url: string): { settings: pg.ClientConfig; schema: string | undefined; where: string } {
  const parsed = new URL(url);
  const schema = parsed.searchParams.get('schema') ?? undefined;
  parsed.searchParams.delete('schema');
  const where = `${parsed.hostname || 'localhost'}:${parsed.port || 5432}${parsed.pathname}`;
  return {
    settings: {
      connectionString: parsed.toString(),
      connectionTimeoutMillis: 5_000,
      application_name: 'plantstore doctor',
      ...(schema ? { options: `-c search_path=${schema}` } : {}),
    },
    schema,
    where,
  };
}

async function withClient<T>(settings: pg.ClientConfig, run: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client(settings);
  // An error after connect (server restart) must not crash doctor; the pending query fails instead.
  client.on('error', () => {});
  await client.connect();
  try {
    return await run(client);
  } finally {
    await client.end().catch(() => {});
  }
}

const UNREACHABLE_FIX = 'start PostgreSQL there, or correct the host, port, user, password and database in --db / PLANTSTORE_DB';

/** Reachability, version, a pool connection the way serve opens them, the replica, schema and counts. */
export async function postgresChecks(config: StoreConfig, workers: number, webhookAllowPrivate: boolean): Promise<Check[]> {
  let parsed: ReturnType<typeof connectionSettings>;
  try {
    parsed = connectionSettings(config.db);
  } catch {
    return [
      fail(
        'database',
        `--db is not a valid PostgreSQL URL: ${withoutPassword(config.db)}`,
        'write it as postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE[?schema=NAME]',
      ),
    ];
  }
  const { settings, schema, where } = parsed;
  const checks: Check[] = [];
  try {
    await withClient(settings, async (client) => {
      const version = String((await client.query<{ server_version: string }>('SHOW server_version')).rows[0]!.server_version);
      checks.push(ok('database', `PostgreSQL ${version.split(' ')[0]} at ${where}${schema ? `, schema ${schema}` : ''}`));

      const limits = (
        await client.query(
          `SELECT current_setting('max_connections')::int AS max, current_setting('superuser_reserved_connections')::int AS reserved,
                (SELECT count(*)::int FROM pg_stat_activity) AS used`,
        )
      ).rows[0] as { max: number; reserved: number; used: number };
      checks.push(await poolCheck(settings, config, workers, limits));

      if (schema && (await client.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [schema])).rowCount === 0) {
        checks.push(
          warn('schema', `schema ${schema} does not exist yet`, 'run "plantstore migrate" to create it (serve also does)'),
          skip('counts', 'no schema'),
        );
        return;
      }
      checks.push(
        ...(await schemaChecks(
          {
            backend: 'postgres',
            // to_regclass follows the search_path, so this finds the table in the URL's schema.
            tableExists: async (name) =>
              (await client.query<{ found: boolean }>('SELECT to_regclass($1) IS NOT NULL AS found', [name])).rows[0]!.found,
            rows: async (sql) => (await client.query<unknown[]>({ text: sql, rowMode: 'array' })).rows,
          },
          webhookAllowPrivate,
        )),
      );
    });
  } catch (err) {
    if (checks.length === 0)
      return [
        fail('database', `cannot reach PostgreSQL at ${where}: ${reason(err)}`, UNREACHABLE_FIX),
        skip('schema', 'database not reachable'),
      ];
    checks.push(fail('database', `query failed on ${where}: ${reason(err)}`, 'check that the user may read the Plant Store tables'));
  }
  if (config.readDb) checks.push(await replicaCheck(config.readDb));
  return checks;
}

/** Opens a connection through a pool sized like serve's, and checks the server has room for every worker's pool. */
async function poolCheck(
  settings: pg.ClientConfig,
  config: StoreConfig,
  workers: number,
  limits: { max: number; reserved: number; used: number },
): Promise<Check> {
  const pool = new pg.Pool({ ...settings, max: config.poolSize });
  pool.on('error', () => {});
  try {
    const { client, release } = await checkOut(pool);
    try {
      await client.query('SELECT 1');
    } finally {
      release();
    }
  } catch (err) {
    return fail('pool', `a pooled connection failed: ${reason(err)}`, UNREACHABLE_FIX);
  } finally {
    await pool.end().catch(() => {});
  }
  // Each worker has two pools of the primary (statements and listings; listings go to the replica with --read-db)
  // and the change feed's connection.
  const pools = config.readDb ? 1 : 2;
  const wanted = (pools * config.poolSize + 1) * workers;
  const room = limits.max - limits.reserved;
  const detail =
    `${pools} pool(s) of ${config.poolSize} and the change feed's connection x ${workers} worker(s) = ${wanted} connections; ` +
    `server allows ${room} (${limits.used} in use)`;
  if (wanted > room - limits.used) {
    return warn('pool', detail, 'lower --workers or PLANTSTORE_PG_POOL_SIZE, raise max_connections, or put PgBouncer in front');
  }
  return ok('pool', detail);
}

async function replicaCheck(url: string): Promise<Check> {
  const { settings, where } = connectionSettings(url);
  try {
    const inRecovery = await withClient(
      settings,
      async (client) => (await client.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r,
    );
    return inRecovery
      ? ok('read replica', `${where} answers and is a standby`)
      : warn(
          'read replica',
          `${where} answers but is not a standby (pg_is_in_recovery is false)`,
          'check that --read-db / PLANTSTORE_READ_DB names the replica, not another primary',
        );
  } catch (err) {
    return fail('read replica', `cannot reach ${where}: ${reason(err)}`, 'start the replica, or correct --read-db / PLANTSTORE_READ_DB');
  }
}
