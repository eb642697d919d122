import { DEFAULT_MIGRATION_TABLE } from 'kysely';
import { activeTokenSql } from '../../catalogue/tokens.js';
import { MAX_PLANT_ID } from '../../catalogue/plant-ids.js';
import { knownMigrationNames } from '../../store/migrations/index.js';
import { WAITING_DELIVERY } from '../../store/webhook-outbox.js';
import { urlRefusal } from '../../webhooks/endpoint-address.js';
import { VERSION } from '../../version.js';

export type Status = 'ok' | 'warn' | 'fail' | 'skip';

/** One line of `plantstore doctor`: what was checked, how it went and, when it did not go well, what to do. */
export interface Check {
  check: string;
  status: Status;
  detail: string;
  fix?: string;
}

export const ok = (check: string, detail: string): Check => ({ check, status: 'ok', detail });
export const warn = (check: string, detail: string, fix: string): Check => ({ check, status: 'warn', detail, fix });
export const fail = (check: string, detail: string, fix: string): Check => ({ check, status: 'fail', detail, fix });
export const skip = (check: string, detail: string): Check => ({ check, status: 'skip', detail });

/** The few read-only queries the schema and count checks need, whichever the backend. */
export interface Inspector {
  backend: 'sqlite' | 'postgres';
  tableExists(name: string): Promise<boolean>;
  /** Every row, its columns in order. */
  rows(sql: string): Promise<unknown[][]>;
}

/** The tables the first migration makes, which a schema of another program may hold under the same names. */
const FIRST_TABLES = ['users', 'groups', 'group_members', 'plants', 'plant_user_grants', 'plant_group_grants', 'tokens'];

/** The first column of every row. */
const column = async (db: Inspector, sql: string): Promise<unknown[]> => (await db.rows(sql)).map((row) => row[0]);

/** Compares the migrations a database records with the ones this version knows; never migrates. */
export async function schemaChecks(db: Inspector, webhookAllowPrivate: boolean): Promise<Check[]> {
  const recorded = await db.tableExists(DEFAULT_MIGRATION_TABLE);
  // Tables of Plant Store's names that no migration of it made: migrate would fail on the first of them.
  const applied = recorded ? (await column(db, `SELECT name FROM ${DEFAULT_MIGRATION_TABLE} ORDER BY name`)).map(String) : [];
  if (applied.length === 0) {
    const taken: string[] = [];
    for (const table of FIRST_TABLES) if (await db.tableExists(table)) taken.push(table);
    if (taken.length > 0) {
      return [
        fail(
          'schema',
          `the database holds tables named as Plant Store's (${taken.join(', ')}) that no Plant Store migration made: another program's?`,
          'point --db / PLANTSTORE_DB at a database of its own, or on PostgreSQL a schema of its own (?schema=NAME)',
        ),
        skip('counts', 'not a Plant Store schema'),
      ];
    }
  }
  if (!recorded) {
    return [
      warn(
        'schema',
        'no Plant Store schema in this database yet',
        'run "plantstore migrate" (serve and every other command also create it)',
      ),
      skip('counts', 'no schema'),
    ];
  }
  const known = knownMigrationNames();
  const unknown = applied.filter((name) => !known.includes(name));
  const pending = known.filter((name) => !applied.includes(name));
  if (unknown.length > 0) {
    return [
      fail(
        'schema',
        `the database has migrations this plantstore ${VERSION} does not know (${unknown.join(', ')}): it was written by a newer version`,
        'run the plantstore version that migrated it, or restore a backup made before the upgrade',
      ),
      skip('counts', 'schema newer than this version'),
    ];
  }
  if (pending.length > 0) {
    return [
      warn(
        'schema',
        `${pending.length} pending migration(s): ${pending.join(', ')}`,
        'run "plantstore migrate" (serve also applies them on start)',
      ),
      skip('counts', 'schema not up to date'),
    ];
  }
  return [
    ok('schema', `up to date (${known.length} migrations, latest ${known.at(-1)})`),
    await countCheck(db),
    await rowsCheck(db),
    await webhookCheck(db, webhookAllowPrivate),
  ];
}

