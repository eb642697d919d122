import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { request } from 'node:http';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import pg from 'pg';
import { OPERATOR } from '../src/catalogue/access-rule.js';
import { openStore } from '../src/store/open-store.js';
import { serverCpuSeconds } from './process-cpu.js';

// The event rows of `npm run bench`: how fast the outbox drains to webhook receivers, beside a bare sender posting
// signed bodies to the same receiver at the same concurrency, in alternating rounds; how long a committed plant
// takes to arrive; and whether one hanging endpoint slows the others.

export interface EventBenchContext {
  cli: string;
  root: string;
  dir: string;
  rounds: number;
  log: (line: string) => void;
  startService(db: string, env?: NodeJS.ProcessEnv): Promise<{ url: string; process: ChildProcess; stop(): Promise<void> }>;
  importRecords(db: string, records: object[]): void;
}

/** Where the PostgreSQL rows run (a URL without a schema, and how to drop one), or why they do not. */
export type EventsPostgres = { url: string; drop(schema: string): Promise<void> } | string;

const PENDING = 20_000;
/** The dispatcher's defaults, which the bare sender matches. */
const ENDPOINT_CONCURRENCY = 8;
const CONCURRENCY = 64;
const SERVE_ENV = { PLANTSTORE_WEBHOOK_ALLOW_PRIVATE: 'true', PLANTSTORE_WRITE_RATE_LIMIT: 'off', PLANTSTORE_RATE_LIMIT: 'off' };

export interface DrainRow {
  backend: string;
  endpoints: number;
  pending: number;
  perSecond: number;
  cpuMsPerDelivery: number;
  bare: { perSecond: number; cpuMsPerDelivery: number };
  ratio: number;
  roundRatios: number[];
  duplicates: number;
}

export interface LatencyRow {
  backend: string;
  writer: string;
  writes: number;
  p50Ms: number;
  p99Ms: number;
  lost: number;
}

export interface HangingRow {
  healthyPerSecond: number;
  withoutHangingPerSecond: number;
  ratio: number;
}

export interface EventResults {
  drains: DrainRow[];
  latency: LatencyRow[];
  hanging: HangingRow;
  postgresSkipped?: string;
}

interface Counts {
  byPath: Record<string, number>;
  unique: number;
  duplicates: number;
}

interface Receiver {
  base: string;
  /** The counts alone: what a drain polls, so that the receiver spends its time receiving, as for the bare sender. */
  counts(): Promise<Counts>;
  state(): Promise<Counts & { arrivals: Record<string, number> }>;
  reset(): Promise<void>;
  stop(): void;
}

async function startReceiver(root: string): Promise<Receiver> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'bench', 'webhook-receiver.ts')], {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const port = await new Promise<string>((resolve, reject) => {
    child.stdout.on('data', (chunk: Buffer) => {
      const match = /listening (\d+)/.exec(chunk.toString());
      if (match) resolve(match[1]!);
    });
    child.once('exit', () => reject(new Error('the bench receiver exited')));
  });
  const base = `http://127.0.0.1:${port}`;
  // A new connection each call: a kept-alive one may be closed by the receiver just as it is reused.
  const call = (path: string, method = 'GET') =>
    new Promise<unknown>((resolve, reject) => {
      const req = request(`${base}${path}`, { method, agent: false }, (res) => {
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (text += chunk));
        res.on('end', () => resolve(JSON.parse(text)));
      });
      req.on('error', reject);
      req.end();
    });
  return {
    base,
    counts: () => call('/_counts') as ReturnType<Receiver['counts']>,
    state: () => call('/_state') as ReturnType<Receiver['state']>,
    reset: async () => void (await call('/_reset', 'POST')),
    stop: () => child.kill(),
  };
}

const percentile = (values: number[], p: number) => {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))] ?? NaN;
};
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const delivered = (state: Counts, paths: readonly string[]) => paths.reduce((sum, path) => sum + (state.byPath[path] ?? 0), 0);

/** A database with `paths` registered as endpoints at the receiver and `plants` plants imported: their deliveries wait. */
function prepare(c: EventBenchContext, db: string, receiver: Receiver, paths: readonly string[], plants: number): void {
  c.importRecords(db, [
    { type: 'user', name: 'user0', admin: true },
    { type: 'user', name: 'user1' },
  ]);
  for (const path of paths) {
    const run = spawnSync(process.execPath, [c.cli, '--db', db, 'webhooks', 'add', `${receiver.base}${path}`, '--webhook-allow-private']);
    if (run.status !== 0) throw new Error(`webhooks add failed: ${String(run.stderr)}`);
  }
  if (plants > 0) {
    c.importRecords(
      db,
      Array.from({ length: plants }, (_, i) => ({ type: 'plant', id: i + 1, name: `Plant ${i + 1}`, tag: 'bench', owner: 'user1' })),
    );
  }
}

