/**
 * Soak: the real server as a child process, held under 50 keep-alive connections for a while (60 s by
 * default) with a mix of request kinds, each checked against the status it must get. Fails (exit 1) on any
 * unexpected status or transport error, or when the server's resident memory grows by 10% or more from the
 * first 10 s after the warm-up to the last 10 s of the run (median of samples taken twice a second in each).
 * Loopback only; bounded in time and in requests.
 *
 *   npm run soak -- --duration 20 --connections 50 --plants 20000 --max-requests 2000000
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createWriteStream } from 'node:fs';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import http from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { generateToken } from '../src/catalogue/tokens.js';
import { openStore } from '../src/store/open-store.js';
import { DEFAULT_SPEC, generateCatalogue, userName } from './catalogue.js';

const { values: args } = parseArgs({
  options: {
    duration: { type: 'string', default: '60' },
    // Read by the access checker that `npm run soak` runs next (bench/access-checker.ts).
    'checker-seconds': { type: 'string' },
    'checker-seeds': { type: 'string' },
    connections: { type: 'string', default: '50' },
    plants: { type: 'string', default: '20000' },
    'max-requests': { type: 'string', default: '2000000' },
  },
});
const DURATION_S = Number(args.duration);
const CONNECTIONS = Number(args.connections);
const PLANTS = Number(args.plants);
const MAX_REQUESTS = Number(args['max-requests']);
const USERS = 200;
const WARM_UP_S = Math.min(10, DURATION_S / 4);
const MAX_RSS_GROWTH = 0.1;
/** Length of the windows whose median RSS is compared. */
const WINDOW_S = Math.min(10, DURATION_S / 4);

const CLI = new URL('../dist/cli/main.js', import.meta.url).pathname;
const log = (line: string) => process.stderr.write(`${line}\n`);

type Kind = 'valid' | 'invalid-token' | 'unauthenticated' | 'bad-limit' | 'paged' | 'full-listing';
/** Each kind with its share of the mix and the only status it may get. */
const KINDS: Array<{ kind: Kind; weight: number; expected: number }> = [
  { kind: 'valid', weight: 40, expected: 200 },
  { kind: 'invalid-token', weight: 10, expected: 401 },
  { kind: 'unauthenticated', weight: 10, expected: 401 },
  { kind: 'bad-limit', weight: 10, expected: 400 },
  { kind: 'paged', weight: 25, expected: 200 },
  { kind: 'full-listing', weight: 5, expected: 200 },
];
const WEIGHT_TOTAL = KINDS.reduce((sum, k) => sum + k.weight, 0);

interface Response {
  status: number;
  link: string | undefined;
  body: string;
}

const agent = new http.Agent({ keepAlive: true, maxSockets: CONNECTIONS });

function get(base: string, path: string, token?: string): Promise<Response> {
  return new Promise((resolve, reject) => {
    const headers: Record<string, string> = token === undefined ? {} : { authorization: `Bearer ${token}` };
    http
      .get(`${base}${path}`, { agent, headers }, (res) => {
        let body = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => (body += chunk));
        res.on('end', () => resolve({ status: res.statusCode!, link: [res.headers.link ?? []].flat()[0], body }));
        res.on('error', reject);
      })
      .on('error', reject);
  });
}

