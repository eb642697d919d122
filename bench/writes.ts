import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runWrk, WRK_SUMMARY } from './load.js';
import { postgresCpuSeconds, serverCpuSeconds } from './process-cpu.js';
import { combine, cpuPerRequestUs, fmt, ranged, startConstantServer, verdict, type Measured } from './harness.js';

// The write rows of `npm run bench`: POST and DELETE /plants on SQLite and PostgreSQL, each beside its limit
// measured alternately in the same run (SQLite: the same rows inserted in-process in batches at the same
// durability, bench/sqlite-limit.ts; PostgreSQL: pgbench's one-row inserts into a bare table at the same client
// count), reads and /healthz during a write flood, and a mix of reads and writes against reads alone. Uses wrk
// (the write rows need its Lua scripts). The POST rows at 64 connections are also judged by CPU per write: on SQLite
// against the ceiling's per request (a bare node:http server, in the same rounds), on PostgreSQL Node and database
// together against pgbench's client and database per row.

export interface WriteBenchContext {
  /** The built CLI (dist/cli/main.js). */
  cli: string;
  root: string;
  dir: string;
  seconds: number;
  rounds: number;
  log: (line: string) => void;
  /** Starts `plantstore serve` on `db` with flags; the writes rows run with the write budget off. */
  startService(db: string, env?: NodeJS.ProcessEnv): Promise<{ url: string; process: ChildProcess; stop(): Promise<void> }>;
  /** Imports records into `db` with the CLI. */
  importRecords(db: string, records: object[]): void;
  /** Tokens of users 1..n, in that order. */
  issueTokens(db: string, users: number): Promise<string[]>;
  userName(index: number): string;
}

/** A load result with the server's own CPU time over it: the harness's Measured. */
export type WriteMeasure = Measured;

/** The most a POST may cost in CPU: on SQLite against the ceiling's request, on PostgreSQL against pgbench's row. */
export const POST_CPU_LIMITS = { sqlite: 2, postgres: 1.2 } as const;

const WRITE_ENV = { PLANTSTORE_WRITE_RATE_LIMIT: 'off', PLANTSTORE_RATE_LIMIT: 'off' };
const TOKENS = 50;

/**
 * A wrk script: `kind` writes plants with ids from `first` (each by the token at its index), deletes them in the
 * same order, or mixes 90 reads, 9 creates and 1 delete of a plant created 909 requests before (long committed,
 * so that each delete finds its plant), by its creator.
 */
function script(kind: 'post' | 'delete' | 'mixed', tokens: string[], first: number): string {
  const headers = `local tokens = {${tokens.map((t) => `"Bearer ${t}"`).join(',')}}
local n = 0
local json = { ["Content-Type"] = "application/json" }
local function post(i)
  local id = ${first} + i
  return wrk.format("POST", "/plants", { ["Authorization"] = tokens[(i % #tokens) + 1], ["Content-Type"] = "application/json" },
    '{"id":' .. string.format("%d", id) .. ',"name":"Written #' .. string.format("%d", id) .. '"}')
end
local function delete(i)
  return wrk.format("DELETE", "/plants/" .. string.format("%d", ${first} + i), { ["Authorization"] = tokens[(i % #tokens) + 1] })
end
`;
  const body = {
    post: 'request = function() local i = n; n = n + 1; return post(i) end',
    delete: 'request = function() local i = n; n = n + 1; return delete(i) end',
    mixed: `request = function()
  local i = n; n = n + 1
  local k = i % 100
  if k < 90 then return wrk.format("GET", "/plants?limit=20", { ["Authorization"] = tokens[(i % #tokens) + 1] }) end
  if k < 99 or i < 1000 then return post(i) end
  return delete(i - 909)
end`,
  }[kind];
  return `${headers}${body}\n${WRK_SUMMARY}`;
}

const scripts = mkdtempSync(join(tmpdir(), 'plantstore-writes-'));
process.once('exit', () => rmSync(scripts, { recursive: true, force: true }));

/**
 * Runs wrk with `lua` against `url` (a script's requests go to its host) and reads the server's CPU time around it,
 * with `database` the CPU of every PostgreSQL process too.
 */
