import { spawn, type ChildProcess } from 'node:child_process';
import { createWriteStream, statSync } from 'node:fs';
import { once } from 'node:events';
import { Agent, request } from 'node:http';
import { join } from 'node:path';
import pg from 'pg';
import type { CatalogueRecord } from '../src/import-format/records.js';
import { DEFAULT_SPEC, generateCatalogue, userName, type CatalogueSpec } from './catalogue.js';

// The large-group rows of `npm run bench`, each beside its limit measured in the same run:
// - an import with groups (1,000 groups of 20 members, every plant shared with one) against the same plants
//   without groups, in time and in size;
// - joining a group given every plant of the catalogue, and sharing a plant with a group of 10^5 members, while
//   another user reads pages, another creates plants and /healthz is polled: each change's time, and the other
//   users' latencies against the flood bounds (50 ms).

export interface LargeGroupContext {
  root: string;
  dir: string;
  plants: number;
  log: (line: string) => void;
  startService(db: string, env?: NodeJS.ProcessEnv): Promise<{ url: string; process: ChildProcess; stop(): Promise<void> }>;
  /** Imports the NDJSON file with the CLI; the wall-clock seconds it took. */
  importFile(db: string, file: string): number;
  /** Tokens for the users named, in that order. */
  tokensFor(db: string, users: readonly string[]): Promise<string[]>;
}

export interface PostgresTarget {
  /** The `--db` URL of a fresh schema named `schema`. */
  url(schema: string): string;
  drop(schema: string): Promise<void>;
}

interface Latencies {
  count: number;
  p99Ms: number;
  maxMs: number;
  failures: number;
}

export interface LargeGroupBackend {
  imports: { withGroups: { seconds: number; bytes: number }; without: { seconds: number; bytes: number } };
  join: number[];
  leave: number[];
  share: number[];
  unshare: number[];
  failures: string[];
  others: { page: Latencies; create: Latencies; healthz: Latencies };
}

export type LargeGroupResults = Record<string, LargeGroupBackend>;

const CROWD = 100_000;
const GROUPS = 1_000;
const MEMBERS = 20;
const CHANGES = 10;
const FLOOD_BOUND_MS = 50;

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const median = (xs: number[]) => (xs.length === 0 ? NaN : [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!);
const max = (xs: number[]) => (xs.length === 0 ? NaN : Math.max(...xs));

async function writeFile(file: string, records: Iterable<CatalogueRecord>): Promise<void> {
  const out = createWriteStream(file);
  for (const record of records) if (!out.write(`${JSON.stringify(record)}\n`)) await once(out, 'drain');
  out.end();
  await once(out, 'finish');
}

/** Every plant of `spec` shared with one of GROUPS groups of MEMBERS members each (or with none). */
function* importCatalogue(plants: number, withGroups: boolean): Generator<CatalogueRecord> {
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants, users: GROUPS * MEMBERS + 1, groups: 0, sharedWithGroup: 0 };
  let p = 0;
  for (const record of generateCatalogue(spec)) {
    if (record.type === 'plant' && p === 0 && withGroups) {
      for (let g = 0; g < GROUPS; g++) {
        yield { type: 'group', name: `team${g}`, members: Array.from({ length: MEMBERS }, (_, m) => userName(1 + g * MEMBERS + m)) };
      }
    }
    if (record.type === 'plant') {
      if (withGroups) record.sharedWith = [...(record.sharedWith ?? []), `group:team${p % GROUPS}`];
      p++;
    }
    yield record;
  }
}

/**
 * Every plant owned by user1 and shared with group `all` (user1 its one member), a group `crowd` of CROWD members,
 * and the users who join `all` one by one (joiner0…) and those whose requests are measured meanwhile.
 */
function* changesCatalogue(plants: number): Generator<CatalogueRecord> {
  for (const name of ['user0', 'user1', 'reader', 'creator']) yield { type: 'user', name, admin: name === 'user0' };
  for (let i = 0; i < CHANGES; i++) yield { type: 'user', name: `joiner${i}` };
  for (let i = 0; i < CROWD; i++) yield { type: 'user', name: `crowd${i}` };
  yield { type: 'group', name: 'all', members: ['user1'] };
  yield { type: 'group', name: 'crowd', members: Array.from({ length: CROWD }, (_, i) => `crowd${i}`) };
  yield { type: 'plant', id: 1, name: 'Shared with the crowd', owner: 'user1' };
  for (let p = 0; p < plants; p++) yield { type: 'plant', id: p + 2, name: `Plant #${p}`, owner: 'user1', sharedWith: ['group:all'] };
}

