import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generateToken } from '../src/catalogue/tokens.js';
import { openStore } from '../src/store/open-store.js';
import type { CatalogueRecord } from '../src/import-format/records.js';
import { DEFAULT_SPEC, generateCatalogue, manyGroupsCatalogue, MANY_GROUPS, userName, type CatalogueSpec } from './catalogue.js';
import { loadGenerator, type LoadResult } from './load.js';
import { serverCpuSeconds } from './process-cpu.js';
import { measureEvents, renderEvents, type EventResults } from './events.js';
import { measureWrites, renderWrites, type WriteResults } from './writes.js';
import { measureLargeGroups, renderLargeGroups, type LargeGroupResults } from './large-groups.js';
import { measureWorstBodies, renderWorstBodies, type WorstBodyResults } from './worst-bodies.js';

// `npm run bench`: the ceiling (bare node:http) and Plant Store measured side by side in one run.
// Every figure is printed, written to docs/benchmarks.json and, as a table, to docs/benchmarks.md.

const { values: args } = parseArgs({
  options: {
    plants: { type: 'string', default: String(DEFAULT_SPEC.plants) },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    'with-1e7': { type: 'boolean', default: false },
    /** Plants of the catalogue listed in full by the looping clients of the "pages while listings stream" rows. */
    'listing-plants': { type: 'string', default: '200000' },
    /** Clients that loop those full listings (all as the admin, so at most 4 run at once), or run nothing else. */
    listers: { type: 'string', default: '10' },
    'while-listing-only': { type: 'boolean', default: false },
    /** Those listings as a typical user's (a union over owner, public, grants and groups) instead of the admin's. */
    'lister-user': { type: 'boolean', default: false },
    /** Catalogue sizes of the scale curve (a quick check can pass smaller ones). */
    scale: { type: 'string', default: '10000,100000,1000000' },
    'no-postgres': { type: 'boolean', default: false },
    /** Skip the rows of users in many groups (and PostgreSQL's plan at 10^7), or run nothing else. */
    'no-groups': { type: 'boolean', default: false },
    'groups-only': { type: 'boolean', default: false },
    /** Plants of the large-group rows' catalogues (joins of a group given all of them, imports with groups). */
    'large-group-plants': { type: 'string', default: '1000000' },
    'large-groups-only': { type: 'boolean', default: false },
    /** Only the worst body of each route, and /healthz meanwhile. */
    'worst-bodies-only': { type: 'boolean', default: false },
    /** Skip the write rows, or run nothing else (a quick look at writes). */
    'no-writes': { type: 'boolean', default: false },
    'writes-only': { type: 'boolean', default: false },
    /** Skip the event (webhook) rows, or run nothing else. */
    'no-events': { type: 'boolean', default: false },
    'events-only': { type: 'boolean', default: false },
    pg: { type: 'string', default: process.env.PLANTSTORE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
    'load-generator': { type: 'string' },
    out: { type: 'string', default: 'docs' },
  },
});

const ROOT = new URL('..', import.meta.url).pathname;
const CLI = join(ROOT, 'dist/cli/main.js');
const DURATION = Number(args.duration);
const ROUNDS = Number(args.rounds);
const CONNECTIONS = Number(args.connections);
const ROTATING_USERS = 100;
const load = await loadGenerator(args['load-generator']);

const log = (line: string) => process.stderr.write(`${line}\n`);

interface Server {
  url: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** A load result with the server's own CPU time over it (utime + stime, workers included). */
interface Measured extends LoadResult {
  cpuSeconds: number;
}

/** The server's CPU per request in µs. */
const cpuPerRequestUs = (m: Measured) => (m.cpuSeconds / m.requests) * 1e6;

async function waitForLine(child: ChildProcess, pattern: RegExp): Promise<RegExpMatchArray> {
  let buffered = '';
  for await (const chunk of child.stdout!) {
    buffered += String(chunk);
    const match = pattern.exec(buffered);
    if (match) return match;
  }
  throw new Error(`process exited before printing ${pattern}`);
}

async function waitForHttp(url: string): Promise<void> {
  for (let i = 0; i < 200; i++) {
    const ok = await new Promise<boolean>((resolve) => {
      request(url, (res) => {
        res.resume();
        resolve(res.statusCode === 200);
      })
        .on('error', () => resolve(false))
        .end();
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`${url} did not come up`);
}

function stopper(child: ChildProcess): () => Promise<void> {
  return async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await once(child, 'exit');
  };
}

/** A constant-body server of this folder (the ceiling, or the framework floor) on a free port. */
async function startConstantServer(script: 'ceiling.ts' | 'framework-floor.ts'): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', script), '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [, port] = await waitForLine(child, /listening (\d+)/);
  return { url: `http://127.0.0.1:${port}`, process: child, stop: stopper(child) };
}

async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

async function startService(db: string, env: NodeJS.ProcessEnv = {}): Promise<Server> {
  const port = await freePort();
  const child = spawn(process.execPath, [CLI, '--db', db, 'serve', '--port', String(port)], {
    stdio: ['ignore', 'ignore', 'inherit'],
    env: { ...process.env, PLANTSTORE_LOG_REQUESTS: 'false', PLANTSTORE_LOG_LEVEL: 'warn', ...env },
  });
  const url = `http://127.0.0.1:${port}`;
  await waitForHttp(`${url}/healthz`);
  return { url, process: child, stop: stopper(child) };
}

/** Peak resident memory of a process so far (Linux), in MB. */
async function peakRssMb(pid: number): Promise<number | undefined> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /VmHWM:\s+(\d+) kB/.exec(status)?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the generated catalogue as NDJSON (not timed), then imports it with the CLI (timed, wall clock). */
async function buildDatabase(
  db: string,
  spec: CatalogueSpec,
  dir: string,
  records: Iterable<CatalogueRecord> = generateCatalogue(spec),
): Promise<{ seconds: number; plantsPerSecond: number }> {
  const file = join(dir, `catalogue-${spec.plants}.ndjson`);
  const out = createWriteStream(file);
  for (const record of records) {
    if (!out.write(`${JSON.stringify(record)}\n`)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  const started = process.hrtime.bigint();
  const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
  await rm(file);
  // Let the kernel write back the freshly imported pages now, not while the next measurement runs.
  spawnSync('sync');
  return { seconds, plantsPerSecond: spec.plants / seconds };
}

/** Opaque tokens for users 1..n (ordinary users) and user0 (the admin), written straight through the Store. */
async function issueTokens(db: string, users: number): Promise<{ rotating: string[]; admin: string }> {
  const [admin, ...rotating] = await tokensFor(
    db,
    Array.from({ length: users + 1 }, (_, u) => userName(u)),
  );
  return { rotating, admin: admin! };
}

/** An opaque token for each user named, written straight through the Store. */
async function tokensFor(db: string, users: readonly string[]): Promise<string[]> {
  const store = await openStore({ db });
  try {
    const tokens: string[] = [];
    for (const user of users) {
      const { token, hash } = generateToken();
      await store.addToken({ user, hash, label: 'bench' });
      tokens.push(token);
    }
    return tokens;
  } finally {
    await store.close();
  }
}

/** A service measured against the ceiling in alternating rounds. */
interface Paired {
  ceiling: Measured;
  service: Measured;
  /** requests/s over the ceiling's: moves with the load generator's share of the machine. */
  ratio: number;
  /** The ceiling's CPU per request over the service's: what the targets judge. */
  cpuRatio: number;
  /** Both ratios round by round: how far the machine's noise moves them. */
  roundRatios: number[];
  roundCpuRatios: number[];
}

/** The same service under a writer's load, against itself without it, measured alternately. */
interface UnderWrites {
  service: Measured;
  /** requests/s under writes over requests/s without, over all rounds and round by round. */
  ratioToQuiet: number;
  roundRatios: number[];
  cpuRatio: number;
  /** What the writer committed a second, on average over the rounds. */
  changesPerSecond: number;
}

function combine(results: Measured[]): Measured {
  const sorted = (pick: (r: LoadResult) => number) => results.map(pick).sort((a, b) => a - b);
  const median = (values: number[]) => values[Math.floor(values.length / 2)]!;
  const requests = results.reduce((n, r) => n + r.requests, 0);
  const seconds = results.reduce((n, r) => n + r.seconds, 0);
  return {
    requests,
    seconds,
    rps: requests / seconds,
    p50Ms: median(sorted((r) => r.p50Ms)),
    p95Ms: Math.max(...results.map((r) => r.p95Ms)),
    p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    errors: results.reduce((n, r) => n + r.errors, 0),
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
    cpuSeconds: results.reduce((n, r) => n + r.cpuSeconds, 0),
  };
}

interface Target {
  /** What the per-round progress lines call it. */
  name: string;
  url: string;
  tokens: string[];
  /** The server process whose CPU time is counted (with its workers). */
  pid: number;
  /** Runs around each of this target's rounds (a writer's load): starts it and returns how to stop it. */
  during?: () => Promise<() => Promise<void>>;
  /** The CPU counted, when more than the server process's own (its PostgreSQL backends'). */
  cpuSeconds?: () => Promise<number>;
}

/**
 * Warms each target up, then measures them in alternating rounds (A B A B …, or A B C A B C …) of equal
 * durations, so that a slow spell of a shared machine falls on all of them alike. Per target, one result per
 * round, with the server's CPU time over it read from /proc.
 */
async function inRounds(targets: readonly Target[]): Promise<Measured[][]> {
  const run = async (target: Target, seconds: number, label: string): Promise<Measured> => {
    const stop = await target.during?.();
    try {
      const cpu = target.cpuSeconds ?? (async () => serverCpuSeconds(target.pid));
      const before = await cpu();
      const result = await load.run({ url: target.url, tokens: target.tokens, seconds, connections: CONNECTIONS });
      const measured = { ...result, cpuSeconds: (await cpu()) - before };
      // Every round is printed: a process that runs dearer than its peers in every round shows here, not in an average.
      log(
        `  ${label}, ${target.name}: ${fmt(measured.rps)} requests/s, ${fmt(cpuPerRequestUs(measured), 1)} µs CPU a request, ` +
          `p99 ${fmt(measured.p99Ms, 2)} ms`,
      );
      return measured;
    } finally {
      await stop?.();
    }
  };
  for (const target of targets) await run(target, 2, 'warm-up');
  const runs = targets.map((): Measured[] => []);
  for (let round = 0; round < ROUNDS; round++) {
    for (const [i, target] of targets.entries()) runs[i]!.push(await run(target, DURATION, `round ${round + 1}`));
  }
  return runs;
}

const pairOf = (ceilingRounds: Measured[], serviceRounds: Measured[]): Paired => {
  const [ceiling, service] = [combine(ceilingRounds), combine(serviceRounds)];
  return {
    ceiling,
    service,
    ratio: service.rps / ceiling.rps,
    cpuRatio: cpuPerRequestUs(ceiling) / cpuPerRequestUs(service),
    roundRatios: serviceRounds.map((round, i) => round.rps / ceilingRounds[i]!.rps),
    roundCpuRatios: serviceRounds.map((round, i) => cpuPerRequestUs(ceilingRounds[i]!) / cpuPerRequestUs(round)),
  };
};

/**
 * A writer process committing about 100 changes a second (bench/writer.ts): plants for the measured users,
 * created by them over `POST /plants` of the measured service, grants to them and tokens of other users through
 * the store's real write path. Counts what it committed.
 */
function writerLoad(
  db: string,
  plants: number,
  service: { url: string; tokens: string[] },
  committed: { changes: number; seconds: number },
): () => Promise<() => Promise<void>> {
  return async () => {
    const args = ['--import', 'tsx', join(ROOT, 'bench/writer.ts'), '--db', db, '--plants', String(plants), '--url', service.url];
    const child = spawn(process.execPath, args, {
      stdio: ['ignore', 'pipe', 'inherit'],
      env: { ...process.env, BENCH_WRITER_TOKENS: JSON.stringify(service.tokens) },
    });
    // Read from the start: the summary comes on the same stdout after SIGTERM.
    let out = '';
    child.stdout.on('data', (chunk) => (out += String(chunk)));
    while (!out.includes('writing')) {
      if (child.exitCode !== null) throw new Error('the writer exited before writing');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    return async () => {
      child.kill('SIGTERM');
      await once(child, 'exit');
      const summary = JSON.parse(/\{.*\}/.exec(out)?.[0] ?? '{"changes":0,"seconds":0}') as { changes: number; seconds: number };
      committed.changes += summary.changes;
      committed.seconds += summary.seconds;
    };
  };
}

/** The framework floor (bench/framework-floor.ts) against the ceiling, alternately: for information. */
async function measureFrameworkFloor(ceiling: Server, tokens: string[]): Promise<Paired> {
  const floor = await startConstantServer('framework-floor.ts');
  try {
    log('framework floor: Fastify with the same headers and a constant body, against the ceiling alternately…');
    const [ceilingRounds, floorRounds] = await inRounds([
      { name: 'ceiling', url: `${ceiling.url}/plants?limit=20`, tokens, pid: ceiling.process.pid! },
      { name: 'framework floor', url: `${floor.url}/plants?limit=20`, tokens, pid: floor.process.pid! },
    ]);
    return pairOf(ceilingRounds!, floorRounds!);
  } finally {
    await floor.stop();
  }
}

/**
 * Starts the service on `db` with `env` and measures it against the ceiling (A B A B …); with `writes`, also
 * under a writer's load, as a third target (A B C …: ceiling, quiet, under writes). Stops it, also on failure.
 */
async function measure(
  ceiling: Server,
  label: string,
  db: string,
  tokens: string[],
  env: NodeJS.ProcessEnv = {},
  writes?: { plants: number },
): Promise<Paired & { underWrites?: UnderWrites }> {
  const service = await startService(db, env);
  try {
    log(`${label}: GET /plants?limit=20, ceiling and service${writes ? ', quiet and under writes,' : ''} alternately…`);
    const url = `${service.url}/plants?limit=20`;
    const committed = { changes: 0, seconds: 0 };
    const targets: Target[] = [
      { name: 'ceiling', url: `${ceiling.url}/plants?limit=20`, tokens, pid: ceiling.process.pid! },
      { name: label, url, tokens, pid: service.process.pid! },
      ...(writes
        ? [
            {
              name: `${label} under writes`,
              url,
              tokens,
              pid: service.process.pid!,
              during: writerLoad(db, writes.plants, { url: service.url, tokens }, committed),
            },
          ]
        : []),
    ];
    const [ceilingRounds, quietRounds, writeRounds] = await inRounds(targets);
    const paired = pairOf(ceilingRounds!, quietRounds!);
    if (!writeRounds) return paired;
    const underWrites = combine(writeRounds);
    return {
      ...paired,
      underWrites: {
        service: underWrites,
        ratioToQuiet: underWrites.rps / paired.service.rps,
        roundRatios: writeRounds.map((round, i) => round.rps / quietRounds![i]!.rps),
        cpuRatio: cpuPerRequestUs(paired.ceiling) / cpuPerRequestUs(underWrites),
        changesPerSecond: committed.seconds > 0 ? committed.changes / committed.seconds : 0,
      },
    };
  } finally {
    await service.stop();
  }
}

/**
 * Connections of the page client while listings stream: users' requests, not a load that saturates the server
 * (at 50, p99 measures the queue behind the load generator's own requests on two shared cores).
 */
const PAGE_CONNECTIONS = 10;

/** What another user's `limit=20` pages got while full listings streamed. */
interface PagesWhileListing {
  pages: LoadResult;
  listers: number;
  /** Full listings the looping clients completed, and how often they were refused (429, 503) and waited. */
  listings: number;
  refused: number;
}

/**
 * `listers` clients loop full listings as the admin (honouring Retry-After when refused) while the load generator
 * asks for other users' first pages: small requests must stay fast while large listings stream.
 */
async function pagesWhileListing(db: string, rotating: string[], admin: string, listers: number): Promise<PagesWhileListing> {
  const service = await startService(db);
  const lister = args['lister-user'] ? rotating[0]! : admin;
  let stop = false;
  let listings = 0;
  let refused = 0;
  const listing = async () => {
    while (!stop) {
      const status = await new Promise<number>((resolve) => {
        request(`${service.url}/plants`, { headers: { authorization: `Bearer ${lister}` } }, (res) => {
          res.resume();
          res.on('end', () => resolve(res.statusCode ?? 0));
          res.on('error', () => resolve(0));
        })
          .on('error', () => resolve(0))
          .end();
      });
      if (status === 200) listings++;
      else {
        refused++;
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  };
  try {
    const running = Array.from({ length: listers }, listing);
    await new Promise((r) => setTimeout(r, 1000));
    const pages = await load.run({
      url: `${service.url}/plants?limit=20`,
      tokens: rotating,
      seconds: DURATION * ROUNDS,
      connections: PAGE_CONNECTIONS,
    });
    stop = true;
    await Promise.all(running);
    return { pages, listers, listings, refused };
  } finally {
    stop = true;
    await service.stop();
  }
}

/** Reads a whole listing as a client would, counting plants; the server's peak RSS is read from /proc. */
async function fullListing(
  service: Server,
  token: string,
): Promise<{ plants: number; seconds: number; plantsPerSecond: number; bytes: number }> {
  const started = process.hrtime.bigint();
  const { plants, bytes } = await new Promise<{ plants: number; bytes: number }>((resolve, reject) => {
    request(`${service.url}/plants`, { headers: { authorization: `Bearer ${token}` } }, (res) => {
      if (res.statusCode !== 200) reject(new Error(`full listing: ${res.statusCode}`));
      let count = 0;
      let size = 0;
      let carry = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => {
        size += Buffer.byteLength(chunk);
        // Every plant object starts with {"name": — counting them avoids holding 10^6 objects in the client.
        // The last few characters carry over, so a marker split between two chunks is still counted once.
        const text = carry + chunk;
        for (let i = text.indexOf('{"name"'); i !== -1; i = text.indexOf('{"name"', i + 1)) count++;
        carry = text.slice(-6);
      });
      res.on('end', () => resolve({ plants: count, bytes: size }));
      res.on('error', reject);
    })
      .on('error', reject)
      .end();
  });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  return { plants, seconds, plantsPerSecond: plants / seconds, bytes };
}

async function postgresReachable(url: string): Promise<string | false> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.end();
    return false;
  } catch (err) {
    return (err as Error).message;
  }
}

async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}

/**
 * The processor's name, with its family and model from /proc/cpuinfo on Linux: a virtual machine may name only
 * the vendor's line ("AMD EPYC"), and two generations of it gave 0.49 and 0.69 for the same cached page.
 */
function processorModel(): string {
  const name = cpus()[0]?.model ?? 'unknown';
  try {
    const info = readFileSync('/proc/cpuinfo', 'utf8');
    const field = (key: string) => new RegExp(`^${key}\\s*: (.*)$`, 'm').exec(info)?.[1];
    const family = field('cpu family');
    const model = field('model');
    return family !== undefined && model !== undefined ? `${name} (family ${family}, model ${model})` : name;
  } catch {
    return name;
  }
}

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const verdict = (ok: boolean) => (ok ? 'met' : '**NOT met**');

/** Imports `records` into `db` with the CLI (not timed). */
function importRecords(db: string, dir: string, records: object[]): void {
  const file = join(dir, `records-${process.hrtime.bigint()}.ndjson`);
  writeFileSync(file, records.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
}

/** The write rows (bench/writes.ts), on SQLite and, when it answers, PostgreSQL. */
async function benchWrites(dir: string): Promise<WriteResults> {
  const pgSkip = args['no-postgres'] ? 'disabled with --no-postgres' : await postgresReachable(args.pg);
  const schema = `bench_writes_${process.pid}`;
  const pg = pgSkip
    ? pgSkip
    : { url: `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`, schema, drop: () => dropSchema(args.pg, schema) };
  return measureWrites(
    {
      cli: CLI,
      root: ROOT,
      dir,
      seconds: DURATION,
      rounds: ROUNDS,
      log,
      startService,
      importRecords: (db, records) => importRecords(db, dir, records),
      issueTokens: async (db, users) => (await issueTokens(db, users)).rotating,
      userName,
    },
    pg,
  );
}

/** The event rows (bench/events.ts), on SQLite and, when it answers, PostgreSQL; two rounds a side. */
async function benchEvents(dir: string): Promise<EventResults> {
  const pgSkip = args['no-postgres'] ? 'disabled with --no-postgres' : await postgresReachable(args.pg);
  return measureEvents(
    {
      cli: CLI,
      root: ROOT,
      dir,
      rounds: Math.min(ROUNDS, 2),
      log,
      startService,
      importRecords: (db, records) => importRecords(db, dir, records),
    },
    pgSkip ? pgSkip : { url: args.pg, drop: (schema) => dropSchema(args.pg, schema) },
  );
}

/** Users in many groups against typical users, uncached, on one catalogue; and PostgreSQL's page at 10^7 against 10^5. */
interface GroupResults {
  plants: number;
  manyGroups: Record<string, { typical: Measured; crowd: Measured; cpuRatio: number; roundCpuRatios: number[] }>;
  postgresScale?: {
    small: Measured;
    large: Measured;
    smallPlants: number;
    largePlants: number;
    cpuRatio: number;
    roundCpuRatios: number[];
  };
}

/**
 * Caches off, so every request reads its page from the database: the first page (`limit=20`) of users in
 * MANY_GROUPS groups of 5 plants each, against that of typical users (in 2 groups), in alternating rounds on one
 * service. Then, on PostgreSQL, a typical user's first page at 10^7 plants against 10^5.
 */
async function benchGroups(dir: string, plants: number, withPostgres: boolean, largePostgres: boolean): Promise<GroupResults> {
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants };
  const typicalUsers = Array.from({ length: ROTATING_USERS }, (_, u) => userName(u + 1));
  const crowd = (db: string, label: string) => async () => {
    const typical = await tokensFor(db, typicalUsers);
    const crowdTokens = await tokensFor(db, MANY_GROUPS.members);
    // On PostgreSQL the page is read by the database's own processes: their CPU counts too, found by the
    // connections' application name.
    const application = `bench_groups_${process.pid}`;
    const served = db.startsWith('postgres') ? `${db}&application_name=${application}` : db;
    const service = await startService(served, { PLANTSTORE_CACHE: 'false' });
    const cpuSeconds = db.startsWith('postgres')
      ? async () => serverCpuSeconds(service.process.pid!) + (await backendsCpuSeconds(application))
      : undefined;
    try {
      log(`${label}: a user in ${MANY_GROUPS.groups} groups against typical users, caches off…`);
      const pid = service.process.pid!;
      const url = `${service.url}/plants?limit=20`;
      const [t, c] = await inRounds([
        { name: `${label}, typical users`, url, tokens: typical, pid, ...(cpuSeconds ? { cpuSeconds } : {}) },
        { name: `${label}, users in ${MANY_GROUPS.groups} groups`, url, tokens: crowdTokens, pid, ...(cpuSeconds ? { cpuSeconds } : {}) },
      ]);
      const [typicalAll, crowdAll] = [combine(t!), combine(c!)];
      return {
        typical: typicalAll,
        crowd: crowdAll,
        cpuRatio: cpuPerRequestUs(crowdAll) / cpuPerRequestUs(typicalAll),
        roundCpuRatios: c!.map((round, i) => cpuPerRequestUs(round) / cpuPerRequestUs(t![i]!)),
      };
    } finally {
      await service.stop();
    }
  };
  const results: GroupResults = { plants, manyGroups: {} };
  log(`\ngroups: importing ${fmt(plants)} plants with ${MANY_GROUPS.groups} groups of ${MANY_GROUPS.plantsPerGroup} plants each…`);
  const sqliteDb = join(dir, 'groups.db');
  await buildDatabase(sqliteDb, spec, dir, manyGroupsCatalogue(spec));
  results.manyGroups.sqlite = await crowd(sqliteDb, 'SQLite')();
  await rm(sqliteDb, { force: true });
  if (!withPostgres) return results;
  const schemaUrl = (schema: string) => `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`;
  const groupsSchema = `bench_groups_${process.pid}`;
  try {
    log(`PostgreSQL: the same…`);
    await buildDatabase(schemaUrl(groupsSchema), spec, dir, manyGroupsCatalogue(spec));
    await settle(schemaUrl(groupsSchema));
    results.manyGroups.postgres = await crowd(schemaUrl(groupsSchema), 'PostgreSQL')();
  } finally {
    await dropSchema(args.pg, groupsSchema);
  }
  if (!largePostgres) return results;
  const [smallPlants, largePlants] = [100_000, 10_000_000];
  const [small, large] = [`bench_small_${process.pid}`, `bench_large_${process.pid}`];
  try {
    log(`PostgreSQL: importing ${fmt(smallPlants)} and ${fmt(largePlants)} plants for the page's cost at each…`);
    await buildDatabase(schemaUrl(small), { ...spec, plants: smallPlants }, dir);
    await buildDatabase(schemaUrl(large), { ...spec, plants: largePlants }, dir);
    for (const schema of [small, large]) await settle(schemaUrl(schema));
    const named = (schema: string) => `${schemaUrl(schema)}&application_name=${schema}`;
    const services = [await startService(named(small), { PLANTSTORE_CACHE: 'false' })];
    try {
      services.push(await startService(named(large), { PLANTSTORE_CACHE: 'false' }));
      const tokens = [await tokensFor(schemaUrl(small), typicalUsers), await tokensFor(schemaUrl(large), typicalUsers)];
      const [s, l] = await inRounds(
        services.map((service, i) => ({
          name: `PostgreSQL, ${fmt(i === 0 ? smallPlants : largePlants)} plants, caches off`,
          url: `${service.url}/plants?limit=20`,
          tokens: tokens[i]!,
          pid: service.process.pid!,
          cpuSeconds: async () => serverCpuSeconds(service.process.pid!) + (await backendsCpuSeconds(i === 0 ? small : large)),
        })),
      );
      const [smallAll, largeAll] = [combine(s!), combine(l!)];
      results.postgresScale = {
        small: smallAll,
        large: largeAll,
        smallPlants,
        largePlants,
        cpuRatio: cpuPerRequestUs(largeAll) / cpuPerRequestUs(smallAll),
        roundCpuRatios: l!.map((round, i) => cpuPerRequestUs(round) / cpuPerRequestUs(s![i]!)),
      };
    } finally {
      for (const service of services) await service.stop();
    }
  } finally {
    await dropSchema(args.pg, small);
    await dropSchema(args.pg, large);
  }
  return results;
}

/** The worst-bodies rows (bench/worst-bodies.ts), on SQLite. */
function benchWorstBodies(dir: string): Promise<WorstBodyResults> {
  return measureWorstBodies(
    { log, startService, tokensFor, importRecords: (db, records) => importRecords(db, dir, records) },
    join(dir, 'worst-bodies.db'),
  );
}

/** The large-group rows (bench/large-groups.ts), on SQLite and, when it answers, PostgreSQL. */
async function benchLargeGroups(dir: string): Promise<LargeGroupResults> {
  const pgSkip = args['no-postgres'] ? 'disabled with --no-postgres' : await postgresReachable(args.pg);
  return measureLargeGroups(
    {
      root: ROOT,
      dir,
      plants: Number(args['large-group-plants']),
      log,
      startService,
      importFile: (db, file) => {
        const started = process.hrtime.bigint();
        const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
        const seconds = Number(process.hrtime.bigint() - started) / 1e9;
        if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
        spawnSync('sync');
        return seconds;
      },
      tokensFor,
    },
    pgSkip
      ? pgSkip
      : {
          url: (schema) => `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`,
          drop: (schema) => dropSchema(args.pg, schema),
        },
  );
}

/**
 * Vacuums and analyzes a freshly imported PostgreSQL catalogue, as autovacuum soon would: otherwise autovacuum
 * takes it up during the rounds, and index-only scans still visit the heap.
 */
async function settle(url: string): Promise<void> {
  const schema = new URL(url).searchParams.get('schema');
  const client = new pg.Client({
    connectionString: args.pg.replace(/\?.*$/, ''),
    ...(schema ? { options: `-c search_path=${schema}` } : {}),
  });
  await client.connect();
  try {
    await client.query('VACUUM (ANALYZE)');
  } finally {
    await client.end();
  }
}

/** utime + stime of the PostgreSQL backends serving connections named `application`, in seconds. */
async function backendsCpuSeconds(application: string): Promise<number> {
  const client = new pg.Client({ connectionString: args.pg.replace(/\?.*$/, '') });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [application]);
    return rows.reduce((sum, { pid }) => sum + serverCpuSeconds(pid), 0);
  } finally {
    await client.end();
  }
}

/** The rows and targets of benchGroups. */
function renderGroups(g: GroupResults): { section: string[]; targets: string[] } {
  const ranged = (ratio: number, rounds: number[]) =>
    rounds.length > 1 ? `${fmt(ratio, 2)} (${fmt(Math.min(...rounds), 2)}–${fmt(Math.max(...rounds), 2)})` : fmt(ratio, 2);
  const section = [
    `## Users in many groups (caches off, ${fmt(g.plants)} plants)`,
    '',
    `The first page (\`limit=20\`) of users in ${MANY_GROUPS.groups} groups of ${MANY_GROUPS.plantsPerGroup} plants each, ` +
      'against typical users (in 2 groups) on the same service, in alternating rounds; caches off, so every request reads ' +
      'its token and its page from the database.',
    '',
    "CPU is the service process's own, and on PostgreSQL also that of the database processes serving its connections. " +
      'PostgreSQL catalogues are vacuumed once imported, as autovacuum soon would be.',
    '',
    '| backend | users | requests/s | CPU µs/request | p50 ms | p99 ms | errors |',
    '|---|---|---|---|---|---|---|',
  ];
  const targets: string[] = [];
  for (const [backend, m] of Object.entries(g.manyGroups)) {
    const name = backend === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    for (const [who, x] of [
      ['typical', m.typical],
      [`in ${MANY_GROUPS.groups} groups`, m.crowd],
    ] as const) {
      section.push(
        `| ${name} | ${who} | ${fmt(x.rps)} | ${fmt(cpuPerRequestUs(x), 1)} | ${fmt(x.p50Ms, 2)} | ${fmt(x.p99Ms, 2)} | ${x.errors + x.non2xx} |`,
      );
    }
    targets.push(
      `| ${name}, caches off: a user in ${MANY_GROUPS.groups} groups ≤ 1.5 × a typical user's CPU per first page | ` +
        `${ranged(m.cpuRatio, m.roundCpuRatios)} × | ${verdict(m.cpuRatio <= 1.5)} |`,
    );
  }
  const p = g.postgresScale;
  if (p) {
    section.push(
      '',
      `PostgreSQL, caches off, a typical user's first page at ${fmt(p.largePlants)} plants against ${fmt(p.smallPlants)}: ` +
        `${fmt(cpuPerRequestUs(p.large), 1)} against ${fmt(cpuPerRequestUs(p.small), 1)} µs CPU a request, the database's processes included ` +
        `(${fmt(p.large.rps)} and ${fmt(p.small.rps)} requests/s).`,
    );
    targets.push(
      `| PostgreSQL, caches off: CPU per first page at 10^7 ≤ 1.2 × at 10^5 | ${ranged(p.cpuRatio, p.roundCpuRatios)} × | ${verdict(p.cpuRatio <= 1.2)} |`,
    );
  }
  return { section, targets };
}

/** Small pages while full listings stream (part 6), on SQLite and, unless `pgSkip`, PostgreSQL. */
async function benchWhileListing(dir: string, spec: CatalogueSpec, pgSkip: string | false): Promise<Record<string, PagesWhileListing>> {
  const listingSpec = { ...spec, plants: Number(args['listing-plants']) };
  const listers = Number(args.listers);
  log(`\nSQLite: importing ${fmt(listingSpec.plants)} plants for pages while ${listers} clients loop full listings…`);
  const listingDb = join(dir, 'listing.db');
  await buildDatabase(listingDb, listingSpec, dir);
  const listingTokens = await issueTokens(listingDb, ROTATING_USERS);
  const measured: Record<string, PagesWhileListing> = {
    sqlite: await pagesWhileListing(listingDb, listingTokens.rotating, listingTokens.admin, listers),
  };
  if (!pgSkip) {
    const schema = `bench_listing_${process.pid}`;
    const pgDb = `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`;
    try {
      log(`PostgreSQL: importing ${fmt(listingSpec.plants)} plants for the same…`);
      await buildDatabase(pgDb, listingSpec, dir);
      const pgTokens = await issueTokens(pgDb, ROTATING_USERS);
      measured.postgres = await pagesWhileListing(pgDb, pgTokens.rotating, pgTokens.admin, listers);
    } finally {
      await dropSchema(args.pg, schema);
    }
  }
  return measured;
}

function renderWhileListing(whileListing: Record<string, PagesWhileListing>): Rendered {
  const section = [
    '',
    `## Small pages while full listings stream`,
    '',
    `${Object.values(whileListing)[0]!.listers} clients loop full listings of ${fmt(Number(args['listing-plants']))} plants as ` +
      `${args['lister-user'] ? 'a typical user (the first of the rotation)' : 'the admin'} ` +
      '(waiting as `Retry-After` says when refused: at most 4 full listings run at once per user), while the load generator asks ' +
      `other users' \`limit=20\` pages on ${PAGE_CONNECTIONS} connections (users' requests, not a saturating load: at 50 connections ` +
      'p99 measures the queue behind its own requests on two shared cores).',
    '',
    '| backend | pages/s | p50 ms | p95 ms | p99 ms | errors + non-2xx | full listings completed | refused (429/503) |',
    '|---|---|---|---|---|---|---|---|',
    ...Object.entries(whileListing).map(
      ([backend, w]) =>
        `| ${backend === 'sqlite' ? 'SQLite' : 'PostgreSQL'} | ${fmt(w.pages.rps)} | ${fmt(w.pages.p50Ms, 2)} | ${fmt(w.pages.p95Ms, 2)} | ` +
        `${fmt(w.pages.p99Ms, 2)} | ${w.pages.errors + w.pages.non2xx} | ${fmt(w.listings)} | ${fmt(w.refused)} |`,
    ),
  ];
  const targets = Object.entries(whileListing).map(([backend, w]) => {
    const name = backend === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    return `| ${name}: \`limit=20\` p99 < 50 ms while ${w.listers} clients loop full listings | ${fmt(w.pages.p99Ms, 2)} ms | ${verdict(w.pages.p99Ms < 50)} |`;
  });
  return { section, targets };
}

/** One part of the bench alone: its rows and targets, printed. */
type Rendered = { section: string[]; targets: string[] };

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'plantstore-bench-'));
  const parts: Array<[boolean | undefined, () => Promise<Rendered>]> = [
    [
      args['groups-only'],
      async () => {
        const pgSkip = args['no-postgres'] ? 'disabled' : await postgresReachable(args.pg);
        return renderGroups(await benchGroups(dir, 1_000_000, !pgSkip, !pgSkip && args['with-1e7']));
      },
    ],
    [args['worst-bodies-only'], async () => renderWorstBodies(await benchWorstBodies(dir))],
    [args['large-groups-only'], async () => renderLargeGroups(await benchLargeGroups(dir), Number(args['large-group-plants']))],
    [args['events-only'], async () => renderEvents(await benchEvents(dir))],
    [args['writes-only'], async () => renderWrites(await benchWrites(dir))],
    [
      args['while-listing-only'],
      async () => {
        const pgSkip = args['no-postgres'] ? 'disabled' : await postgresReachable(args.pg);
        return renderWhileListing(await benchWhileListing(dir, { ...DEFAULT_SPEC, plants: Number(args.plants) }, pgSkip));
      },
    ],
  ];
  const only = parts.find(([wanted]) => wanted === true);
  if (only) {
    try {
      const { section, targets } = await only[1]();
      process.stdout.write(`\n${[...section, '', '| target | measured | verdict |', '|---|---|---|', ...targets].join('\n')}\n`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
    return;
  }
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants: Number(args.plants) };
  const scaleSizes = [...args.scale.split(',').map(Number), ...(args['with-1e7'] ? [10_000_000] : [])];
  const machine = {
    cpu: processorModel(),
    cores: cpus().length,
    memoryGb: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadGenerator: load.name,
  };
  log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGb} GB, Node ${machine.node}; load generator: ${load.name}`);
  log(`${ROUNDS} rounds of ${DURATION} s per side, ${CONNECTIONS} connections, ${ROTATING_USERS} users' tokens in rotation`);

  const results: Record<string, unknown> = {
    date: new Date().toISOString(),
    machine,
    spec,
    durationSeconds: DURATION,
    rounds: ROUNDS,
    connections: CONNECTIONS,
  };
  const ceiling = await startConstantServer('ceiling.ts');
  try {
    // 2. SQLite, the default catalogue.
    log(`\nSQLite: importing ${fmt(spec.plants)} plants…`);
    const sqliteDb = join(dir, 'main.db');
    const sqliteImport = await buildDatabase(sqliteDb, spec, dir);
    const sqliteTokens = await issueTokens(sqliteDb, ROTATING_USERS);
    results.sqlite = {
      import: sqliteImport,
      ...(await measure(ceiling, 'SQLite', sqliteDb, sqliteTokens.rotating, {}, { plants: spec.plants })),
    };
    results.frameworkFloor = await measureFrameworkFloor(ceiling, sqliteTokens.rotating);
    // The same with one worker per core (`serve --workers`): what the machine gives the service. The ceiling
    // stays one process, so this ratio is shown beside the target's measure, never in its place.
    const workers = cpus().length;
    results.sqliteWorkers = {
      workers,
      ...(await measure(ceiling, `SQLite, --workers ${workers}`, sqliteDb, sqliteTokens.rotating, { PLANTSTORE_WORKERS: String(workers) })),
    };
    // The same with the caches off: every request checks its token and reads its page from the database.
    results.sqliteNoCache = await measure(ceiling, 'SQLite, caches off', sqliteDb, sqliteTokens.rotating, { PLANTSTORE_CACHE: 'false' });

    // 3. PostgreSQL, the same catalogue, when one answers.
    const pgSkip = args['no-postgres'] ? 'disabled with --no-postgres' : await postgresReachable(args.pg);
    if (pgSkip) {
      log(`PostgreSQL: skipped (${pgSkip})`);
      results.postgres = { skipped: pgSkip };
    } else {
      const schema = `bench_${process.pid}`;
      const pgDb = `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`;
      try {
        log(`\nPostgreSQL: importing ${fmt(spec.plants)} plants…`);
        const pgImport = await buildDatabase(pgDb, spec, dir);
        const pgTokens = await issueTokens(pgDb, ROTATING_USERS);
        results.postgres = {
          import: pgImport,
          ...(await measure(ceiling, 'PostgreSQL', pgDb, pgTokens.rotating, {}, { plants: spec.plants })),
        };
      } finally {
        await dropSchema(args.pg, schema);
      }
    }

    // 6. Small pages while full listings stream, on both backends.
    results.pagesWhileListing = await benchWhileListing(dir, spec, pgSkip);

    // 5. and 4. The scale curve on SQLite, and the admin's full listing on the largest catalogue. Every size
    // is served at once and measured in alternating rounds, like ceiling and service.
    const built: Array<{
      plants: number;
      db: string;
      import: { seconds: number; plantsPerSecond: number };
      tokens: { rotating: string[]; admin: string };
    }> = [];
    for (const plants of scaleSizes) {
      log(`\nscale: importing ${fmt(plants)} plants…`);
      const db = join(dir, `scale-${plants}.db`);
      built.push({ plants, db, import: await buildDatabase(db, { ...spec, plants }, dir), tokens: await issueTokens(db, ROTATING_USERS) });
    }
    let full: (Awaited<ReturnType<typeof fullListing>> & { peakRssMb: number | undefined }) | undefined;
    const curve = async (env: NodeJS.ProcessEnv, last?: (services: Server[]) => Promise<void>): Promise<Measured[]> => {
      const services: Server[] = [];
      try {
        for (const b of built) services.push(await startService(b.db, env));
        const targets = built.map((b, i) => ({
          name: `${fmt(b.plants)} plants${env.PLANTSTORE_CACHE === 'false' ? ', caches off' : ''}`,
          url: `${services[i]!.url}/plants?limit=20`,
          tokens: b.tokens.rotating,
          pid: services[i]!.process.pid!,
        }));
        const results = (await inRounds(targets)).map(combine);
        await last?.(services);
        return results;
      } finally {
        for (const service of services) await service.stop();
      }
    };
    log(`scale: GET /plants?limit=20 on ${built.length} catalogues in alternating rounds…`);
    const cached = await curve({}, async (services) => {
      const i = built.findIndex((b) => b.plants === 1_000_000);
      if (i < 0) return;
      log('full listing of 1,000,000 plants as the admin…');
      const listing = await fullListing(services[i]!, built[i]!.tokens.admin);
      full = { ...listing, peakRssMb: await peakRssMb(services[i]!.process.pid!) };
    });
    // Caches off: what the first page costs when it is read from the database on every request.
    log('scale, caches off: the same…');
    const uncached = await curve({ PLANTSTORE_CACHE: 'false' });
    const scale = built.map((b, i) => ({ plants: b.plants, import: b.import, limit20: cached[i]!, limit20NoCache: uncached[i]! }));
    results.scale = scale;
    results.fullListing = full;

    // 7. Writes.
    if (!args['no-writes']) results.writes = await benchWrites(dir);

    // 8. Events.
    if (!args['no-events']) results.events = await benchEvents(dir);

    // 9. Users in many groups, and PostgreSQL's page at 10^7 (with --with-1e7).
    if (!args['no-groups']) results.groups = await benchGroups(dir, 1_000_000, !pgSkip, !pgSkip && args['with-1e7']);

    // 10. The worst body of each route.
    results.worstBodies = await benchWorstBodies(dir);

    // 11. Large groups: imports with groups, joins of a group given every plant, shares with 10^5 members.
    if (!args['no-groups']) {
      results.largeGroups = await benchLargeGroups(dir);
      results.largeGroupPlants = Number(args['large-group-plants']);
    }
  } finally {
    await ceiling.stop();
    await rm(dir, { recursive: true, force: true });
  }

  const report = renderReport(results);
  process.stdout.write(`\n${report}\n`);
  // Relative to the repository; an absolute --out is taken as given.
  const out = resolve(ROOT, args.out);
  await mkdir(out, { recursive: true });
  await writeFile(join(out, 'benchmarks.json'), `${JSON.stringify(results, null, 2)}\n`);
  await writeFile(join(out, 'benchmarks.md'), `${report}\n`);
  log(`\nwritten: ${join(args.out, 'benchmarks.json')} and ${join(args.out, 'benchmarks.md')}`);
}