async function wrk(
  url: string,
  lua: string,
  connections: number,
  seconds: number,
  pids: number[],
  database = false,
): Promise<WriteMeasure> {
  const file = join(scripts, `s${Math.random().toString(36).slice(2)}.lua`);
  writeFileSync(file, lua);
  const cpu = () => pids.reduce((sum, pid) => sum + serverCpuSeconds(pid), 0) + (database ? postgresCpuSeconds() : 0);
  const before = cpu();
  const result = await runWrk(url, file, connections, seconds);
  return { ...result, cpuSeconds: cpu() - before };
}

/** A limit's rounds: what it wrote a second, and its own CPU per row. */
export interface LimitMeasure {
  perSecond: number;
  cpuPerRowUs: number | undefined;
  /** Each round's service CPU a write against the limit's a row, when the limit's CPU is known. */
  roundCpuRatios?: number[];
}

/** CPU seconds spent on `rows` rows, as µs a row. */
const cpuPerRowUs = (cpuSeconds: number, rows: number): number => (cpuSeconds / rows) * 1e6;

/** One write row: the service over its rounds, its limit over the rounds in between, and their ratio. */
export interface WriteRow {
  name: string;
  connections: number;
  service: WriteMeasure;
  limit: LimitMeasure;
  ratio: number;
  roundRatios: number[];
  /** The ceiling's CPU per request, measured in the same rounds (SQLite's POST at 64 connections). */
  ceiling?: { cpuPerRequestUs: number; rps: number; roundCpuRatios: number[] };
}

/** Runs `service` and `limit` alternately (one warm-up of the service first), and `ceiling` in the same rounds, and pairs them. */
async function alternately(
  c: WriteBenchContext,
  name: string,
  connections: number,
  service: (round: number) => Promise<WriteMeasure>,
  limit: () => Promise<{ perSecond: number; cpuSeconds?: number; rows: number }>,
  ceiling?: () => Promise<WriteMeasure>,
): Promise<WriteRow> {
  c.log(`${name}, ${connections} connections, beside its limit${ceiling ? ' and the ceiling' : ''}, alternately…`);
  await service(-1);
  const served: WriteMeasure[] = [];
  const limits: Array<{ perSecond: number; cpuSeconds?: number; rows: number }> = [];
  const ceilings: WriteMeasure[] = [];
  for (let round = 0; round < c.rounds; round++) {
    const s = await service(round);
    served.push(s);
    const l = await limit();
    limits.push(l);
    const bare = await ceiling?.();
    if (bare) ceilings.push(bare);
    c.log(
      `  round ${round + 1}: ${fmt(s.rps)} a second (${fmt(cpuPerRequestUs(s), 1)} µs CPU each, p99 ${fmt(s.p99Ms, 1)} ms, ` +
        `${s.errors + s.non2xx} errors); limit ${fmt(l.perSecond)} a second` +
        `${l.cpuSeconds === undefined ? '' : ` (${fmt(cpuPerRowUs(l.cpuSeconds, l.rows), 1)} µs CPU a row)`}` +
        `${bare ? `; ceiling ${fmt(cpuPerRequestUs(bare), 1)} µs CPU a request` : ''}`,
    );
  }
  const total = combine(served);
  const limitRows = limits.reduce((n, l) => n + l.rows, 0);
  const limitCpu = limits.every((l) => l.cpuSeconds !== undefined) ? limits.reduce((n, l) => n + l.cpuSeconds!, 0) : undefined;
  const perSecond = limits.reduce((n, l) => n + l.perSecond, 0) / limits.length;
  const bare = ceilings.length > 0 ? combine(ceilings) : undefined;
  return {
    name,
    connections,
    service: total,
    limit: {
      perSecond,
      cpuPerRowUs: limitCpu === undefined ? undefined : cpuPerRowUs(limitCpu, limitRows),
      ...(limitCpu === undefined
        ? {}
        : { roundCpuRatios: served.map((s, i) => cpuPerRequestUs(s) / cpuPerRowUs(limits[i]!.cpuSeconds!, limits[i]!.rows)) }),
    },
    ratio: total.rps / perSecond,
    roundRatios: served.map((s, i) => s.rps / limits[i]!.perSecond),
    ...(bare
      ? {
          ceiling: {
            cpuPerRequestUs: cpuPerRequestUs(bare),
            rps: bare.rps,
            roundCpuRatios: served.map((s, i) => cpuPerRequestUs(s) / cpuPerRequestUs(ceilings[i]!)),
          },
        }
      : {}),
  };
}

