import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { rm } from 'node:fs/promises';
import { request } from 'node:http';
import { join } from 'node:path';
import { BENCH_TAGS, DEFAULT_SPEC, MANY_GROUPS, manyGroupsCatalogue, userName, withBenchTags, type CatalogueSpec } from './catalogue.js';
import { type LoadResult } from './load.js';
import { serverCpuSeconds } from './process-cpu.js';

import {
  type Measured,
  type Paired,
  type Rendered,
  type Server,
  type Target,
  type UnderWrites,
  backendsCpuSeconds,
  buildDatabase,
  combine,
  cpuPerRequestUs,
  dropSchema,
  fmt,
  ranged,
  inRounds,
  issueTokens,
  pairOf,
  settle,
  startConstantServer,
  startService,
  tokensFor,
  verdict,
} from './harness.js';
import { DURATION, ROOT, ROTATING_USERS, ROUNDS, args, load, log } from './options.js';

// The read rows: `GET /plants` against the ceiling (quiet, under writes, caches off, the framework floor), small
// pages while full listings stream, the admin's full listing, and users in many groups.

/**
 * A writer process committing about 100 changes a second (bench/writer.ts): plants for the measured users,
 * created by them over `POST /plants` of the measured service, grants to them and tokens of other users through
 * the store's real write path. Counts what it committed.
 */
export function writerLoad(
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
export async function measureFrameworkFloor(ceiling: Server, tokens: string[]): Promise<Paired> {
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
export async function measure(
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
export const PAGE_CONNECTIONS = 10;

/** What another user's `limit=20` pages got while full listings streamed. */
export interface PagesWhileListing {
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
export async function pagesWhileListing(db: string, rotating: string[], admin: string, listers: number): Promise<PagesWhileListing> {
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
export async function fullListing(
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

/** Users in many groups against typical users, uncached, on one catalogue; and PostgreSQL's page at 10^7 against 10^5. */
export interface GroupResults {
  plants: number;
  manyGroups: Record<
    string,
    {
      typical: Measured;
      crowd: Measured;
      cpuRatio: number;
      roundCpuRatios: number[];
      /** Typical users' first pages of one tag: held by 1 plant in 10,000, and by half the catalogue. */
      tags: Record<keyof typeof BENCH_TAGS, { measured: Measured; cpuRatio: number; roundCpuRatios: number[] }>;
    }
  >;
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
export async function benchGroups(dir: string, plants: number, withPostgres: boolean, largePostgres: boolean): Promise<GroupResults> {
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
      const cpu = cpuSeconds ? { cpuSeconds } : {};
      const [t, c, rare, half] = await inRounds([
        { name: `${label}, typical users`, url, tokens: typical, pid, ...cpu },
        { name: `${label}, users in ${MANY_GROUPS.groups} groups`, url, tokens: crowdTokens, pid, ...cpu },
        { name: `${label}, typical users, a tag of 1 plant in 10,000`, url: `${url}&tag=${BENCH_TAGS.rare}`, tokens: typical, pid, ...cpu },
        { name: `${label}, typical users, a tag of half the plants`, url: `${url}&tag=${BENCH_TAGS.half}`, tokens: typical, pid, ...cpu },
      ]);
      const typicalAll = combine(t!);
      const against = (rounds: Measured[]) => {
        const measured = combine(rounds);
        return {
          measured,
          cpuRatio: cpuPerRequestUs(measured) / cpuPerRequestUs(typicalAll),
          roundCpuRatios: rounds.map((round, i) => cpuPerRequestUs(round) / cpuPerRequestUs(t![i]!)),
        };
      };
      const { measured: crowdAll, cpuRatio, roundCpuRatios } = against(c!);
      return { typical: typicalAll, crowd: crowdAll, cpuRatio, roundCpuRatios, tags: { rare: against(rare!), half: against(half!) } };
    } finally {
      await service.stop();
    }
  };
  const results: GroupResults = { plants, manyGroups: {} };
  log(`\ngroups: importing ${fmt(plants)} plants with ${MANY_GROUPS.groups} groups of ${MANY_GROUPS.plantsPerGroup} plants each…`);
  const sqliteDb = join(dir, 'groups.db');
  await buildDatabase(sqliteDb, spec, dir, withBenchTags(manyGroupsCatalogue(spec)));
  results.manyGroups.sqlite = await crowd(sqliteDb, 'SQLite')();
  await rm(sqliteDb, { force: true });
  if (!withPostgres) return results;
  const schemaUrl = (schema: string) => `${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`;
  const groupsSchema = `bench_groups_${process.pid}`;
  try {
    log(`PostgreSQL: the same…`);
    await buildDatabase(schemaUrl(groupsSchema), spec, dir, withBenchTags(manyGroupsCatalogue(spec)));
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

/** The rows and targets of benchGroups. */
export function renderGroups(g: GroupResults): { section: string[]; targets: string[] } {
  const section = [
    `## Users in many groups, and pages of one tag (caches off, ${fmt(g.plants)} plants)`,
    '',
    `The first page (\`limit=20\`) of users in ${MANY_GROUPS.groups} groups of ${MANY_GROUPS.plantsPerGroup} plants each, ` +
      "and typical users' first pages of one tag (`tag=`, held by 1 plant in 10,000 and by half the catalogue), " +
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
      ['typical, `tag=` of 1 plant in 10,000', m.tags.rare.measured],
      ['typical, `tag=` of half the plants', m.tags.half.measured],
    ] as const) {
      section.push(
        `| ${name} | ${who} | ${fmt(x.rps)} | ${fmt(cpuPerRequestUs(x), 1)} | ${fmt(x.p50Ms, 2)} | ${fmt(x.p99Ms, 2)} | ${x.errors + x.non2xx} |`,
      );
    }
    targets.push(
      `| ${name}, caches off: a user in ${MANY_GROUPS.groups} groups ≤ 1.5 × a typical user's CPU per first page | ` +
        `${ranged(m.cpuRatio, m.roundCpuRatios)} × | ${verdict(m.cpuRatio <= 1.5)} |`,
    );
    for (const [which, t] of [
      ['1 plant in 10,000', m.tags.rare],
      ['half the plants', m.tags.half],
    ] as const) {
      targets.push(
        `| ${name}, caches off: a first page of a tag held by ${which} ≤ 1.5 × an untagged first page's CPU | ` +
          `${ranged(t.cpuRatio, t.roundCpuRatios)} × | ${verdict(t.cpuRatio <= 1.5)} |`,
      );
    }
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
export async function benchWhileListing(
  dir: string,
  spec: CatalogueSpec,
  pgSkip: string | false,
): Promise<Record<string, PagesWhileListing>> {
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

export function renderWhileListing(whileListing: Record<string, PagesWhileListing>): Rendered {
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