/** The bytes the database holds: the SQLite file and its WAL, or every relation of the schema. */
async function sizeOf(db: string): Promise<number> {
  if (!db.startsWith('postgres')) {
    const wal = (() => {
      try {
        return statSync(`${db}-wal`).size;
      } catch {
        return 0;
      }
    })();
    return statSync(db).size + wal;
  }
  const url = new URL(db);
  const schema = url.searchParams.get('schema')!;
  url.search = '';
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  try {
    const { rows } = await client.query<{ bytes: string }>(
      `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) AS bytes FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
       WHERE n.nspname = $1 AND c.relkind = 'r'`,
      [schema],
    );
    return Number(rows[0]!.bytes);
  } finally {
    await client.end();
  }
}

/** Sends requests one after another until `stop()`, recording each one's latency. */
function loop(send: () => Promise<number>): { stop(): Promise<Latencies> } {
  const latencies: number[] = [];
  let failures = 0;
  let running = true;
  const done = (async () => {
    while (running) {
      const started = performance.now();
      const status = await send().catch(() => 0);
      latencies.push(performance.now() - started);
      if (status < 200 || status >= 300) failures++;
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      const sorted = latencies.sort((a, b) => a - b);
      return { count: sorted.length, p99Ms: sorted[Math.floor(sorted.length * 0.99)] ?? NaN, maxMs: sorted.at(-1) ?? NaN, failures };
    },
  };
}

function send(agent: Agent, base: string, method: string, path: string, token?: string, body?: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${base}${path}`,
      {
        method,
        agent,
        headers: {
          ...(token ? { authorization: `Bearer ${token}` } : {}),
          ...(body ? { 'content-type': 'application/json' } : {}),
        },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body);
  });
}

async function measureBackend(ctx: LargeGroupContext, fresh: (name: string) => Promise<string>): Promise<LargeGroupBackend> {
  const imports = {} as LargeGroupBackend['imports'];
  for (const withGroups of [false, true]) {
    const db = await fresh(withGroups ? 'with_groups' : 'without_groups');
    const file = join(ctx.dir, `large-groups-${withGroups}.ndjson`);
    await writeFile(file, importCatalogue(ctx.plants, withGroups));
    ctx.log(`  importing ${fmt(ctx.plants)} plants ${withGroups ? `with ${GROUPS} groups of ${MEMBERS}` : 'without groups'}…`);
    const seconds = ctx.importFile(db, file);
    imports[withGroups ? 'withGroups' : 'without'] = { seconds, bytes: await sizeOf(db) };
  }
  const db = await fresh('changes');
  const file = join(ctx.dir, 'large-groups-changes.ndjson');
  await writeFile(file, changesCatalogue(ctx.plants));
  ctx.log(`  importing a group given ${fmt(ctx.plants)} plants and one of ${fmt(CROWD)} members…`);
  ctx.importFile(db, file);
  const [owner, reader, creator] = await ctx.tokensFor(db, ['user1', 'reader', 'creator']);
  const service = await ctx.startService(db, { PLANTSTORE_WRITE_RATE_LIMIT: 'off', PLANTSTORE_RATE_LIMIT: 'off' });
  const agent = new Agent({ keepAlive: true, maxSockets: 8 });
  const result: LargeGroupBackend = {
    imports,
    join: [],
    leave: [],
    share: [],
    unshare: [],
    failures: [],
    others: {} as LargeGroupBackend['others'],
  };
  try {
    let created = 10_000_000;
    const loops = {
      page: loop(() => send(agent, service.url, 'GET', '/plants?limit=20', reader)),
      create: loop(() =>
        send(agent, service.url, 'POST', '/plants', creator, JSON.stringify({ id: created++, name: 'During a large change' })),
      ),
      healthz: loop(() => send(agent, service.url, 'GET', '/healthz')),
    };
    ctx.log(`  ${CHANGES} joins and leaves of the group given every plant, from another process…`);
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        join(ctx.root, 'bench', 'group-changes.ts'),
        db,
        'all',
        ...Array.from({ length: CHANGES }, (_, i) => `joiner${i}`),
      ],
      { stdio: ['ignore', 'pipe', 'inherit'] },
    );
    let out = '';
    child.stdout.on('data', (chunk) => (out += String(chunk)));
    await once(child, 'exit');
    const changes = JSON.parse(out) as { join: number[]; leave: number[]; failures: string[] };
    result.join = changes.join;
    result.leave = changes.leave;
    result.failures.push(...changes.failures.map((f) => `join or leave: ${f}`));
    ctx.log(`  ${CHANGES} shares and unshares of a plant with the group of ${fmt(CROWD)}, over HTTP…`);
    for (let i = 0; i < CHANGES; i++) {
      for (const [method, into] of [
        ['PUT', result.share],
        ['DELETE', result.unshare],
      ] as const) {
        const started = performance.now();
        const status = await send(agent, service.url, method, '/plants/1/access/groups/crowd', owner);
        if (status === 204) into.push(performance.now() - started);
        else result.failures.push(`${method} answered ${status}`);
      }
    }
    result.others = { page: await loops.page.stop(), create: await loops.create.stop(), healthz: await loops.healthz.stop() };
  } finally {
    agent.destroy();
    await service.stop();
  }
  return result;
}

export async function measureLargeGroups(ctx: LargeGroupContext, postgres: PostgresTarget | string): Promise<LargeGroupResults> {
  const results: LargeGroupResults = {};
  ctx.log(`\nlarge groups: SQLite…`);
  results.sqlite = await measureBackend(ctx, async (name) => join(ctx.dir, `large-groups-${name}.db`));
  if (typeof postgres === 'string') return results;
  ctx.log(`large groups: PostgreSQL…`);
  const schemas: string[] = [];
  try {
    results.postgres = await measureBackend(ctx, async (name) => {
      const schema = `bench_large_groups_${name}_${process.pid}`;
      schemas.push(schema);
      return postgres.url(schema);
    });
  } finally {
    for (const schema of schemas) await postgres.drop(schema);
  }
  return results;
}

export function renderLargeGroups(results: LargeGroupResults, plants: number): { section: string[]; targets: string[] } {
  const ms = (xs: number[]) => (xs.length === 0 ? '–' : `${fmt(median(xs), 1)} (max ${fmt(max(xs), 1)})`);
  const section = [
    `## Large groups (${fmt(plants)} plants)`,
    '',
    `Imports of ${fmt(plants)} plants with ${fmt(GROUPS)} groups of ${MEMBERS} members (every plant shared with one) against the ` +
      `same plants without groups; then, on a catalogue whose every plant is shared with one group, ${CHANGES} users joining and ` +
      `leaving that group (from another process, through the Store) and ${CHANGES} shares and unshares of a plant with a group of ` +
      `${fmt(CROWD)} members (over HTTP), while another user reads first pages, another creates plants and \`/healthz\` is polled, ` +
      'each one request after another. Times in ms, median (max).',
    '',
    '| backend | import without groups | import with groups | size without | size with | join | leave | share | unshare | others: page p99 / max | create p99 / max | /healthz p99 / max |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  ];
  const targets: string[] = [];
  for (const [backend, r] of Object.entries(results)) {
    const name = backend === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    const { withGroups, without } = r.imports;
    const mb = (bytes: number) => `${fmt(bytes / 2 ** 20)} MB`;
    const o = r.others;
    const lat = (l: Latencies) => `${fmt(l.p99Ms, 1)} / ${fmt(l.maxMs, 1)}`;
    section.push(
      `| ${name} | ${fmt(without.seconds, 1)} s | ${fmt(withGroups.seconds, 1)} s | ${mb(without.bytes)} | ${mb(withGroups.bytes)} | ` +
        `${ms(r.join)} | ${ms(r.leave)} | ${ms(r.share)} | ${ms(r.unshare)} | ${lat(o.page)} | ${lat(o.create)} | ${lat(o.healthz)} |`,
    );
    if (r.failures.length > 0) section.push('', `${name}: ${r.failures.length} changes failed: ${r.failures.slice(0, 3).join('; ')}`);
    const timeRatio = withGroups.seconds / without.seconds;
    const sizeRatio = withGroups.bytes / without.bytes;
    targets.push(
      `| ${name}: an import with groups ≤ 1.5 × the time and size of one without | ${fmt(timeRatio, 2)} × time, ${fmt(sizeRatio, 2)} × size | ${verdict(timeRatio <= 1.5 && sizeRatio <= 1.5)} |`,
    );
    const finished = r.failures.length === 0 && r.join.length === CHANGES && r.share.length === CHANGES;
    const worst = Math.max(o.page.p99Ms, o.create.p99Ms, o.healthz.p99Ms);
    targets.push(
      `| ${name}: joins of a group of ${fmt(plants)} plants and shares with a group of ${fmt(CROWD)} members finish; others' GET, POST and /healthz p99 < ${FLOOD_BOUND_MS} ms meanwhile | ` +
        `joins ${fmt(max(r.join), 1)} ms, shares ${fmt(max(r.share), 1)} ms at most; others' p99 ${fmt(worst, 1)} ms | ${verdict(finished && worst < FLOOD_BOUND_MS)} |`,
    );
  }
  return { section, targets };
}

const verdict = (ok: boolean) => (ok ? 'met' : '**NOT met**');