/** The SQLite limit: bench/sqlite-limit.ts for `seconds`, on a copy of the schema, its CPU read from /proc. */
async function sqliteLimit(
  c: WriteBenchContext,
  db: string,
  first: number,
): Promise<{ perSecond: number; cpuSeconds: number; rows: number }> {
  const child = spawn(
    process.execPath,
    [
      '--import',
      'tsx',
      join(c.root, 'bench/sqlite-limit.ts'),
      '--db',
      db,
      '--seconds',
      String(c.seconds),
      '--first',
      String(first),
      // The owners of the service's creates: users 1 to TOKENS, whose ids follow user 0's.
      '--first-owner',
      '2',
      '--owners',
      String(TOKENS),
    ],
    { stdio: ['ignore', 'pipe', 'inherit'] },
  );
  let out = '';
  child.stdout.on('data', (chunk: Buffer) => (out += String(chunk)));
  while (!out.includes('writing') && child.exitCode === null) await new Promise((resolve) => setTimeout(resolve, 10));
  const before = serverCpuSeconds(child.pid!);
  let cpu = before;
  const sampler = setInterval(() => (cpu = serverCpuSeconds(child.pid!)), 50);
  await once(child, 'exit');
  clearInterval(sampler);
  const { rows, seconds } = JSON.parse(/\{.*\}/.exec(out)![0]) as { rows: number; seconds: number };
  return { perSecond: rows / seconds, cpuSeconds: cpu - before, rows };
}

/**
 * pgbench's one-row inserts into a bare table, `clients` at once, for `seconds`: transactions a second, and the CPU
 * of pgbench and of the database over it.
 */
function pgbench(url: string, clients: number, seconds: number): { perSecond: number; rows: number; cpuSeconds: number } {
  const u = new URL(url);
  const schema = u.searchParams.get('schema')!;
  const file = join(scripts, 'insert.sql');
  writeFileSync(file, `INSERT INTO ${schema}.bench_bare (name) VALUES ('Written');\n`);
  const database = postgresCpuSeconds();
  // bash's `times` prints its children's user and system time last: pgbench's own CPU, however short it ran.
  const run = spawnSync(
    'bash',
    [
      '-c',
      'pgbench "$@" && times',
      'pgbench',
      '-n',
      '-c',
      String(clients),
      '-j',
      '2',
      '-T',
      String(seconds),
      '-f',
      file,
      '-h',
      u.hostname,
      '-p',
      u.port || '5432',
      '-U',
      decodeURIComponent(u.username || 'postgres'),
      u.pathname.slice(1),
    ],
    { encoding: 'utf8' },
  );
  const databaseCpu = postgresCpuSeconds() - database;
  const tps = /tps = ([0-9.]+)/.exec(run.stdout)?.[1];
  const times = /(\d+)m([0-9.]+)s (\d+)m([0-9.]+)s\s*$/.exec(run.stdout);
  if (tps === undefined || times === null) throw new Error(`pgbench failed: ${run.stderr || run.stdout}`);
  const [, um, us, sm, ss] = times.map(Number) as [number, number, number, number, number];
  return { perSecond: Number(tps), rows: Number(tps) * seconds, cpuSeconds: um * 60 + us + sm * 60 + ss + databaseCpu };
}

/** Plants for `count` deletes from id `first`, each owned by the user of the token that deletes it. */
function plantsToDelete(c: WriteBenchContext, first: number, count: number): object[] {
  return Array.from({ length: count }, (_, i) => ({
    type: 'plant',
    id: first + i,
    name: `To delete #${first + i}`,
    owner: c.userName(1 + (i % TOKENS)),
    public: false,
  }));
}

/** Plants made beforehand for the delete rows, more than their rounds delete. */
const DELETABLE = 800_000;

/**
 * Where the next delete run starts: past every id the last one sent (those still in flight at its end included),
 * at an index that the tokens' rotation maps to the plants' owners again.
 */
const afterDeletes = (first: number, deleted: number): number => first + Math.ceil((deleted + 256) / TOKENS) * TOKENS;

export interface FloodRow {
  backend: string;
  posts: WriteMeasure;
  reads: WriteMeasure;
  /** The slowest of /healthz's answers while the flood ran, in ms, on one kept-alive connection. */
  healthzMaxMs: number;
  /** The same with a new connection for each request (a health checker's way): the machine's TCP setup too. */
  healthzNewConnectionMaxMs: number;
  /** SQLite: the WAL's largest size during the flood and at its end, in MB. */
  walMaxMb?: number;
  walEndMb?: number;
}