/** Makes every delivery of `db` pending and due again, as the import left them. */
async function pendAgain(db: string): Promise<void> {
  const reset =
    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = 0, lease_until = NULL, last_attempt_at = NULL, last_status = NULL, last_error = NULL";
  if (!db.startsWith('postgres')) {
    const sqlite = new Database(db);
    sqlite.exec(reset);
    sqlite.close();
    return;
  }
  const url = new URL(db);
  const schema = url.searchParams.get('schema')!;
  url.searchParams.delete('schema');
  const client = new pg.Client({ connectionString: url.toString() });
  await client.connect();
  await client.query(`SET search_path TO ${schema}`);
  await client.query(reset);
  await client.query('VACUUM ANALYZE webhook_deliveries');
  await client.end();
}

/**
 * One drain by `instances` serving processes on the one database: from ready to the last of `expected` deliveries
 * at `paths`; CPU is theirs together.
 */
async function drainOnce(c: EventBenchContext, db: string, receiver: Receiver, paths: readonly string[], expected: number, instances = 1) {
  await pendAgain(db);
  await receiver.reset();
  const services = await Promise.all(Array.from({ length: instances }, () => c.startService(db, SERVE_ENV)));
  const cpuSeconds = () => services.reduce((sum, service) => sum + serverCpuSeconds(service.process.pid!), 0);
  try {
    const t0 = performance.now();
    const cpu0 = cpuSeconds();
    let state = await receiver.counts();
    const before = delivered(state, paths);
    const deadline = Date.now() + 600_000;
    while (delivered(state, paths) < expected) {
      if (Date.now() > deadline) throw new Error(`drain stalled at ${delivered(state, paths)} of ${expected}`);
      await sleep(20);
      state = await receiver.counts();
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = cpuSeconds() - cpu0;
    const count = expected - before;
    return { perSecond: count / seconds, cpuMsPerDelivery: (cpu * 1000) / count, duplicates: state.duplicates };
  } finally {
    await Promise.all(services.map((service) => service.stop()));
  }
}

async function bareOnce(c: EventBenchContext, receiver: Receiver, paths: readonly string[], count: number) {
  await receiver.reset();
  const run = spawnSync(
    process.execPath,
    [
      '--import',
      'tsx',
      join(c.root, 'bench', 'bare-sender.ts'),
      '--urls',
      paths.map((p) => `${receiver.base}${p}`).join(','),
      '--count',
      String(count),
      '--endpoint-concurrency',
      String(ENDPOINT_CONCURRENCY),
      '--concurrency',
      String(CONCURRENCY),
    ],
    { encoding: 'utf8' },
  );
  if (run.status !== 0) throw new Error(`bare sender failed: ${run.stderr}`);
  const { seconds, cpuSeconds } = JSON.parse(run.stdout) as { seconds: number; cpuSeconds: number };
  return { perSecond: count / seconds, cpuMsPerDelivery: (cpuSeconds * 1000) / count };
}

const paths = (n: number) => Array.from({ length: n }, (_, i) => `/e${i + 1}`);
const mean = (values: number[]) => values.reduce((a, b) => a + b, 0) / values.length;

async function drainRow(
  c: EventBenchContext,
  backend: string,
  db: string,
  receiver: Receiver,
  endpoints: number,
  instances = 1,
): Promise<DrainRow> {
  const at = paths(endpoints);
  prepare(c, db, receiver, at, PENDING / endpoints);
  const ours: Array<Awaited<ReturnType<typeof drainOnce>>> = [];
  const bare: Array<Awaited<ReturnType<typeof bareOnce>>> = [];
  for (let round = 0; round < c.rounds; round++) {
    ours.push(await drainOnce(c, db, receiver, at, PENDING, instances));
    bare.push(await bareOnce(c, receiver, at, PENDING));
    c.log(
      `  ${backend}, ${endpoints} endpoint(s), round ${round + 1}: ${ours.at(-1)!.perSecond.toFixed(0)}/s (${ours.at(-1)!.cpuMsPerDelivery.toFixed(3)} ms CPU each) against the bare sender's ${bare.at(-1)!.perSecond.toFixed(0)}/s`,
    );
  }
  const perSecond = mean(ours.map((o) => o.perSecond));
  const barePerSecond = mean(bare.map((b) => b.perSecond));
  return {
    backend,
    endpoints,
    pending: PENDING,
    perSecond,
    cpuMsPerDelivery: mean(ours.map((o) => o.cpuMsPerDelivery)),
    bare: { perSecond: barePerSecond, cpuMsPerDelivery: mean(bare.map((b) => b.cpuMsPerDelivery)) },
    ratio: perSecond / barePerSecond,
    roundRatios: ours.map((o, i) => o.perSecond / bare[i]!.perSecond),
    duplicates: ours.reduce((sum, o) => sum + o.duplicates, 0),
  };
}

/** Plants committed at 20 a second, each timed from just before its write to its arrival at the receiver. */
async function latencyRow(
  c: EventBenchContext,
  backend: string,
  db: string,
  receiver: Receiver,
  writer: 'the serving process (POST /plants)' | 'another process (the store library, as the CLI)',
): Promise<LatencyRow> {
  prepare(c, db, receiver, ['/e1'], 0);
  const service = await c.startService(db, SERVE_ENV);
  const store = await openStore({ db });
  const { token, hash } = (await import('../src/catalogue/tokens.js')).generateToken();
  await store.tokens.add({ user: 'user1', hash, label: 'bench' });
  await receiver.reset();
  const sent: Record<number, number> = {};
  const writes = 300;
  try {
    await sleep(1_000);
    const started = performance.now();
    for (let i = 1; i <= writes; i++) {
      sent[i] = performance.timeOrigin + performance.now();
      if (writer.startsWith('the serving')) {
        const res = await fetch(`${service.url}/plants`, {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ id: i, name: `Timed ${i}` }),
        });
        if (res.status !== 200) throw new Error(`POST /plants answered ${res.status}`);
      } else {
        await store.plants.create(OPERATOR, { id: i, name: `Timed ${i}`, owner: 'user1', public: false });
      }
      const wait = started + (i * 1000) / 20 - performance.now();
      if (wait > 0) await sleep(wait);
    }
    await sleep(2_000);
    const { arrivals } = await receiver.state();
    const latencies = Object.entries(sent).flatMap(([id, at]) => (arrivals[id] === undefined ? [] : [arrivals[id] - at]));
    return { backend, writer, writes, p50Ms: percentile(latencies, 50), p99Ms: percentile(latencies, 99), lost: writes - latencies.length };
  } finally {
    await store.close();
    await service.stop();
  }
}

