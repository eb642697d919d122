import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream, readFileSync, writeFileSync } from 'node:fs';
import { readFile, rm } from 'node:fs/promises';
import { request } from 'node:http';
import { cpus } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { generateToken } from '../src/catalogue/tokens.js';
import type { CatalogueRecord } from '../src/import-format/records.js';
import { openStore } from '../src/store/open-store.js';
import { generateCatalogue, userName, type CatalogueSpec } from './catalogue.js';
import { type LoadResult } from './load.js';
import { serverCpuSeconds } from './process-cpu.js';

import { CLI, CONNECTIONS, DURATION, ROOT, ROUNDS, args, load, log } from './options.js';

// What every part of the bench measures with: servers started and stopped, catalogues imported, tokens issued,
// rounds alternated between a limit and Plant Store, each with the server's own CPU.

export interface Server {
  url: string;
  process: ChildProcess;
  stop(): Promise<void>;
}

/** A load result with the server's own CPU time over it (utime + stime, workers included). */
export interface Measured extends LoadResult {
  cpuSeconds: number;
}

/** The server's CPU per request in µs. */
export const cpuPerRequestUs = (m: Measured) => (m.cpuSeconds / m.requests) * 1e6;

export async function waitForLine(child: ChildProcess, pattern: RegExp): Promise<RegExpMatchArray> {
  let buffered = '';
  for await (const chunk of child.stdout!) {
    buffered += String(chunk);
    const match = pattern.exec(buffered);
    if (match) return match;
  }
  throw new Error(`process exited before printing ${pattern}`);
}

export async function waitForHttp(url: string): Promise<void> {
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

export function stopper(child: ChildProcess): () => Promise<void> {
  return async () => {
    if (child.exitCode !== null) return;
    child.kill('SIGTERM');
    await once(child, 'exit');
  };
}

/** A constant-body server of this folder (the ceiling, or the framework floor) on a free port. */
export async function startConstantServer(script: 'ceiling.ts' | 'framework-floor.ts'): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench', script), '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
  const [, port] = await waitForLine(child, /listening (\d+)/);
  return { url: `http://127.0.0.1:${port}`, process: child, stop: stopper(child) };
}

export async function freePort(): Promise<number> {
  const { createServer } = await import('node:net');
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  await new Promise((resolve) => server.close(resolve));
  return port;
}

export async function startService(db: string, env: NodeJS.ProcessEnv = {}): Promise<Server> {
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
export async function peakRssMb(pid: number): Promise<number | undefined> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = /VmHWM:\s+(\d+) kB/.exec(status)?.[1];
    return kb ? Number(kb) / 1024 : undefined;
  } catch {
    return undefined;
  }
}

/** Writes the generated catalogue as NDJSON (not timed), then imports it with the CLI (timed, wall clock). */
export async function buildDatabase(
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
export async function issueTokens(db: string, users: number): Promise<{ rotating: string[]; admin: string }> {
  const [admin, ...rotating] = await tokensFor(
    db,
    Array.from({ length: users + 1 }, (_, u) => userName(u)),
  );
  return { rotating, admin: admin! };
}

/** An opaque token for each user named, written straight through the Store. */
export async function tokensFor(db: string, users: readonly string[]): Promise<string[]> {
  const store = await openStore({ db });
  try {
    const tokens: string[] = [];
    for (const user of users) {
      const { token, hash } = generateToken();
      await store.tokens.add({ user, hash, label: 'bench' });
      tokens.push(token);
    }
    return tokens;
  } finally {
    await store.close();
  }
}

/** A service measured against the ceiling in alternating rounds. */
export interface Paired {
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
export interface UnderWrites {
  service: Measured;
  /** requests/s under writes over requests/s without, over all rounds and round by round. */
  ratioToQuiet: number;
  roundRatios: number[];
  cpuRatio: number;
  /** What the writer committed a second, on average over the rounds. */
  changesPerSecond: number;
}

export function combine(results: Measured[]): Measured {
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

export interface Target {
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
export async function inRounds(targets: readonly Target[]): Promise<Measured[][]> {
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

export const pairOf = (ceilingRounds: Measured[], serviceRounds: Measured[]): Paired => {
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

export async function postgresReachable(url: string): Promise<string | false> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 2_000 });
  try {
    await client.connect();
    await client.end();
    return false;
  } catch (err) {
    return (err as Error).message;
  }
}

export async function dropSchema(url: string, schema: string): Promise<void> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
  await client.end();
}

/**
 * The processor's name, with its family and model from /proc/cpuinfo on Linux: a virtual machine may name only
 * the vendor's line ("AMD EPYC"), and two generations of it gave 0.49 and 0.69 for the same cached page.
 */
export function processorModel(): string {
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

export const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

/** A ratio over several rounds, with the lowest and highest round's beside it: `0.93 (0.88–0.97)`. */
export const ranged = (ratio: number, rounds: readonly number[], digits = 2): string =>
  rounds.length > 1 ? `${fmt(ratio, digits)} (${fmt(Math.min(...rounds), 2)}–${fmt(Math.max(...rounds), 2)})` : fmt(ratio, digits);
export const verdict = (ok: boolean) => (ok ? 'met' : '**NOT met**');

/** Imports `records` into `db` with the CLI (not timed). */
export function importRecords(db: string, dir: string, records: object[]): void {
  const file = join(dir, `records-${process.hrtime.bigint()}.ndjson`);
  writeFileSync(file, records.map((r) => JSON.stringify(r)).join('\n') + '\n');
  const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
}

/**
 * Vacuums and analyzes a freshly imported PostgreSQL catalogue, as autovacuum soon would: otherwise autovacuum
 * takes it up during the rounds, and index-only scans still visit the heap.
 */
export async function settle(url: string): Promise<void> {
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
export async function backendsCpuSeconds(application: string): Promise<number> {
  const client = new pg.Client({ connectionString: args.pg.replace(/\?.*$/, '') });
  await client.connect();
  try {
    const { rows } = await client.query<{ pid: number }>('SELECT pid FROM pg_stat_activity WHERE application_name = $1', [application]);
    return rows.reduce((sum, { pid }) => sum + serverCpuSeconds(pid), 0);
  } finally {
    await client.end();
  }
}

/** One part of the bench: its rows and targets, printed. */
export type Rendered = { section: string[]; targets: string[] };