function renderReport(r: Record<string, unknown>): string {
  const machine = r.machine as Record<string, string | number>;
  type Row = Paired & { underWrites?: UnderWrites; import: { plantsPerSecond: number; seconds: number } };
  const sqlite = r.sqlite as Row;
  const postgres = r.postgres as Row | { skipped: string };
  const noCache = r.sqliteNoCache as Paired;
  const floor = r.frameworkFloor as Paired | undefined;
  const workers = r.sqliteWorkers as (Paired & { workers: number }) | undefined;
  const scale = r.scale as Array<{
    plants: number;
    import: { plantsPerSecond: number; seconds: number };
    limit20: Measured;
    limit20NoCache: Measured;
  }>;
  const full = r.fullListing as { plants: number; seconds: number; plantsPerSecond: number; peakRssMb?: number } | undefined;
  // A ratio over all rounds, with the lowest and highest of its single rounds when there are several.
  const ranged = (ratio: number, rounds: number[], digits: number) =>
    rounds.length > 1 ? `${fmt(ratio, digits)} (${fmt(Math.min(...rounds), 2)}–${fmt(Math.max(...rounds), 2)})` : fmt(ratio, digits);
  const row = (name: string, x: Measured, ratios?: { rps: string; cpu: string }) =>
    `| ${name} | ${fmt(x.rps)} | ${ratios?.rps ?? '1.00'} | ${fmt(cpuPerRequestUs(x), 1)} | ${ratios?.cpu ?? '1.00'} | ${fmt(x.p50Ms, 2)} | ${fmt(x.p99Ms, 2)} | ${x.errors + x.non2xx} |`;
  const against = (pair: Paired) => ({ rps: ranged(pair.ratio, pair.roundRatios, 2), cpu: ranged(pair.cpuRatio, pair.roundCpuRatios, 2) });
  const writesRow = (name: string, w: UnderWrites) =>
    row(
      `${name}, under writes (${fmt(w.changesPerSecond)} changes/s from another process, a third of them plants created over POST /plants; first ratio: to the same service without writes)`,
      w.service,
      {
        rps: ranged(w.ratioToQuiet, w.roundRatios, 2),
        cpu: fmt(w.cpuRatio, 2),
      },
    );
  const lines = [
    '# Benchmarks',
    '',
    `Latest run of \`npm run bench\`, ${String(r.date).slice(0, 10)}. Machine: ${machine.cpu}, ${machine.cores} cores, ` +
      `${machine.memoryGb} GB RAM, Node ${machine.node}. Load generator: ${machine.loadGenerator}, ${r.connections} connections, ` +
      `${r.rounds} alternating rounds of ${r.durationSeconds} s per side (ceiling A, service B: A B A B …). Catalogue: ` +
      `${fmt((r.spec as CatalogueSpec).plants)} plants, 1,000 users, 50 groups, ~30% shared with a user, ~10% with a group, ~5% public ` +
      `(seeded); requests authenticated with ${ROTATING_USERS} ordinary users' tokens in rotation. The service runs with its ` +
      'defaults, caches on, request logs off.',
    '',
    '## `GET /plants?limit=20` against the ceiling',
    '',
    "CPU per request is the server process's own CPU time (utime + stime from `/proc`, workers included) over the " +
      "requests it answered; the CPU ratio is the ceiling's CPU per request over the service's, the measure the targets " +
      'judge, because the load generator shares the two cores and a throughput ratio moves with its share. Ratios are ' +
      'over all rounds; in brackets, their lowest and highest single round.',
    '',
    '| server | requests/s | requests/s ratio | CPU µs/request | CPU ratio | p50 ms | p99 ms | errors + non-2xx |',
    '|---|---|---|---|---|---|---|---|',
    row('ceiling: bare node:http, constant body (with the SQLite run)', sqlite.ceiling),
    row('Plant Store, SQLite', sqlite.service, against(sqlite)),
    ...(sqlite.underWrites ? [writesRow('Plant Store, SQLite', sqlite.underWrites)] : []),
    ...(floor
      ? [
          row('ceiling (with the framework floor run)', floor.ceiling),
          row(
            'for information, the framework floor: Fastify answering the same constant body with the headers of a Plant Store page, nothing else (`bench/framework-floor.ts`)',
            floor.service,
            against(floor),
          ),
        ]
      : []),
    ...(workers
      ? [
          row('ceiling (with the SQLite `--workers` run)', workers.ceiling),
          row(
            `Plant Store, SQLite, \`serve --workers ${workers.workers}\` (one per core; the ceiling is one process)`,
            workers.service,
            against(workers),
          ),
        ]
      : []),
    row('ceiling (with the SQLite caches-off run)', noCache.ceiling),
    row('Plant Store, SQLite, caches off (`PLANTSTORE_CACHE=false`)', noCache.service, against(noCache)),
  ];
  if ('skipped' in postgres) lines.push(`| Plant Store, PostgreSQL | skipped: ${postgres.skipped} | | | | | | |`);
  else {
    lines.push(
      row('ceiling (with the PostgreSQL run)', postgres.ceiling),
      row('Plant Store, PostgreSQL', postgres.service, against(postgres)),
    );
    if (postgres.underWrites) lines.push(writesRow('Plant Store, PostgreSQL', postgres.underWrites));
  }
  lines.push(
    '',
    '## Scale curve (SQLite, `limit=20`)',
    '',
    'Caches on (the default), then off, where every request reads its token and its page from the database. All sizes are ' +
      `served at once and measured in ${r.rounds} alternating rounds of ${r.durationSeconds} s each (${[...scale, scale[0]].map((s) => fmt(s!.plants)).join(', ')}, …).`,
    '',
    '| plants | requests/s | CPU µs/request | p50 ms | p99 ms | errors | caches off: requests/s | CPU µs/request | p50 ms | p99 ms | errors | import plants/s |',
    '|---|---|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const s of scale) {
    const [on, off] = [s.limit20, s.limit20NoCache];
    lines.push(
      `| ${fmt(s.plants)} | ${fmt(on.rps)} | ${fmt(cpuPerRequestUs(on), 1)} | ${fmt(on.p50Ms, 2)} | ${fmt(on.p99Ms, 2)} | ${on.errors + on.non2xx} ` +
        `| ${fmt(off.rps)} | ${fmt(cpuPerRequestUs(off), 1)} | ${fmt(off.p50Ms, 2)} | ${fmt(off.p99Ms, 2)} | ${off.errors + off.non2xx} ` +
        `| ${fmt(s.import.plantsPerSecond)} |`,
    );
  }
  const whileListing = r.pagesWhileListing as Record<string, PagesWhileListing> | undefined;
  const whileListingRendered = whileListing ? renderWhileListing(whileListing) : undefined;
  if (whileListingRendered) lines.push(...whileListingRendered.section);
  lines.push('', '## Full listing (admin, no `limit`, SQLite, 1,000,000 plants)', '');
  lines.push(
    full
      ? `${fmt(full.plants)} plants in ${fmt(full.seconds, 2)} s: **${fmt(full.plantsPerSecond)} plants/s**; server peak RSS ${full.peakRssMb === undefined ? 'unknown' : `${fmt(full.peakRssMb)} MB`}.`
      : 'not run',
  );
  lines.push(
    '',
    '## Import (`plantstore import FILE`, wall clock including process start)',
    '',
    '| backend | plants | seconds | plants/s |',
    '|---|---|---|---|',
  );
  lines.push(
    `| SQLite | ${fmt((r.spec as CatalogueSpec).plants)} | ${fmt(sqlite.import.seconds, 2)} | ${fmt(sqlite.import.plantsPerSecond)} |`,
  );
  const million = scale.find((s) => s.plants === 1_000_000);
  if (million) lines.push(`| SQLite | 1,000,000 | ${fmt(million.import.seconds, 2)} | ${fmt(million.import.plantsPerSecond)} |`);
  if (!('skipped' in postgres)) {
    lines.push(
      `| PostgreSQL | ${fmt((r.spec as CatalogueSpec).plants)} | ${fmt(postgres.import.seconds, 2)} | ${fmt(postgres.import.plantsPerSecond)} |`,
    );
  }

  const writes = r.writes === undefined ? undefined : renderWrites(r.writes as WriteResults);
  if (writes) lines.push('', ...writes.section);
  const events = r.events === undefined ? undefined : renderEvents(r.events as EventResults);
  if (events) lines.push('', ...events.section);
  const groups = r.groups === undefined ? undefined : renderGroups(r.groups as GroupResults);
  if (groups) lines.push('', ...groups.section);
  const worstBodies = r.worstBodies === undefined ? undefined : renderWorstBodies(r.worstBodies as WorstBodyResults);
  if (worstBodies) lines.push('', ...worstBodies.section);
  const largeGroups =
    r.largeGroups === undefined ? undefined : renderLargeGroups(r.largeGroups as LargeGroupResults, r.largeGroupPlants as number);
  if (largeGroups) lines.push('', ...largeGroups.section);

  const p50At = (n: number, cached: boolean) => {
    const s = scale.find((x) => x.plants === n);
    return s && (cached ? s.limit20 : s.limit20NoCache).p50Ms;
  };
  const growthOf = (cached: boolean) => {
    const [big, small] = [p50At(1_000_000, cached), p50At(10_000, cached)];
    return big !== undefined && small !== undefined ? big / small : undefined;
  };
  const growth = growthOf(true);
  const growthNoCache = growthOf(false);
  const importMillion = million?.import.plantsPerSecond ?? sqlite.import.plantsPerSecond;
  // Three digits: a ratio just under its target must not print as the target itself.
  lines.push('', '## Targets', '', '| target | measured | verdict |', '|---|---|---|');
  const cpu = (pair: Paired) => ranged(pair.cpuRatio, pair.roundCpuRatios, 3);
  lines.push(`| SQLite \`limit=20\`: CPU per request ≥ 0.60 of the ceiling's | ${cpu(sqlite)} | ${verdict(sqlite.cpuRatio >= 0.6)} |`);
  lines.push(`| (for information) the same as a requests/s ratio | ${ranged(sqlite.ratio, sqlite.roundRatios, 3)} | for information |`);
  if (floor)
    lines.push(
      `| (for information) the framework floor (Fastify, the same headers, a constant body): CPU per request against the ceiling's | ${cpu(floor)} | for information |`,
    );
  if (workers)
    lines.push(
      `| (for information) \`--workers ${workers.workers}\` against the one-process ceiling, requests/s | ${ranged(workers.ratio, workers.roundRatios, 3)} | for information |`,
    );
  if (sqlite.underWrites) {
    const w = sqlite.underWrites;
    lines.push(
      `| SQLite under writes ≥ 0.80 of the requests/s without | ${ranged(w.ratioToQuiet, w.roundRatios, 3)} | ${verdict(w.ratioToQuiet >= 0.8)} |`,
    );
  }
  lines.push(`| SQLite caches off: CPU per request ≥ 0.25 of the ceiling's | ${cpu(noCache)} | ${verdict(noCache.cpuRatio >= 0.25)} |`);
  lines.push(`| SQLite \`limit=20\` p99 < 10 ms | ${fmt(sqlite.service.p99Ms, 2)} ms | ${verdict(sqlite.service.p99Ms < 10)} |`);
  lines.push(
    `| SQLite \`limit=20\` zero errors | ${sqlite.service.errors + sqlite.service.non2xx} | ${verdict(sqlite.service.errors + sqlite.service.non2xx === 0)} |`,
  );
  if (!('skipped' in postgres)) {
    lines.push(
      `| PostgreSQL \`limit=20\`: CPU per request ≥ 0.45 of the ceiling's | ${cpu(postgres)} | ${verdict(postgres.cpuRatio >= 0.45)} |`,
    );
    if (postgres.underWrites) {
      const w = postgres.underWrites;
      lines.push(
        `| PostgreSQL under writes ≥ 0.80 of the requests/s without | ${ranged(w.ratioToQuiet, w.roundRatios, 3)} | ${verdict(w.ratioToQuiet >= 0.8)} |`,
      );
    }
    lines.push(
      `| PostgreSQL import ≥ 100,000 plants/s | ${fmt(postgres.import.plantsPerSecond)} | ${verdict(postgres.import.plantsPerSecond >= 100_000)} |`,
    );
  }
  if (full) {
    lines.push(`| full listing of 10^6 > 500,000 plants/s | ${fmt(full.plantsPerSecond)} | ${verdict(full.plantsPerSecond > 500_000)} |`);
    lines.push(
      `| full listing peak RSS < 200 MB | ${full.peakRssMb === undefined ? 'unknown' : fmt(full.peakRssMb)} | ${verdict((full.peakRssMb ?? Infinity) < 200)} |`,
    );
  }
  if (growth !== undefined) lines.push(`| p50 at 10^6 ≤ 1.5 × p50 at 10^4 | ${fmt(growth, 2)} × | ${verdict(growth <= 1.5)} |`);
  if (growthNoCache !== undefined) {
    lines.push(`| the same, caches off | ${fmt(growthNoCache, 2)} × | ${verdict(growthNoCache <= 1.5)} |`);
  }
  lines.push(`| SQLite import ≥ 250,000 plants/s | ${fmt(importMillion)} | ${verdict(importMillion >= 250_000)} |`);
  if (whileListingRendered) lines.push(...whileListingRendered.targets);
  if (writes) lines.push(...writes.targets);
  if (events) lines.push(...events.targets);
  if (groups) lines.push(...groups.targets);
  if (worstBodies) lines.push(...worstBodies.targets);
  if (largeGroups) lines.push(...largeGroups.targets);
  return lines.join('\n');
}

await main();