/**
 * Webhook endpoints that are disabled (410), whose deliveries fail, or whose address every delivery will refuse
 * (a loopback or private one without private receivers allowed): a receiver someone should look at.
 */
async function webhookCheck(db: Inspector, allowPrivate: boolean): Promise<Check> {
  const count = async (sql: string) => Number((await column(db, sql))[0]);
  const endpoints = await count('SELECT count(*) FROM webhook_endpoints');
  if (endpoints === 0) return ok('webhooks', 'no endpoints registered');
  const endpointsWhere = async (where: string) =>
    (await db.rows(`SELECT p.id, p.url FROM webhook_endpoints p WHERE ${where} ORDER BY p.id`)).map(([id, url]) => ({
      id: String(id),
      url: String(url),
    }));
  const disabledEndpoints = await endpointsWhere('p.disabled_at IS NOT NULL');
  const failingEndpoints = await endpointsWhere(`p.disabled_at IS NULL AND EXISTS (SELECT 1 FROM webhook_deliveries d
         WHERE d.endpoint_id = p.id AND (d.status = 'failed' OR (d.status = 'pending' AND d.attempts > 0)))`);
  const [disabled, disabledIds] = [disabledEndpoints.map((e) => e.url), disabledEndpoints.map((e) => e.id)];
  const [failing, failingIds] = [failingEndpoints.map((e) => e.url), failingEndpoints.map((e) => e.id)];
  const enabled = (await endpointsWhere('p.disabled_at IS NULL')).map((e) => e.url);
  const refused = enabled.flatMap((url) => {
    const why = urlRefusal(new URL(url), allowPrivate);
    return why === undefined ? [] : [`${url} (${why})`];
  });
  const backlog = await count(`SELECT count(*) FROM webhook_deliveries d WHERE ${WAITING_DELIVERY}`);
  const problems = [
    ...(refused.length > 0 ? [`every delivery will be refused: ${refused.join(', ')}`] : []),
    ...(disabled.length > 0 ? [`disabled (answered 410): ${disabled.join(', ')}`] : []),
    ...(failing.length > 0 ? [`failing: ${failing.join(', ')}`] : []),
  ];
  const detail = `${endpoints} endpoint(s), ${backlog} deliveries waiting${problems.length > 0 ? `; ${problems.join('; ')}` : ''}`;
  if (problems.length === 0) return ok('webhooks', detail);
  // Retry alone sends a disabled endpoint nothing: no dispatcher claims its deliveries before it is enabled.
  const steps = [
    ...(disabledIds.length > 0
      ? [
          `"plantstore webhooks enable ID" for disabled endpoint(s) ${disabledIds.join(', ')} (retry alone sends them nothing), ` +
            'then "plantstore webhooks retry --endpoint ID" for what failed',
        ]
      : []),
    ...(failingIds.length > 0 ? [`"plantstore webhooks retry --endpoint ID" for failing endpoint(s) ${failingIds.join(', ')}`] : []),
  ];
  return warn(
    'webhooks',
    detail,
    refused.length > 0
      ? 'serve with --webhook-allow-private if the receiver is inside your network, or remove the endpoint ("plantstore webhooks remove ID")'
      : `see "plantstore webhooks deliveries"; once the receiver works: ${steps.join('; ')}`,
  );
}

/** Ids of plants shown in a finding, at most. */
const NAMED_ROWS = 10;

/**
 * Rows that plain SQL can write and the service cannot serve as they are: a plant whose owner is no user (no
 * listing or export shows it), without an id in the API, or with a name or tag that is empty or not text (an
 * export writes it, and an import of that file refuses it); an empty user or group name; on SQLite, whose
 * foreign keys hold only for connections that turn them on, any row whose key names a row that is gone.
 */