async function seed(db: string, dir: string): Promise<string[]> {
  const file = join(dir, 'catalogue.ndjson');
  const out = createWriteStream(file);
  for (const record of generateCatalogue({ ...DEFAULT_SPEC, plants: PLANTS, users: USERS, groups: 20 })) {
    if (!out.write(`${JSON.stringify(record)}\n`)) await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
  const store = await openStore({ db });
  try {
    const tokens: string[] = [];
    for (let u = 1; u < USERS; u++) {
      const { token, hash } = generateToken();
      await store.tokens.add({ user: userName(u), hash, label: 'soak' });
      tokens.push(token);
    }
    return tokens;
  } finally {
    await store.close();
  }
}

async function startServer(db: string): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [CLI, '--db', db, 'serve', '--port', '0', '--log-level', 'info'], {
    stdio: ['ignore', 'pipe', 'inherit'],
    // Every request comes from one address, whose unauthenticated share alone exceeds the default per-address
    // budget: the limit is raised so the limiter still counts every request but this mix is served.
    env: { ...process.env, PLANTSTORE_LOG_REQUESTS: 'false', PLANTSTORE_DB: '', PLANTSTORE_RATE_LIMIT: '100000000/1m' },
  });
  let out = '';
  for await (const chunk of child.stdout) {
    out += String(chunk);
    const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
    if (match) {
      child.stdout.resume();
      return { url: match[1]!, child };
    }
  }
  throw new Error(`server exited before listening:\n${out}`);
}

async function rssKb(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]);
}

function median(values: number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted.length === 0 ? NaN : sorted[Math.floor(sorted.length / 2)]!;
}