/** Nine healthy endpoints with a tenth that never answers, against the nine alone, alternately (SQLite). */
async function hangingRow(c: EventBenchContext, receiver: Receiver): Promise<HangingRow> {
  const healthy = paths(9);
  const per = 2_000;
  const withHanging = join(c.dir, 'events-hanging.db');
  const without = join(c.dir, 'events-nine.db');
  prepare(c, withHanging, receiver, [...healthy, '/hang'], per);
  prepare(c, without, receiver, healthy, per);
  const rates: { with: number[]; without: number[] } = { with: [], without: [] };
  for (let round = 0; round < c.rounds; round++) {
    rates.with.push((await drainOnce(c, withHanging, receiver, healthy, 9 * per)).perSecond);
    rates.without.push((await drainOnce(c, without, receiver, healthy, 9 * per)).perSecond);
    c.log(
      `  one hanging endpoint, round ${round + 1}: the nine others ${rates.with.at(-1)!.toFixed(0)}/s, alone ${rates.without.at(-1)!.toFixed(0)}/s`,
    );
  }
  const healthyPerSecond = mean(rates.with);
  const withoutHangingPerSecond = mean(rates.without);
  return { healthyPerSecond, withoutHangingPerSecond, ratio: healthyPerSecond / withoutHangingPerSecond };
}

export async function measureEvents(c: EventBenchContext, postgres: EventsPostgres): Promise<EventResults> {
  const receiver = await startReceiver(c.root);
  const schemas: string[] = [];
  const pgDb = (name: string) => {
    if (typeof postgres === 'string') throw new Error(postgres);
    const schema = `bench_events_${process.pid}_${name}`;
    schemas.push(schema);
    return `${postgres.url}${postgres.url.includes('?') ? '&' : '?'}schema=${schema}`;
  };
  try {
    const drains: DrainRow[] = [];
    const latency: LatencyRow[] = [];
    c.log(`events: draining ${PENDING} pending deliveries, against a bare sender, in alternating rounds…`);
    for (const endpoints of [1, 10])
      drains.push(await drainRow(c, 'SQLite', join(c.dir, `events-drain-${endpoints}.db`), receiver, endpoints));
    if (typeof postgres !== 'string') {
      for (const endpoints of [1, 10]) drains.push(await drainRow(c, 'PostgreSQL', pgDb(`drain${endpoints}`), receiver, endpoints));
      // Instances share the outbox: each claims what the other does not hold (FOR UPDATE SKIP LOCKED).
      drains.push(await drainRow(c, 'PostgreSQL, two instances', pgDb('drain1x2'), receiver, 1, 2));
    }
    c.log('events: commit to arrival at 20 writes a second…');
    latency.push(await latencyRow(c, 'SQLite', join(c.dir, 'events-latency.db'), receiver, 'the serving process (POST /plants)'));
    if (typeof postgres !== 'string') {
      latency.push(await latencyRow(c, 'PostgreSQL', pgDb('latency'), receiver, 'the serving process (POST /plants)'));
      latency.push(await latencyRow(c, 'PostgreSQL', pgDb('latency2'), receiver, 'another process (the store library, as the CLI)'));
    }
    for (const row of latency)
      c.log(`  ${row.backend}, written by ${row.writer}: p50 ${row.p50Ms.toFixed(1)} ms, p99 ${row.p99Ms.toFixed(1)} ms`);
    c.log('events: one hanging endpoint among ten…');
    const hanging = await hangingRow(c, receiver);
    return { drains, latency, hanging, ...(typeof postgres === 'string' ? { postgresSkipped: postgres } : {}) };
  } finally {
    receiver.stop();
    if (typeof postgres !== 'string') for (const schema of schemas) await postgres.drop(schema);
  }
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });

