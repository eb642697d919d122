import { join } from 'node:path';
import { rm } from 'node:fs/promises';
import { DEFAULT_SPEC, userName, type CatalogueSpec } from './catalogue.js';
import {
  type Measured,
  type Rendered,
  backendsCpuSeconds,
  buildDatabase,
  combine,
  cpuPerRequestUs,
  dropSchema,
  fmt,
  ranged,
  inRounds,
  settle,
  startService,
  tokensFor,
  verdict,
} from './harness.js';
import { serverCpuSeconds } from './process-cpu.js';
import { args, log } from './options.js';

// The cold-page rows of `npm run bench`: what a first page costs when nothing of it is cached (a new token, a
// restart, a user whose pages a write touched), against the same page cached, on the same catalogue in
// alternating rounds. The uncached side runs with the caches off, so every request reads its token and its page
// from the database.

/** Distinct users whose first pages are asked for, in rotation. */
export const COLD_USERS = 200;
/** The most an uncached first page may cost against a cached one, in CPU per request (Node and database). */
export const COLD_LIMITS = { sqlite: 1.5, postgres: 4 } as const;

export interface ColdPageRow {
  cached: Measured;
  uncached: Measured;
  cpuRatio: number;
  roundCpuRatios: number[];
}

export type ColdPageResults = { plants: number; rows: Partial<Record<keyof typeof COLD_LIMITS, ColdPageRow>>; postgresSkipped?: string };

async function row(db: string, backend: keyof typeof COLD_LIMITS): Promise<ColdPageRow> {
  const tokens = await tokensFor(
    db,
    Array.from({ length: COLD_USERS }, (_, u) => userName(u + 1)),
  );
  const named = (application: string) => (backend === 'postgres' ? `${db}&application_name=${application}` : db);
  const applications = { cached: `bench_cached_${process.pid}`, uncached: `bench_uncached_${process.pid}` };
  const cached = await startService(named(applications.cached));
  try {
    const uncached = await startService(named(applications.uncached), { PLANTSTORE_CACHE: 'false' });
    try {
      const cpu = (pid: number, application: string) =>
        backend === 'postgres' ? { cpuSeconds: async () => serverCpuSeconds(pid) + (await backendsCpuSeconds(application)) } : {};
      log(`${backend}: ${COLD_USERS} users' first pages, cached and uncached, alternately…`);
      const [c, u] = await inRounds([
        {
          name: `${backend}, cached`,
          url: `${cached.url}/plants?limit=20`,
          tokens,
          pid: cached.process.pid!,
          ...cpu(cached.process.pid!, applications.cached),
        },
        {
          name: `${backend}, uncached`,
          url: `${uncached.url}/plants?limit=20`,
          tokens,
          pid: uncached.process.pid!,
          ...cpu(uncached.process.pid!, applications.uncached),
        },
      ]);
      const [cachedAll, uncachedAll] = [combine(c!), combine(u!)];
      return {
        cached: cachedAll,
        uncached: uncachedAll,
        cpuRatio: cpuPerRequestUs(uncachedAll) / cpuPerRequestUs(cachedAll),
        roundCpuRatios: u!.map((round, i) => cpuPerRequestUs(round) / cpuPerRequestUs(c![i]!)),
      };
    } finally {
      await uncached.stop();
    }
  } finally {
    await cached.stop();
  }
}

/** The rows on SQLite and, unless `pgSkip` says why not, PostgreSQL, each on a catalogue of `plants`. */
export async function measureColdPages(dir: string, plants: number, pgSkip: string | false): Promise<ColdPageResults> {
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants };
  const results: ColdPageResults = { plants, rows: {} };
  log(`\ncold pages: importing ${fmt(plants)} plants…`);
  const sqliteDb = join(dir, 'cold-pages.db');
  await buildDatabase(sqliteDb, spec, dir);
  try {
    results.rows.sqlite = await row(sqliteDb, 'sqlite');
  } finally {
    await rm(sqliteDb, { force: true });
  }
  if (pgSkip) {
    results.postgresSkipped = pgSkip;
    return results;
  }
  const schema = `bench_cold_${process.pid}`;
  const url = `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`;
  try {
    await buildDatabase(url, spec, dir);
    await settle(url);
    results.rows.postgres = await row(url, 'postgres');
  } finally {
    await dropSchema(args.pg, schema);
  }
  return results;
}

export function renderColdPages(r: ColdPageResults): Rendered {
  const section = [
    `## Cold pages: a first page read from the database against the same page cached (${fmt(r.plants)} plants)`,
    '',
    `${COLD_USERS} users' first pages (\`limit=20\`) in rotation, from a service with its caches on (every page cached ` +
      'after the warm-up) and one with them off (every request reads its token and its page from the database), in ' +
      "alternating rounds. CPU is the service process's own, and on PostgreSQL also that of the database processes " +
      'serving its connections.',
    '',
    '| backend | pages | requests/s | CPU µs/request | p50 ms | p99 ms | errors |',
    '|---|---|---|---|---|---|---|',
  ];
  const targets: string[] = [];
  for (const [backend, row] of Object.entries(r.rows) as Array<[keyof typeof COLD_LIMITS, ColdPageRow]>) {
    const name = backend === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    for (const [which, m] of [
      ['cached', row.cached],
      ['uncached', row.uncached],
    ] as const) {
      section.push(
        `| ${name} | ${which} | ${fmt(m.rps)} | ${fmt(cpuPerRequestUs(m), 1)} | ${fmt(m.p50Ms, 2)} | ${fmt(m.p99Ms, 2)} | ${m.errors + m.non2xx} |`,
      );
    }
    const limit = COLD_LIMITS[backend];
    targets.push(
      `| ${name}: an uncached first page ≤ ${limit} × a cached one's CPU (${COLD_USERS} users) | ${ranged(row.cpuRatio, row.roundCpuRatios)} × | ${verdict(row.cpuRatio <= limit)} |`,
    );
  }
  if (r.postgresSkipped) section.push('', `PostgreSQL: skipped (${r.postgresSkipped}).`);
  return { section, targets };
}
