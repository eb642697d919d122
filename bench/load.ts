import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface LoadOptions {
  url: string;
  /** Bearer tokens used in rotation, one per request. */
  tokens: string[];
  seconds: number;
  connections: number;
}

export interface LoadResult {
  requests: number;
  seconds: number;
  rps: number;
  p50Ms: number;
  /** autocannon reports no 95th percentile: its 97.5th stands in (an upper bound). */
  p95Ms: number;
  p99Ms: number;
  /** Socket errors and timeouts. */
  errors: number;
  non2xx: number;
}

export interface LoadGenerator {
  name: string;
  run(options: LoadOptions): Promise<LoadResult>;
}

/** The `done` function of every wrk script here: wrk's summary as one line, `RESULT {json}`, read by runWrk. */
export const WRK_SUMMARY = `done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%d,"us":%d,"p50":%d,"p95":%d,"p99":%d,"errors":%d,"non2xx":%d}\\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(95), latency:percentile(99),
    e.connect + e.read + e.write + e.timeout, e.status))
end
`;

/** Runs wrk (one thread) with the Lua script in `script`, which ends with WRK_SUMMARY, and reads its summary. */
export async function runWrk(url: string, script: string, connections: number, seconds: number): Promise<LoadResult> {
  // Not spawnSync: this process may have clients of its own running meanwhile (the full-listing loops, probes).
  const child = spawn('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '--latency', '-s', script, url]);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += String(chunk)));
  child.stderr.on('data', (chunk: Buffer) => (stderr += String(chunk)));
  await new Promise<void>((resolve, reject) => child.on('error', reject).on('close', () => resolve()));
  const line = /RESULT (\{.*\})/.exec(stdout)?.[1];
  if (!line) throw new Error(`wrk failed: ${stderr || stdout}`);
  const r = JSON.parse(line) as { requests: number; us: number; p50: number; p95: number; p99: number; errors: number; non2xx: number };
  const secs = r.us / 1e6;
  return {
    requests: r.requests,
    seconds: secs,
    rps: r.requests / secs,
    p50Ms: r.p50 / 1000,
    p95Ms: r.p95 / 1000,
    p99Ms: r.p99 / 1000,
    errors: r.errors,
    non2xx: r.non2xx,
  };
}

/** wrk with a Lua script that rotates the tokens. */
function wrk(version: string): LoadGenerator {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-wrk-'));
  process.once('exit', () => rmSync(dir, { recursive: true, force: true }));
  return {
    name: `wrk ${version}, 1 thread`,
    async run({ url, tokens, seconds, connections }) {
      const script = join(dir, 'rotate.lua');
      writeFileSync(
        script,
        `local tokens = {${tokens.map((t) => `"${t}"`).join(',')}}
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", nil, { ["Authorization"] = "Bearer " .. tokens[(i % #tokens) + 1] })
end
${WRK_SUMMARY}`,
      );
      return runWrk(url, script, connections, seconds);
    },
  };
}

/** autocannon (from npm) when wrk is not installed. It runs in this process, so it is heavier than wrk. */
async function autocannonGenerator(): Promise<LoadGenerator> {
  const { default: autocannon } = await import('autocannon');
  return {
    name: 'autocannon (wrk not installed)',
    async run({ url, tokens, seconds, connections }) {
      let i = 0;
      const result = await autocannon({
        url,
        connections,
        duration: seconds,
        requests: [
          {
            setupRequest: (req) => ({ ...req, headers: { ...req.headers, authorization: `Bearer ${tokens[i++ % tokens.length]}` } }),
          },
        ],
      });
      return {
        requests: result.requests.total,
        seconds: result.duration,
        rps: result.requests.total / result.duration,
        p50Ms: result.latency.p50,
        p95Ms: result.latency.p97_5,
        p99Ms: result.latency.p99,
        errors: result.errors + result.timeouts,
        non2xx: result.non2xx,
      };
    },
  };
}

/** wrk when installed (or asked for), autocannon otherwise. */
export async function loadGenerator(wanted?: string): Promise<LoadGenerator> {
  if (wanted === 'autocannon') return autocannonGenerator();
  const probe = spawnSync('wrk', ['--version'], { encoding: 'utf8' });
  const version = /wrk (\S+)/.exec(`${probe.stdout}${probe.stderr}`)?.[1];
  if (probe.error === undefined && version) return wrk(version);
  if (wanted === 'wrk') throw new Error('wrk is not installed (apt-get install wrk)');
  return autocannonGenerator();
}