/** One /healthz answered (or failed), on `agent`'s connection or a new one. */
function askHealthz(url: string, agent: Agent | false): Promise<void> {
  return new Promise<void>((resolve) => {
    request(`${url}/healthz`, { agent }, (res) => {
      res.resume();
      res.on('end', resolve);
    })
      .on('error', () => resolve())
      .end();
  });
}

/** /healthz asked again and again, one at a time, while `running`: the slowest answer, in ms. */
async function probeHealthz(url: string, running: () => boolean, agent: Agent | false): Promise<number> {
  let slowest = 0;
  while (running()) {
    const started = performance.now();
    await askHealthz(url, agent);
    slowest = Math.max(slowest, performance.now() - started);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  return slowest;
}

/**
 * A flood of creates (64 connections) for `seconds`, while another user reads pages (4 connections) and /healthz
 * is asked one request at a time: what a reader and a health check meet during the flood.
 */
async function flood(
  c: WriteBenchContext,
  backend: string,
  service: { url: string; process: ChildProcess },
  tokens: string[],
  first: number,
  seconds: number,
  wal?: string,
): Promise<FloodRow> {
  c.log(`${backend}: reads and /healthz during ${seconds} s of a 64-connection POST flood…`);
  const reads = `local t = "Bearer ${tokens[0]!}"\nrequest = function() return wrk.format("GET", nil, { ["Authorization"] = t }) end\n${WRK_SUMMARY}`;
  // The reader has read before the flood, as the other rows warm up: wrk's latencies correct for coordinated
  // omission, so the first page of a cold session (its database connection, its plan) would otherwise decide the p99.
  await wrk(`${service.url}/plants?limit=20`, reads, 4, 2, []);
  let running = true;
  let walMax = 0;
  const sampler =
    wal === undefined
      ? undefined
      : setInterval(() => (walMax = Math.max(walMax, statSync(wal, { throwIfNoEntry: false })?.size ?? 0)), 100);
  // Two probes: one on a kept-alive connection (what the service answers), one connecting for each request. The
  // kept-alive one connects before the flood, as a health checker's open connection has: its first answer would
  // otherwise measure a connection accepted while the flood's 64 open and wrk starts, which the probe on new
  // connections measures already.
  const keptAlive = new Agent({ keepAlive: true, maxSockets: 1 });
  await askHealthz(service.url, keptAlive);
  const healthz = probeHealthz(service.url, () => running, keptAlive);
  const healthzNew = probeHealthz(service.url, () => running, false);
  const [posts, readsDuring] = await Promise.all([
    wrk(`${service.url}/plants`, script('post', tokens.slice(1), first), 64, seconds, [service.process.pid!]),
    wrk(`${service.url}/plants?limit=20`, reads, 4, seconds, []),
  ]);
  running = false;
  const [healthzMaxMs, healthzNewConnectionMaxMs] = await Promise.all([healthz, healthzNew]);
  keptAlive.destroy();
  if (sampler) clearInterval(sampler);
  const walEnd = wal === undefined ? undefined : (statSync(wal, { throwIfNoEntry: false })?.size ?? 0);
  const row: FloodRow = {
    backend,
    posts,
    reads: readsDuring,
    healthzMaxMs,
    healthzNewConnectionMaxMs,
    ...(wal === undefined ? {} : { walMaxMb: walMax / 2 ** 20, walEndMb: walEnd! / 2 ** 20 }),
  };
  c.log(
    `  ${fmt(posts.rps)} creates a second; reads p99 ${fmt(readsDuring.p99Ms, 1)} ms; /healthz at most ${fmt(healthzMaxMs, 1)} ms (${fmt(healthzNewConnectionMaxMs, 1)} on new connections)` +
      (row.walMaxMb === undefined ? '' : `; WAL at most ${fmt(row.walMaxMb, 1)} MB, ${fmt(row.walEndMb!, 1)} MB at the end`),
  );
  return row;
}

export interface MixedRow {
  backend: string;
  readsAlone: WriteMeasure;
  mixed: WriteMeasure;
  ratio: number;
  roundRatios: number[];
}

/** 90% `GET /plants?limit=20`, 9% POST and 1% DELETE over 50 tokens, against reads alone, alternately. */
async function mixed(
  c: WriteBenchContext,
  backend: string,
  service: { url: string; process: ChildProcess },
  tokens: string[],
  first: number,
): Promise<MixedRow> {
  c.log(`${backend}: 90% reads, 9% creates and 1% deletes, against reads alone, alternately…`);
  const pid = service.process.pid!;
  const readsOnly = `local tokens = {${tokens.map((t) => `"Bearer ${t}"`).join(',')}}\nlocal n = 0\nrequest = function() n = n + 1; return wrk.format("GET", "/plants?limit=20", { ["Authorization"] = tokens[(n % #tokens) + 1] }) end\n${WRK_SUMMARY}`;
  let next = first;
  const mixedRun = async () => {
    const lua = script('mixed', tokens, next);
    next += 10_000_000;
    return wrk(`${service.url}/plants`, lua, 50, c.seconds, [pid]);
  };
  await wrk(`${service.url}/plants`, readsOnly, 50, 2, [pid]);
  await mixedRun();
  const alone: WriteMeasure[] = [];
  const mix: WriteMeasure[] = [];
  for (let round = 0; round < c.rounds; round++) {
    alone.push(await wrk(`${service.url}/plants`, readsOnly, 50, c.seconds, [pid]));
    mix.push(await mixedRun());
    c.log(
      `  round ${round + 1}: reads alone ${fmt(alone.at(-1)!.rps)} a second (${fmt(cpuPerRequestUs(alone.at(-1)!), 1)} µs CPU each), ` +
        `mixed ${fmt(mix.at(-1)!.rps)} (${fmt(cpuPerRequestUs(mix.at(-1)!), 1)} µs CPU each, ${mix.at(-1)!.non2xx} non-2xx)`,
    );
  }
  const [a, m] = [combine(alone), combine(mix)];
  return { backend, readsAlone: a, mixed: m, ratio: m.rps / a.rps, roundRatios: mix.map((x, i) => x.rps / alone[i]!.rps) };
}

export interface WriteResults {
  sqlite: { posts: WriteRow[]; deletes: WriteRow[]; flood: FloodRow; mixed: MixedRow };
  postgres?: { posts: WriteRow[]; twoInstances: WriteRow; deletes: WriteRow[]; flood: FloodRow; mixed: MixedRow } | { skipped: string };
}

/** Every write row, on SQLite and (when `pg` is a URL) PostgreSQL. */
export async function measureWrites(
  c: WriteBenchContext,
  pg: { url: string; schema: string; drop(): Promise<void> } | string,
): Promise<WriteResults> {
  const users = Array.from({ length: TOKENS + 1 }, (_, i) => ({ type: 'user', name: c.userName(i) }));
  // SQLite: the service on one file, its limit on another of the same schema.
  const db = join(c.dir, 'writes.db');
  const limitDb = join(c.dir, 'writes-limit.db');
  c.importRecords(db, users);
  c.importRecords(limitDb, users);
  const tokens = await c.issueTokens(db, TOKENS);
  const deletable = DELETABLE;
  c.importRecords(db, plantsToDelete(c, 1_000_000_000, deletable));
  const sqlite = await c.startService(db, WRITE_ENV);
  const ceiling = await startConstantServer('ceiling.ts');
  let sqliteResults: WriteResults['sqlite'];
  try {
    const pid = sqlite.process.pid!;
    let nextPost = 1;
    let nextLimit = 1;
    let nextDelete = 1_000_000_000;
    const posts: WriteRow[] = [];
    const deletes: WriteRow[] = [];
    const ceilingRequests = `request = function() return wrk.format("GET", "/plants?limit=20") end\n${WRK_SUMMARY}`;
    const atCeiling = () => wrk(`${ceiling.url}/plants?limit=20`, ceilingRequests, 64, c.seconds, [ceiling.process.pid!]);
    for (const connections of [16, 64]) {
      const limit = () =>
        sqliteLimit(c, limitDb, nextLimit).then((l) => {
          nextLimit += l.rows + 1000;
          return l;
        });
      posts.push(
        await alternately(
          c,
          'SQLite POST /plants',
          connections,
          async (round) => {
            const m = await wrk(`${sqlite.url}/plants`, script('post', tokens, nextPost), connections, round < 0 ? 2 : c.seconds, [pid]);
            nextPost += m.requests + 1000;
            return m;
          },
          limit,
          connections === 64 ? atCeiling : undefined,
        ),
      );
      deletes.push(
        await alternately(
          c,
          'SQLite DELETE /plants/{id}',
          connections,
          async (round) => {
            const m = await wrk(`${sqlite.url}/plants`, script('delete', tokens, nextDelete), connections, round < 0 ? 2 : c.seconds, [
              pid,
            ]);
            nextDelete = afterDeletes(nextDelete, m.requests);
            return m;
          },
          limit,
        ),
      );
    }
    const floodRow = await flood(c, 'SQLite', sqlite, tokens, 500_000_000, 60, `${db}-wal`);
    const mixedRow = await mixed(c, 'SQLite', sqlite, tokens, 2_000_000_000);
    sqliteResults = { posts, deletes, flood: floodRow, mixed: mixedRow };
  } finally {
    await Promise.all([sqlite.stop(), ceiling.stop()]);
  }
  if (typeof pg === 'string') return { sqlite: sqliteResults, postgres: { skipped: pg } };

  // PostgreSQL: the service on the bench schema, pgbench on a bare table beside it.
  try {
    c.importRecords(pg.url, users);
    const pgTokens = await c.issueTokens(pg.url, TOKENS);
    c.importRecords(pg.url, plantsToDelete(c, 1_000_000_000, deletable));
    spawnSync('psql', [
      pg.url.replace(/[?&]schema=[^&]*/, ''),
      '-q',
      '-c',
      `CREATE TABLE ${pg.schema}.bench_bare (id bigserial PRIMARY KEY, name text NOT NULL)`,
    ]);
    const first = await c.startService(pg.url, WRITE_ENV);
    try {
      let nextPost = 1;
      let nextDelete = 1_000_000_000;
      const posts: WriteRow[] = [];
      const deletes: WriteRow[] = [];
      const pids = [first.process.pid!];
      for (const connections of [16, 64]) {
        const limit = async () => pgbench(pg.url, connections, c.seconds);
        // The service's CPU and the database's, as pgbench's rounds count theirs.
        const writes = (kind: 'post' | 'delete', from: number, round: number) =>
          wrk(`${first.url}/plants`, script(kind, pgTokens, from), connections, round < 0 ? 2 : c.seconds, pids, true);
        posts.push(
          await alternately(
            c,
            'PostgreSQL POST /plants',
            connections,
            async (round) => {
              const m = await writes('post', nextPost, round);
              nextPost += m.requests + 1000;
              return m;
            },
            limit,
          ),
        );
        deletes.push(
          await alternately(
            c,
            'PostgreSQL DELETE /plants/{id}',
            connections,
            async (round) => {
              const m = await writes('delete', nextDelete, round);
              nextDelete = afterDeletes(nextDelete, m.requests);
              return m;
            },
            limit,
          ),
        );
      }
      // Two instances on the database, each with half of the 64 connections.
      const second = await c.startService(pg.url, WRITE_ENV);
      let twoInstances: WriteRow;
      try {
        twoInstances = await alternately(
          c,
          'PostgreSQL POST /plants, two instances',
          64,
          async (round) => {
            const seconds = round < 0 ? 2 : c.seconds;
            // The database's CPU is counted once, with the first instance's.
            const [a, b] = await Promise.all([
              wrk(`${first.url}/plants`, script('post', pgTokens, nextPost), 32, seconds, [first.process.pid!], true),
              wrk(`${second.url}/plants`, script('post', pgTokens, nextPost + 50_000_000), 32, seconds, [second.process.pid!]),
            ]);
            nextPost += 100_000_000;
            const both = combine([a, b]);
            return { ...both, rps: a.rps + b.rps, seconds: Math.max(a.seconds, b.seconds) };
          },
          async () => pgbench(pg.url, 64, c.seconds),
        );
      } finally {
        await second.stop();
      }
      const floodRow = await flood(c, 'PostgreSQL', first, pgTokens, 500_000_000, 10);
      const mixedRow = await mixed(c, 'PostgreSQL', first, pgTokens, 2_000_000_000);
      return { sqlite: sqliteResults, postgres: { posts, twoInstances, deletes, flood: floodRow, mixed: mixedRow } };
    } finally {
      await first.stop();
    }
  } finally {
    await pg.drop();
  }
}

/** The report's write section and its targets. */
export function renderWrites(w: WriteResults): { section: string[]; targets: string[] } {
  const writeRow = (r: WriteRow, limitName: string) =>
    `| ${r.name} | ${r.connections} | ${fmt(r.service.rps)} | ${fmt(cpuPerRequestUs(r.service), 1)} | ${fmt(r.service.p50Ms, 2)} | ${fmt(r.service.p99Ms, 1)} | ${r.service.errors + r.service.non2xx} | ${limitName}: ${fmt(r.limit.perSecond)}${r.limit.cpuPerRowUs === undefined ? '' : ` (${fmt(r.limit.cpuPerRowUs, 1)} µs CPU a row)`} | ${ranged(r.ratio, r.roundRatios, 3)} |`;
  const section = [
    '## Writes',
    '',
    'The service runs with its defaults but its rate limits (`--rate-limit off --write-rate-limit off`): the rows measure the ' +
      "machine, not the budget. Each row's service rounds alternate with its limit's: on SQLite the same rows inserted " +
      'by one process into the same schema at the same durability (WAL, `synchronous=FULL`), a thousand a transaction ' +
      '(`bench/sqlite-limit.ts`); on PostgreSQL pgbench inserting one row a transaction into a bare table, with as many ' +
      "clients as the row's connections. CPU µs per write is the server process's, its writer thread included, and on " +
      "PostgreSQL every database process's too (a limit's CPU a row: the in-process writer's own; pgbench's and the " +
      "database's). SQLite's POST rounds at 64 connections alternate with the ceiling's too (a bare `node:http` server, " +
      'GET at 64 connections). The targets judge the rows at 64 connections; those at 16 are for information.',
    '',
    '| row | connections | writes/s | CPU µs/write | p50 ms | p99 ms | errors + non-2xx | the limit, a second | ratio to the limit |',
    '|---|---|---|---|---|---|---|---|---|',
    ...w.sqlite.posts.map((r) => writeRow(r, 'in-process batches')),
    ...w.sqlite.deletes.map((r) => writeRow(r, 'in-process batches')),
  ];
  const pg = w.postgres !== undefined && !('skipped' in w.postgres) ? w.postgres : undefined;
  if (pg) {
    section.push(
      ...pg.posts.map((r) => writeRow(r, 'pgbench')),
      writeRow(pg.twoInstances, 'pgbench'),
      ...pg.deletes.map((r) => writeRow(r, 'pgbench')),
    );
  } else if (w.postgres && 'skipped' in w.postgres) section.push(`| PostgreSQL | skipped: ${w.postgres.skipped} | | | | | | | |`);
  const floods = [w.sqlite.flood, ...(pg ? [pg.flood] : [])];
  const mixes = [w.sqlite.mixed, ...(pg ? [pg.mixed] : [])];
  section.push(
    '',
    "Reads during a write flood: 64 connections create plants while another user's `GET /plants?limit=20` runs on 4 " +
      'connections (having read for 2 s before it) and `/healthz` is asked one request at a time by two probes, one on a ' +
      "kept-alive connection opened before the flood and one connecting for each request (SQLite for 60 s, PostgreSQL for 10 s). The second adds the machine's TCP " +
      'connection setup under the flood: a segment retransmitted on loopback costs it about 200 ms, whatever the ' +
      'service does.',
    '',
    '| backend | creates/s | reads/s | read p99 ms | `/healthz` slowest ms | on new connections | WAL largest / at the end |',
    '|---|---|---|---|---|---|---|',
    ...floods.map(
      (f) =>
        `| ${f.backend} | ${fmt(f.posts.rps)} | ${fmt(f.reads.rps)} | ${fmt(f.reads.p99Ms, 1)} | ${fmt(f.healthzMaxMs, 1)} | ${fmt(f.healthzNewConnectionMaxMs, 1)} | ${f.walMaxMb === undefined ? '-' : `${fmt(f.walMaxMb, 1)} MB / ${fmt(f.walEndMb!, 1)} MB`} |`,
    ),
    '',
    'A mix of 90% `GET /plants?limit=20`, 9% POST and 1% DELETE (of a plant created 909 requests before, by its creator) ' +
      'over 50 tokens, against the same reads alone, alternately.',
    '',
    '| backend | reads alone, requests/s | mixed, requests/s | ratio | errors + non-2xx |',
    '|---|---|---|---|---|',
    ...mixes.map(
      (m) =>
        `| ${m.backend} | ${fmt(m.readsAlone.rps)} | ${fmt(m.mixed.rps)} | ${ranged(m.ratio, m.roundRatios, 3)} | ${m.mixed.errors + m.mixed.non2xx} |`,
    ),
  );
  const post64 = w.sqlite.posts.find((r) => r.connections === 64)!;
  const targets = [
    `| SQLite POST at 64 connections ≥ 5,000 created/s | ${fmt(post64.service.rps)} | ${verdict(post64.service.rps >= 5000)} |`,
    `| SQLite POST at 64 connections ≥ 0.10 of the in-process batched limit | ${ranged(post64.ratio, post64.roundRatios, 3)} | ${verdict(post64.ratio >= 0.1)} |`,
    `| SQLite POST at 64 connections: p99 < 50 ms | ${fmt(post64.service.p99Ms, 1)} ms | ${verdict(post64.service.p99Ms < 50)} |`,
  ];
  if (post64.ceiling) {
    const cpuRatio = cpuPerRequestUs(post64.service) / post64.ceiling.cpuPerRequestUs;
    targets.push(
      `| SQLite POST at 64 connections: CPU a write ≤ ${POST_CPU_LIMITS.sqlite} × the ceiling's a request | ` +
        `${fmt(cpuPerRequestUs(post64.service), 1)} against ${fmt(post64.ceiling.cpuPerRequestUs, 1)} µs: ${ranged(cpuRatio, post64.ceiling.roundCpuRatios, 2)} | ` +
        `${verdict(cpuRatio <= POST_CPU_LIMITS.sqlite)} |`,
    );
  }
  const pgPost64 = pg?.posts.find((r) => r.connections === 64);
  if (pgPost64?.limit.cpuPerRowUs !== undefined) {
    const cpuRatio = cpuPerRequestUs(pgPost64.service) / pgPost64.limit.cpuPerRowUs;
    targets.push(
      `| PostgreSQL POST at 64 connections: CPU a write (Node and database) ≤ ${POST_CPU_LIMITS.postgres} × pgbench's a row (client and database) | ` +
        `${fmt(cpuPerRequestUs(pgPost64.service), 1)} against ${fmt(pgPost64.limit.cpuPerRowUs, 1)} µs: ${ranged(cpuRatio, pgPost64.limit.roundCpuRatios ?? [], 2)} | ${verdict(cpuRatio <= POST_CPU_LIMITS.postgres)} |`,
    );
  }
  if (pg) {
    // Judged at 64 connections, one instance and two; the 16-connection rows are reported above.
    for (const r of [...pg.posts.filter((p) => p.connections === 64), pg.twoInstances]) {
      targets.push(
        `| ${r.name} at ${r.connections} connections ≥ 0.5 of pgbench's tps | ${ranged(r.ratio, r.roundRatios, 3)} | ${verdict(r.ratio >= 0.5)} |`,
      );
    }
  }
  for (const f of floods) {
    targets.push(
      `| ${f.backend}, during the flood: \`/healthz\` never slower than 50 ms (kept-alive connection) | ${fmt(f.healthzMaxMs, 1)} ms (${fmt(f.healthzNewConnectionMaxMs, 1)} on new connections) | ${verdict(f.healthzMaxMs < 50)} |`,
    );
    targets.push(
      `| ${f.backend}, during the flood: another user's reads, p99 < 20 ms | ${fmt(f.reads.p99Ms, 1)} ms | ${verdict(f.reads.p99Ms < 20)} |`,
    );
  }
  for (const m of mixes) {
    targets.push(`| ${m.backend}: 90/9/1 mix ≥ 0.5 of reads alone | ${ranged(m.ratio, m.roundRatios, 3)} | ${verdict(m.ratio >= 0.5)} |`);
  }
  targets.push(
    `| SQLite: WAL under 64 MB after 60 s of the flood | ${fmt(w.sqlite.flood.walEndMb ?? 0, 1)} MB (at most ${fmt(w.sqlite.flood.walMaxMb ?? 0, 1)}) | ${verdict((w.sqlite.flood.walMaxMb ?? Infinity) < 64)} |`,
  );
  return { section, targets };
}
