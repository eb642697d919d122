import { type CatalogueSpec } from './catalogue.js';
import { renderColdPages, type ColdPageResults } from './cold-pages.js';
import { renderImports, type ImportResults } from './imports.js';
import { renderEvents, type EventResults } from './events.js';
import { renderLargeGroups, type LargeGroupResults } from './large-groups.js';
import { renderWorstBodies, type WorstBodyResults } from './worst-bodies.js';
import { renderWrites, type WriteResults } from './writes.js';

import { type Measured, type Paired, type UnderWrites, cpuPerRequestUs, fmt, ranged, verdict } from './harness.js';
import { ROTATING_USERS } from './options.js';
import { type GroupResults, type PagesWhileListing, renderGroups, renderWhileListing } from './reads.js';

// docs/benchmarks.md from a whole run's results: every table, then every target with its verdict.

export function renderReport(r: Record<string, unknown>): string {
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

  const imports = r.imports === undefined ? undefined : renderImports(r.imports as ImportResults);
  if (imports) lines.push('', ...imports.section);
  const coldPages = r.coldPages === undefined ? undefined : renderColdPages(r.coldPages as ColdPageResults);
  if (coldPages) lines.push('', ...coldPages.section);
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
  if (imports) lines.push(...imports.targets);
  if (coldPages) lines.push(...coldPages.targets);
  if (writes) lines.push(...writes.targets);
  if (events) lines.push(...events.targets);
  if (groups) lines.push(...groups.targets);
  if (worstBodies) lines.push(...worstBodies.targets);
  if (largeGroups) lines.push(...largeGroups.targets);
  return lines.join('\n');
}
