import { spawnSync } from 'node:child_process';
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { cpus, tmpdir, totalmem } from 'node:os';
import { join, resolve } from 'node:path';
import { DEFAULT_SPEC, userName, type CatalogueSpec } from './catalogue.js';
import { measureColdPages, renderColdPages } from './cold-pages.js';
import { measureImports, renderImports } from './imports.js';
import { measureEvents, renderEvents, type EventResults } from './events.js';
import { measureLargeGroups, renderLargeGroups, type LargeGroupResults } from './large-groups.js';
import { measureWorstBodies, renderWorstBodies, type WorstBodyResults } from './worst-bodies.js';
import { measureWrites, renderWrites, type WriteResults } from './writes.js';

import {
  type Measured,
  type Rendered,
  type Server,
  buildDatabase,
  combine,
  dropSchema,
  fmt,
  importRecords,
  inRounds,
  issueTokens,
  peakRssMb,
  postgresReachable,
  processorModel,
  startConstantServer,
  startService,
  tokensFor,
} from './harness.js';
import { CLI, CONNECTIONS, DURATION, ROOT, ROTATING_USERS, ROUNDS, args, load, log } from './options.js';
import { benchGroups, benchWhileListing, fullListing, measure, measureFrameworkFloor, renderGroups, renderWhileListing } from './reads.js';
import { renderReport } from './report.js';

// `npm run bench`: the ceiling (bare node:http) and Plant Store measured side by side in one run.
// Every figure is printed, written to docs/benchmarks.json and, as a table, to docs/benchmarks.md.

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
    [
      args['imports-only'],
      async () => renderImports(await measureImports(dir, args['no-postgres'] ? 'disabled' : await postgresReachable(args.pg))),
    ],
    [
      args['cold-pages-only'],
      async () => {
        const pgSkip = args['no-postgres'] ? 'disabled' : await postgresReachable(args.pg);
        return renderColdPages(await measureColdPages(dir, Number(args.plants), pgSkip));
      },
    ],
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

    // Imports against the same rows into bare tables, on both backends.
    results.imports = await measureImports(dir, pgSkip);

    // Cold pages: a first page uncached against cached, 200 users, on both backends.
    results.coldPages = await measureColdPages(dir, spec.plants, pgSkip);

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

await main();
