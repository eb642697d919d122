import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { request } from 'node:http';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import pg from 'pg';
import { generateToken } from '../src/access/tokens.js';
import { openStore } from '../src/store/open-store.js';
import { DEFAULT_SPEC, generateCatalogue, userName, type CatalogueSpec } from './catalogue.js';
import { loadGenerator, type LoadResult } from './load.js';

// `npm run bench`: the ceiling (bare node:http) and Plant Store measured side by side in one run.
// Every figure is printed, written to docs/benchmarks.json and, as a table, to docs/benchmarks.md.

const { values: args } = parseArgs({
  options: {
    plants: { type: 'string', default: String(DEFAULT_SPEC.plants) },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    'with-1e7': { type: 'boolean', default: false },
    /** Catalogue sizes of the scale curve (a quick check can pass smaller ones). */
    scale: { type: 'string', default: '10000,100000,1000000' },
    'no-postgres': { type: 'boolean', default: false },
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

async function startCeiling(): Promise<Server> {
  const child = spawn(process.execPath, ['--import', 'tsx', join(ROOT, 'bench/ceiling.ts'), '0'], { stdio: ['ignore', 'pipe', 'inherit'] });
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
async function buildDatabase(db: string, spec: CatalogueSpec, dir: string): Promise<{ seconds: number; plantsPerSecond: number }> {
  const file = join(dir, `catalogue-${spec.plants}.ndjson`);
  const out = createWriteStream(file);
  for (const record of generateCatalogue(spec)) {
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
  const store = await openStore({ db });
  try {
    const rotating: string[] = [];
    for (let u = 1; u <= users; u++) {
      const { token, hash } = generateToken();
      await store.addToken({ user: userName(u), hash, label: 'bench' });
      rotating.push(token);
    }
    const { token, hash } = generateToken();
    await store.addToken({ user: userName(0), hash, label: 'bench' });
    return { rotating, admin: token };
  } finally {
    await store.close();
  }
}

interface Paired {
  ceiling: LoadResult;
  service: LoadResult;
  ratio: number;
  /** The service's requests/s over the ceiling's, round by round: how far the machine's noise moves the ratio. */
  roundRatios: number[];
}

function combine(results: LoadResult[]): LoadResult {
  const sorted = (pick: (r: LoadResult) => number) => results.map(pick).sort((a, b) => a - b);
  const median = (values: number[]) => values[Math.floor(values.length / 2)]!;
  const requests = results.reduce((n, r) => n + r.requests, 0);
  const seconds = results.reduce((n, r) => n + r.seconds, 0);
  return {
    requests,
    seconds,
    rps: requests / seconds,
    p50Ms: median(sorted((r) => r.p50Ms)),
    p99Ms: Math.max(...results.map((r) => r.p99Ms)),
    errors: results.reduce((n, r) => n + r.errors, 0),
    non2xx: results.reduce((n, r) => n + r.non2xx, 0),
  };
}

/**
 * Warms each target up, then measures them in alternating rounds (A B A B …, or A B C A B C …) of equal
 * durations, so that a slow spell of a shared machine falls on all of them alike. Per target, one result per round.
 */
async function inRounds(targets: ReadonlyArray<{ url: string; tokens: string[] }>): Promise<LoadResult[][]> {
  const run = (target: { url: string; tokens: string[] }, seconds: number) => load.run({ ...target, seconds, connections: CONNECTIONS });
  for (const target of targets) await run(target, 2);
  const runs = targets.map((): LoadResult[] => []);
  for (let round = 0; round < ROUNDS; round++) for (const [i, target] of targets.entries()) runs[i]!.push(await run(target, DURATION));
  return runs;
}

/** Starts the service on `db` with `env`, measures it against the ceiling (A B A B …), and stops it. */
async function measure(ceiling: Server, label: string, db: string, tokens: string[], env: NodeJS.ProcessEnv = {}): Promise<Paired> {
  const service = await startService(db, env);
  try {
    log(`${label}: GET /plants?limit=20, ceiling and service alternately…`);
    const [a, b] = await inRounds([ceiling, service].map((server) => ({ url: `${server.url}/plants?limit=20`, tokens })));
    const [ceilingResult, serviceResult] = [combine(a!), combine(b!)];
    return {
      ceiling: ceilingResult,
      service: serviceResult,
      ratio: serviceResult.rps / ceilingResult.rps,
      roundRatios: b!.map((round, i) => round.rps / a![i]!.rps),
    };
  } finally {
    await service.stop();
  }
}

/** Reads a whole listing as a client would, counting plants; the server's peak RSS is read from /proc. */
async function fullListing(service: Server, token: string): Promise<{ plants: number; seconds: number; plantsPerSecond: number; bytes: number }> {
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

const fmt = (n: number, digits = 0) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });
const verdict = (ok: boolean) => (ok ? 'met' : '**NOT met**');

async function main(): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'plantstore-bench-'));
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants: Number(args.plants) };
  const scaleSizes = [...args.scale.split(',').map(Number), ...(args['with-1e7'] ? [10_000_000] : [])];
  const machine = {
    cpu: cpus()[0]?.model ?? 'unknown',
    cores: cpus().length,
    memoryGb: Math.round(totalmem() / 2 ** 30),
    node: process.version,
    loadGenerator: load.name,
  };
  log(`machine: ${machine.cpu}, ${machine.cores} cores, ${machine.memoryGb} GB, Node ${machine.node}; load generator: ${load.name}`);
  log(`${ROUNDS} rounds of ${DURATION} s per side, ${CONNECTIONS} connections, ${ROTATING_USERS} users' tokens in rotation`);

  const results: Record<string, unknown> = { date: new Date().toISOString(), machine, spec, durationSeconds: DURATION, rounds: ROUNDS, connections: CONNECTIONS };
  const ceiling = await startCeiling();
  try {
    // 2. SQLite, the default catalogue.
    log(`\nSQLite: importing ${fmt(spec.plants)} plants…`);
    const sqliteDb = join(dir, 'main.db');
    const sqliteImport = await buildDatabase(sqliteDb, spec, dir);
    const sqliteTokens = await issueTokens(sqliteDb, ROTATING_USERS);
    results.sqlite = { import: sqliteImport, ...(await measure(ceiling, 'SQLite', sqliteDb, sqliteTokens.rotating)) };
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
        results.postgres = { import: pgImport, ...(await measure(ceiling, 'PostgreSQL', pgDb, pgTokens.rotating)) };
      } finally {
        await dropSchema(args.pg, schema);
      }
    }

    // 5. and 4. The scale curve on SQLite, and the admin's full listing on the largest catalogue. Every size
    // is served at once and measured in alternating rounds, like ceiling and service.
    const built: Array<{ plants: number; db: string; import: { seconds: number; plantsPerSecond: number }; tokens: { rotating: string[]; admin: string } }> = [];
    for (const plants of scaleSizes) {
      log(`\nscale: importing ${fmt(plants)} plants…`);
      const db = join(dir, `scale-${plants}.db`);
      built.push({ plants, db, import: await buildDatabase(db, { ...spec, plants }, dir), tokens: await issueTokens(db, ROTATING_USERS) });
    }
    let full: (Awaited<ReturnType<typeof fullListing>> & { peakRssMb: number | undefined }) | undefined;
    const curve = async (env: NodeJS.ProcessEnv, last?: (services: Server[]) => Promise<void>): Promise<LoadResult[]> => {
      const services: Server[] = [];
      try {
        for (const b of built) services.push(await startService(b.db, env));
        const results = (await inRounds(built.map((b, i) => ({ url: `${services[i]!.url}/plants?limit=20`, tokens: b.tokens.rotating })))).map(combine);
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
  const sqlite = r.sqlite as Paired & { import: { plantsPerSecond: number } };
  const postgres = r.postgres as (Paired & { import: { plantsPerSecond: number } }) | { skipped: string };
  const noCache = r.sqliteNoCache as Paired;
  const workers = r.sqliteWorkers as (Paired & { workers: number }) | undefined;
  const scale = r.scale as Array<{ plants: number; import: { plantsPerSecond: number; seconds: number }; limit20: LoadResult; limit20NoCache: LoadResult }>;
  const full = r.fullListing as { plants: number; seconds: number; plantsPerSecond: number; peakRssMb?: number } | undefined;
  // A paired ratio, with the lowest and highest of its rounds when there are several.
  const ratioOf = (pair: Paired, digits: number) => {
    const rounds = pair.roundRatios;
    return rounds.length > 1 ? `${fmt(pair.ratio, digits)} (${fmt(Math.min(...rounds), 2)}–${fmt(Math.max(...rounds), 2)})` : fmt(pair.ratio, digits);
  };
  const row = (name: string, x: LoadResult, pair?: Paired) =>
    `| ${name} | ${fmt(x.rps)} | ${pair === undefined ? '1.00' : ratioOf(pair, 2)} | ${fmt(x.p50Ms, 2)} | ${fmt(x.p99Ms, 2)} | ${x.errors + x.non2xx} |`;
  const lines = [
    '# Benchmarks',
    '',
    `Latest run of \`npm run bench\`, ${String(r.date).slice(0, 10)}. Machine: ${machine.cpu}, ${machine.cores} cores, ` +
      `${machine.memoryGb} GB RAM, Node ${machine.node}. Load generator: ${machine.loadGenerator}, ${r.connections} connections, ` +
      `${r.rounds} alternating rounds of ${r.durationSeconds} s per side (ceiling A, service B: A B A B …). Catalogue: ` +
      `${fmt((r.spec as CatalogueSpec).plants)} plants, 1,000 users, 50 groups, ~30% shared with a user, ~10% with a group, ~5% public ` +
      `(seeded); requests authenticated with ${ROTATING_USERS} ordinary users' tokens in rotation. The service runs with its ` +
      'defaults, caches on: after its first request, each user\'s first page and token check come from memory (emptied on any commit).',
    '',
    '## `GET /plants?limit=20` against the ceiling',
    '',
    'The ratio is over all rounds; in brackets, its lowest and highest single round.',
    '',
    '| server | requests/s | ratio to ceiling | p50 ms | p99 ms | errors + non-2xx |',
    '|---|---|---|---|---|---|',
    row('ceiling: bare node:http, constant body (with the SQLite run)', sqlite.ceiling),
    row('Plant Store, SQLite', sqlite.service, sqlite),
    ...(workers
      ? [
          row('ceiling (with the SQLite `--workers` run)', workers.ceiling),
          row(`Plant Store, SQLite, \`serve --workers ${workers.workers}\` (one per core; the ceiling is one process)`, workers.service, workers),
        ]
      : []),
    row('ceiling (with the SQLite caches-off run)', noCache.ceiling),
    row('Plant Store, SQLite, caches off (`PLANTSTORE_CACHE=false`)', noCache.service, noCache),
  ];
  if ('skipped' in postgres) lines.push(`| Plant Store, PostgreSQL | skipped: ${postgres.skipped} | | | | |`);
  else lines.push(row('ceiling (with the PostgreSQL run)', postgres.ceiling), row('Plant Store, PostgreSQL', postgres.service, postgres));
  lines.push(
    '',
    '## Scale curve (SQLite, `limit=20`)',
    '',
    'Caches on (the default), then off, where every request reads its token and its page from the database. All sizes are ' +
      `served at once and measured in ${r.rounds} alternating rounds of ${r.durationSeconds} s each (${[...scale, scale[0]].map((s) => fmt(s!.plants)).join(', ')}, …).`,
    '',
    '| plants | requests/s | p50 ms | p99 ms | errors | caches off: requests/s | p50 ms | p99 ms | errors | import plants/s |',
    '|---|---|---|---|---|---|---|---|---|---|',
  );
  for (const s of scale) {
    const [on, off] = [s.limit20, s.limit20NoCache];
    lines.push(
      `| ${fmt(s.plants)} | ${fmt(on.rps)} | ${fmt(on.p50Ms, 2)} | ${fmt(on.p99Ms, 2)} | ${on.errors + on.non2xx} ` +
        `| ${fmt(off.rps)} | ${fmt(off.p50Ms, 2)} | ${fmt(off.p99Ms, 2)} | ${off.errors + off.non2xx} | ${fmt(s.import.plantsPerSecond)} |`,
    );
  }
  lines.push('', '## Full listing (admin, no `limit`, SQLite, 1,000,000 plants)', '');
  lines.push(full ? `${fmt(full.plants)} plants in ${fmt(full.seconds, 2)} s: **${fmt(full.plantsPerSecond)} plants/s**; server peak RSS ${full.peakRssMb === undefined ? 'unknown' : `${fmt(full.peakRssMb)} MB`}.` : 'not run');
  lines.push('', '## Import (`plantstore import FILE`, wall clock including process start)', '', '| backend | plants | seconds | plants/s |', '|---|---|---|---|');
  lines.push(`| SQLite | ${fmt((r.spec as CatalogueSpec).plants)} | ${fmt((sqlite as unknown as { import: { seconds: number } }).import.seconds, 2)} | ${fmt(sqlite.import.plantsPerSecond)} |`);
  const million = scale.find((s) => s.plants === 1_000_000);
  if (million) lines.push(`| SQLite | 1,000,000 | ${fmt(million.import.seconds, 2)} | ${fmt(million.import.plantsPerSecond)} |`);
  if (!('skipped' in postgres)) {
    lines.push(`| PostgreSQL | ${fmt((r.spec as CatalogueSpec).plants)} | ${fmt((postgres as unknown as { import: { seconds: number } }).import.seconds, 2)} | ${fmt(postgres.import.plantsPerSecond)} |`);
  }

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
  lines.push(`| SQLite \`limit=20\` ≥ 0.60 of the ceiling | ${ratioOf(sqlite, 3)} | ${verdict(sqlite.ratio >= 0.6)} |`);
  if (workers) lines.push(`| (not the target's measure) the same with \`--workers ${workers.workers}\` against the one-process ceiling | ${ratioOf(workers, 3)} | for information |`);
  lines.push(`| SQLite \`limit=20\` p99 < 10 ms | ${fmt(sqlite.service.p99Ms, 2)} ms | ${verdict(sqlite.service.p99Ms < 10)} |`);
  lines.push(`| SQLite \`limit=20\` zero errors | ${sqlite.service.errors + sqlite.service.non2xx} | ${verdict(sqlite.service.errors + sqlite.service.non2xx === 0)} |`);
  if (!('skipped' in postgres)) {
    lines.push(`| PostgreSQL \`limit=20\` ≥ 0.40 of the ceiling | ${ratioOf(postgres, 3)} | ${verdict(postgres.ratio >= 0.4)} |`);
    lines.push(`| PostgreSQL import ≥ 100,000 plants/s | ${fmt(postgres.import.plantsPerSecond)} | ${verdict(postgres.import.plantsPerSecond >= 100_000)} |`);
  }
  if (full) {
    lines.push(`| full listing of 10^6 > 500,000 plants/s | ${fmt(full.plantsPerSecond)} | ${verdict(full.plantsPerSecond > 500_000)} |`);
    lines.push(`| full listing peak RSS < 200 MB | ${full.peakRssMb === undefined ? 'unknown' : fmt(full.peakRssMb)} | ${verdict((full.peakRssMb ?? Infinity) < 200)} |`);
  }
  if (growth !== undefined) lines.push(`| p50 at 10^6 ≤ 1.5 × p50 at 10^4 | ${fmt(growth, 2)} × | ${verdict(growth <= 1.5)} |`);
  if (growthNoCache !== undefined) {
    lines.push(`| the same, caches off | ${fmt(growthNoCache, 2)} × | ${verdict(growthNoCache <= 1.5)} |`);
  }
  lines.push(`| SQLite import ≥ 250,000 plants/s | ${fmt(importMillion)} | ${verdict(importMillion >= 250_000)} |`);
  return lines.join('\n');
}

await main();