async function rowsCheck(db: Inspector): Promise<Check> {
  const sqlite = db.backend === 'sqlite';
  const notText = (field: string) => (sqlite ? ` OR typeof(${field}) <> 'text'` : '');
  const kinds: Array<[string, string]> = [
    ['whose owner is no user', 'NOT EXISTS (SELECT 1 FROM users u WHERE u.id = p.owner_id)'],
    ['without an id in the API', `p.api_id IS NULL${sqlite ? " OR typeof(p.api_id) <> 'integer'" : ''}`],
    ["whose id is outside the API's (1 to 2^53 - 1)", `p.api_id < 1 OR p.api_id > ${MAX_PLANT_ID}`],
    ['whose name is empty or not text', `p.name = ''${notText('p.name')}`],
    ['whose tag is empty or not text', `p.tag IS NOT NULL AND (p.tag = ''${notText('p.tag')})`],
  ];
  const problems: string[] = [];
  for (const [what, where] of kinds) {
    const rows = await db.rows(`SELECT p.id, p.api_id FROM plants p WHERE ${where} ORDER BY p.id`);
    if (rows.length === 0) continue;
    const named = rows
      .slice(0, NAMED_ROWS)
      .map(([id, apiId]) =>
        /^[1-9][0-9]*$/.test(String(apiId)) && Number(apiId) <= MAX_PLANT_ID ? `id ${String(apiId)}` : `row ${String(id)}`,
      );
    problems.push(`${rows.length} plant(s) ${what} (${named.join(', ')}${rows.length > NAMED_ROWS ? ', …' : ''})`);
  }
  for (const table of ['users', 'groups']) {
    const [[empty]] = (await db.rows(`SELECT count(*) FROM ${table} WHERE name = ''${notText('name')}`)) as [[unknown]];
    if (Number(empty) > 0) problems.push(`${Number(empty)} ${table === 'users' ? 'user' : 'group'}(s) whose name is empty or not text`);
  }
  if (sqlite) {
    const broken = await db.rows('PRAGMA foreign_key_check');
    if (broken.length > 0) {
      const tables = [...new Set(broken.map(([table]) => String(table)))].join(', ');
      problems.push(`${broken.length} row(s) whose key names a row that is gone (in ${tables})`);
    }
  }
  if (problems.length === 0) return ok('rows', 'every plant has an owner, an id and a name; every key names a row');
  return fail(
    'rows',
    problems.join('; '),
    'correct or delete these rows with SQL (a backup first), then run doctor again: until then listings and exports leave them out or write what an import refuses',
  );
}

async function countCheck(db: Inspector): Promise<Check> {
  // One query at a time: the PostgreSQL inspector is a single connection.
  const count = async (sql: string) => Number((await column(db, sql))[0]);
  const users = await count('SELECT count(*) FROM users');
  const admins = await count('SELECT count(*) FROM users WHERE is_admin = 1');
  const plants = await count('SELECT count(*) FROM plants');
  const tokens = await count('SELECT count(*) FROM tokens');
  // The time is written into the statement: placeholders differ per backend.
  const active = await count(`SELECT count(*) FROM tokens WHERE ${activeTokenSql(Date.now())}`);
  const detail = `${users} users (${admins} admins), ${plants} plants, ${tokens} tokens (${active} active)`;
  if (users === 0)
    return warn('counts', detail, 'add a user with "plantstore users add NAME" (or load a catalogue with "plantstore import")');
  return ok('counts', detail);
}

/** The message of an error, or of the first of an AggregateError (a host name that resolves to several addresses). */
export function reason(err: unknown): string {
  const first: unknown = err instanceof AggregateError && err.errors.length > 0 ? err.errors[0] : err;
  const e = first as { message?: string; code?: string };
  return e.message || e.code || String(first);
}
