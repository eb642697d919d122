import { Agent, request } from 'node:http';
import type { ChildProcess } from 'node:child_process';
import { ACCESS_BODY_LIMIT, PLANT_BODY_LIMIT } from '../src/http/routes/protected.js';

// The worst-bodies row of `npm run bench`: the dearest body each route with a body takes (or refuses), sent
// one at a time to a serving process while `/healthz` is polled on another connection; for each, how long the
// request took and the longest `/healthz` answer meanwhile, against `/healthz` alone. A body that costs the
// event loop shows in the second.

export interface WorstBodiesContext {
  log: (line: string) => void;
  startService(db: string, env?: NodeJS.ProcessEnv): Promise<{ url: string; process: ChildProcess; stop(): Promise<void> }>;
  tokensFor(db: string, users: readonly string[]): Promise<string[]>;
  importRecords(db: string, records: object[]): void;
}

interface Body {
  name: string;
  method: string;
  path: string;
  body: string;
}

export interface WorstBodyRow {
  name: string;
  status: number;
  requestMs: number;
  longestHealthzMs: number;
}

export interface WorstBodyResults {
  quietHealthzMs: number;
  rows: WorstBodyRow[];
}

const KIB = 1024;
const TIMES = 5;
const BOUND_MS = 50;

/** Text of about `bytes` bytes, as `item(i)` repeated and joined with commas. */
const filled = (bytes: number, item: (i: number) => string) => {
  const parts: string[] = [];
  for (let i = 0, size = 0; size < bytes; i++) {
    parts.push(item(i));
    size += parts.at(-1)!.length + 1;
  }
  return parts.join(',');
};

/** The bodies, each just under its route's limit (ACCESS_BODY_LIMIT, PLANT_BODY_LIMIT, the URL's). */
function bodies(): Body[] {
  const access = (users: string) => `{"public":false,"users":[${users}],"groups":[]}`;
  const accessBytes = ACCESS_BODY_LIMIT - KIB;
  const plantBytes = PLANT_BODY_LIMIT - KIB;
  const longNames = Array.from({ length: 1000 }, (_, i) => JSON.stringify(`${i}`.padEnd(500, 'n')));
  return [
    { name: 'PUT access, one name repeated', method: 'PUT', path: '/plants/999999/access', body: access(filled(accessBytes, () => '"a"')) },
    {
      name: 'PUT access, 1,000 names each way',
      method: 'PUT',
      path: '/plants/1/access',
      body: `{"public":false,"users":[${longNames.join(',')}],"groups":[${longNames.join(',')}]}`,
    },
    {
      name: 'PUT access, nested arrays',
      method: 'PUT',
      path: '/plants/1/access',
      body: `{"public":false,"users":${'['.repeat(accessBytes / 2)}${']'.repeat(accessBytes / 2)},"groups":[]}`,
    },
    { name: 'PUT access, unknown fields', method: 'PUT', path: '/plants/1/access', body: `{${filled(accessBytes, (i) => `"f${i}":1`)}}` },
    { name: 'PUT access, escaped name', method: 'PUT', path: '/plants/1/access', body: access(`"${'\\u00e9'.repeat(accessBytes / 6)}"`) },
    {
      name: 'POST plants, escaped name',
      method: 'POST',
      path: '/plants',
      body: `{"id":5,"name":"${'\\u00e9'.repeat(plantBytes / 6)}"}`,
    },
    { name: 'POST plants, unknown fields', method: 'POST', path: '/plants', body: `{${filled(plantBytes, (i) => `"f${i}":1`)}}` },
    {
      name: 'POST plants, nested arrays',
      method: 'POST',
      path: '/plants',
      body: `{"id":5,"name":${'['.repeat(plantBytes / 2)}${']'.repeat(plantBytes / 2)}}`,
    },
    {
      name: 'GET plants, many parameters',
      method: 'GET',
      path: `/plants?${filled(7 * KIB, (i) => `p${i}=1`).replaceAll(',', '&')}`,
      body: '',
    },
  ];
}

function send(agent: Agent, url: string, method: string, path: string, token: string | undefined, body: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(
      `${url}${path}`,
      {
        method,
        agent,
        headers: { ...(token ? { authorization: `Bearer ${token}` } : {}), ...(body ? { 'content-type': 'application/json' } : {}) },
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', reject);
    req.end(body || undefined);
  });
}

/** Polls /healthz one request after another until `stop()`; the longest answer. */
function poll(url: string): { stop(): Promise<number> } {
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  let running = true;
  let longest = 0;
  const done = (async () => {
    while (running) {
      const started = performance.now();
      await send(agent, url, 'GET', '/healthz', undefined, '');
      longest = Math.max(longest, performance.now() - started);
    }
  })();
  return {
    async stop() {
      running = false;
      await done;
      agent.destroy();
      return longest;
    },
  };
}

export async function measureWorstBodies(ctx: WorstBodiesContext, db: string): Promise<WorstBodyResults> {
  ctx.importRecords(db, [
    { type: 'user', name: 'alice' },
    { type: 'plant', id: 1, name: 'Ivy', owner: 'alice' },
  ]);
  const [token] = await ctx.tokensFor(db, ['alice']);
  const service = await ctx.startService(db, { PLANTSTORE_WRITE_RATE_LIMIT: 'off', PLANTSTORE_RATE_LIMIT: 'off' });
  const agent = new Agent({ keepAlive: true, maxSockets: 1 });
  try {
    const quiet = poll(service.url);
    await new Promise((r) => setTimeout(r, 500));
    const quietHealthzMs = await quiet.stop();
    const rows: WorstBodyRow[] = [];
    for (const { name, method, path, body } of bodies()) {
      ctx.log(`worst bodies: ${name}, ${body.length} bytes…`);
      let requestMs = 0;
      let status = 0;
      const polling = poll(service.url);
      for (let i = 0; i < TIMES; i++) {
        const started = performance.now();
        status = await send(agent, service.url, method, path, token, body);
        requestMs = Math.max(requestMs, performance.now() - started);
      }
      rows.push({ name, status, requestMs, longestHealthzMs: await polling.stop() });
    }
    return { quietHealthzMs, rows };
  } finally {
    agent.destroy();
    await service.stop();
  }
}

const fmt = (n: number, digits = 1) => n.toLocaleString('en-US', { maximumFractionDigits: digits, minimumFractionDigits: digits });

export function renderWorstBodies(r: WorstBodyResults): { section: string[]; targets: string[] } {
  const section = [
    '## Worst bodies',
    '',
    `The dearest bodies of each route, each sent ${TIMES} times one after another to a SQLite service while \`/healthz\` ` +
      `is polled on another connection (its longest answer alone: ${fmt(r.quietHealthzMs)} ms).`,
    '',
    '| body | status | slowest request ms | longest `/healthz` ms meanwhile |',
    '|---|---|---|---|',
    ...r.rows.map((row) => `| ${row.name} | ${row.status} | ${fmt(row.requestMs)} | ${fmt(row.longestHealthzMs)} |`),
  ];
  const worst = Math.max(...r.rows.map((row) => row.longestHealthzMs));
  const targets = [
    `| the worst body of each route: \`/healthz\` meanwhile < ${BOUND_MS} ms | ${fmt(worst)} ms | ${worst < BOUND_MS ? 'met' : '**NOT met**'} |`,
  ];
  return { section, targets };
}