export function renderEvents(e: EventResults): { section: string[]; targets: string[] } {
  const verdict = (ok: boolean) => (ok ? 'met' : '**NOT met**');
  const section = [
    '## Events (the new-plant webhook)',
    '',
    `Drain: ${fmt(PENDING)} deliveries pending (queued by an import while no server ran; with 10 endpoints, 2,000 plants ` +
      'each), sent by `serve` with its defaults (at most 8 in flight to one endpoint, 64 in all) to a bare `node:http` ' +
      "receiver in a process of its own; timed from the service's first answer to the last delivery. Its limit, in " +
      'alternating rounds: a bare Node loop (`bench/bare-sender.ts`) posting signed bodies over kept-alive `node:http` ' +
      "connections to the same receiver at the same concurrency, storing nothing. CPU is the sending processes' own " +
      '(both instances together on the two-instance row, each started anew for its round like the others).',
    '',
    '| backend | endpoints | deliveries/s | CPU ms/delivery | bare sender/s | its CPU ms/delivery | ratio (rounds) | duplicates |',
    '|---|---|---|---|---|---|---|---|',
    ...e.drains.map(
      (r) =>
        `| ${r.backend} | ${r.endpoints} | ${fmt(r.perSecond)} | ${fmt(r.cpuMsPerDelivery, 3)} | ${fmt(r.bare.perSecond)} | ${fmt(r.bare.cpuMsPerDelivery, 3)} | ${fmt(r.ratio, 2)} (${r.roundRatios.map((x) => fmt(x, 2)).join(', ')}) | ${r.duplicates} |`,
    ),
    ...(e.postgresSkipped ? [`| PostgreSQL | skipped: ${e.postgresSkipped} | | | | | | |`] : []),
    '',
    'Commit to arrival: 300 plants written at 20 a second, each timed from just before its write to its arrival.',
    '',
    '| backend | written by | p50 ms | p99 ms | not arrived |',
    '|---|---|---|---|---|',
    ...e.latency.map((r) => `| ${r.backend} | ${r.writer} | ${fmt(r.p50Ms, 1)} | ${fmt(r.p99Ms, 1)} | ${r.lost} |`),
    '',
    `One endpoint that accepts and never answers among ten (SQLite, 2,000 plants each): the nine others drain ` +
      `${fmt(e.hanging.healthyPerSecond)} deliveries/s, against ${fmt(e.hanging.withoutHangingPerSecond)}/s with the nine alone ` +
      `(ratio ${fmt(e.hanging.ratio, 2)}).`,
  ];
  const targets = [
    ...e.drains.map(
      (r) =>
        `| events: drain, ${r.backend}, ${r.endpoints} endpoint(s), ≥ 0.5 of the bare sender | ${fmt(r.ratio, 2)} | ${verdict(r.ratio >= 0.5)} |`,
    ),
    ...e.latency.map((r) => {
      const inWriter = r.writer.startsWith('the serving');
      const ok = inWriter ? r.p50Ms < 10 && r.p99Ms < 50 : r.p99Ms < 250;
      const target = inWriter ? 'p50 < 10 ms, p99 < 50 ms' : 'p99 < 250 ms';
      return `| events: commit to arrival, ${r.backend}, written by ${r.writer}: ${target} | p50 ${fmt(r.p50Ms, 1)}, p99 ${fmt(r.p99Ms, 1)} ms | ${verdict(ok && r.lost === 0)} |`;
    }),
    `| events: one hanging endpoint among ten, the others ≥ 0.8 of their rate without it | ${fmt(e.hanging.ratio, 2)} | ${verdict(e.hanging.ratio >= 0.8)} |`,
    `| events: no duplicate in the drains (by webhook-id) | ${e.drains.reduce((s, r) => s + r.duplicates, 0)} | ${verdict(e.drains.every((r) => r.duplicates === 0))} |`,
  ];
  return { section, targets };
}