function percentile(sorted: number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

async function main(): Promise<number> {
  const dir = await mkdtemp(join(tmpdir(), 'plantstore-soak-'));
  const db = join(dir, 'soak.db');
  let server: { url: string; child: ChildProcess } | undefined;
  try {
    log(`seeding ${PLANTS} plants, ${USERS} users...`);
    const tokens = await seed(db, dir);
    server = await startServer(db);
    const base = server.url;
    const pid = server.child.pid!;
    log(`server ${base} (pid ${pid}); ${CONNECTIONS} connections for ${DURATION_S} s (warm-up ${WARM_UP_S} s)`);

    const counts = new Map<Kind, number>(KINDS.map((k) => [k.kind, 0]));
    const statuses = new Map<string, number>();
    const unexpected: string[] = [];
    let unexpectedCount = 0;
    // Counts every failure, keeps the first few to print.
    const fail = (what: string) => {
      if (unexpectedCount++ < 20) unexpected.push(what);
    };
    const latencies: number[] = [];
    let requests = 0;
    let i = 0;
    const started = Date.now();
    const deadline = started + DURATION_S * 1000;
    const going = () => Date.now() < deadline && requests < MAX_REQUESTS;

    const timed = async (kind: Kind, path: string, token: string | undefined): Promise<Response> => {
      const t0 = performance.now();
      const res = await get(base, path, token);
      latencies.push(performance.now() - t0);
      requests++;
      counts.set(kind, counts.get(kind)! + 1);
      const expected = KINDS.find((k) => k.kind === kind)!.expected;
      statuses.set(`${kind} ${res.status}`, (statuses.get(`${kind} ${res.status}`) ?? 0) + 1);
      if (res.status !== expected) fail(`${kind} ${path}: ${res.status} ${res.body.slice(0, 200)}`);
      // Every answer must be JSON: an array on 200, the contract's Error body otherwise.
      const body = JSON.parse(res.body) as unknown;
      if (res.status === 200 ? !Array.isArray(body) : typeof (body as { error?: unknown }).error !== 'number') {
        fail(`${kind} ${path}: malformed body ${res.body.slice(0, 200)}`);
      }
      return res;
    };

    const worker = async (w: number) => {
      while (going()) {
        const token = tokens[(i++ + w) % tokens.length]!;
        let pick = Math.random() * WEIGHT_TOTAL;
        const kind = KINDS.find((k) => (pick -= k.weight) < 0)!.kind;
        try {
          switch (kind) {
            case 'valid':
              await timed(kind, '/plants?limit=20', token);
              break;
            case 'invalid-token':
              await timed(kind, '/plants?limit=20', `ps_${'x'.repeat(43)}`);
              break;
            case 'unauthenticated':
              await timed(kind, '/plants', undefined);
              break;
            case 'bad-limit':
              await timed(kind, '/plants?limit=abc', token);
              break;
            case 'paged': {
              // Up to three pages, following rel="next".
              let path: string | undefined = '/plants?limit=50';
              for (let page = 0; page < 3 && path !== undefined && going(); page++) {
                const res = await timed(kind, path, token);
                path = /<([^>]+)>;\s*rel="next"/.exec(res.link ?? '')?.[1];
              }
              break;
            }
            case 'full-listing':
              await timed(kind, '/plants', token);
              break;
          }
        } catch (err) {
          fail(`${kind}: ${(err as Error).message}`);
        }
      }
    };

    // RSS is sampled twice a second: one sample lands anywhere on the garbage collector's sawtooth (±15% here),
    // so growth compares the median of the first window after warm-up with the median of the last window.
    const samples: Array<{ at: number; kb: number }> = [];
    const sampler = setInterval(() => {
      rssKb(pid).then(
        (kb) => samples.push({ at: Date.now() - started, kb }),
        () => {},
      );
    }, 500);
    const workers = Array.from({ length: CONNECTIONS }, (_, w) => worker(w));
    await new Promise((r) => setTimeout(r, WARM_UP_S * 1000));
    const requestsAtWarmUp = requests;
    await Promise.all(workers);
    clearInterval(sampler);
    const seconds = (Date.now() - started) / 1000;
    const windowMs = WINDOW_S * 1000;
    const rssStart = median(samples.filter((s) => s.at >= WARM_UP_S * 1000 && s.at < WARM_UP_S * 1000 + windowMs).map((s) => s.kb));
    const rssEnd = median(samples.filter((s) => s.at >= seconds * 1000 - windowMs).map((s) => s.kb));

    const sorted = latencies.sort((a, b) => a - b);
    const growth = (rssEnd - rssStart) / rssStart;
    log('');
    log(
      `requests ${requests} in ${seconds.toFixed(1)} s (${(requests / seconds).toFixed(0)} rps; ${requests - requestsAtWarmUp} after warm-up)`,
    );
    for (const { kind } of KINDS)
      log(`  ${kind.padEnd(16)} ${String(counts.get(kind)).padStart(8)}  ${(counts.get(kind)! / seconds).toFixed(0).padStart(6)} rps`);
    log('statuses:');
    for (const [key, n] of [...statuses].sort()) log(`  ${key.padEnd(20)} ${n}`);
    log(
      `latency p50 ${percentile(sorted, 50).toFixed(2)} ms, p99 ${percentile(sorted, 99).toFixed(2)} ms, max ${sorted.at(-1)?.toFixed(2)} ms`,
    );
    const perSecondMb = samples.filter((_, k) => k % 4 === 0).map((s) => (s.kb / 1024).toFixed(0));
    log(`server RSS every 2 s (MB): ${perSecondMb.join(' ')}`);
    log(
      `server RSS median of the ${WINDOW_S} s after warm-up ${(rssStart / 1024).toFixed(1)} MB, of the last ${WINDOW_S} s ${(rssEnd / 1024).toFixed(1)} MB, growth ${(growth * 100).toFixed(1)}%`,
    );

    const failures: string[] = [];
    if (unexpectedCount > 0) failures.push(`${unexpectedCount} unexpected answers:\n  ${unexpected.join('\n  ')}`);
    if (growth >= MAX_RSS_GROWTH) failures.push(`RSS grew ${(growth * 100).toFixed(1)}% (limit ${MAX_RSS_GROWTH * 100}%)`);
    if (requests === 0) failures.push('no requests were made');
    if (Number.isNaN(growth)) failures.push('no memory samples');
    for (const failure of failures) log(`FAIL: ${failure}`);
    if (failures.length === 0) log('soak: ok');
    return failures.length === 0 ? 0 : 1;
  } finally {
    agent.destroy();
    if (server && server.child.exitCode === null) {
      server.child.kill('SIGTERM');
      await once(server.child, 'exit');
    }
    await rm(dir, { recursive: true, force: true });
  }
}

process.exitCode = await main();
