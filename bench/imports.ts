import { spawnSync } from 'node:child_process';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { once } from 'node:events';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import type { CatalogueRecord } from '../src/import-format/records.js';
import { DEFAULT_SPEC, generateCatalogue, type CatalogueSpec } from './catalogue.js';
import { type Rendered, dropSchema, fmt, ranged, verdict } from './harness.js';
import { CLI, ROUNDS, args, log } from './options.js';

// The import rows of `npm run bench`: `plantstore import` of a catalogue without groups, against the same rows
// written into bare tables (no index but the row's key, no trigger) in one transaction, the way the database
// writes rows fastest: SQLite a prepared insert per row, PostgreSQL COPY. Both in alternating rounds. Beside them,
// for information, the bare rows followed by the indexes a page's reads need: what no import can beat, since an
// import must leave those indexes built.

/** Plants of the imported catalogue. */
export const IMPORT_PLANTS = 200_000;
/** The least share of the bare tables' rate an import must reach. */
export const IMPORT_LIMIT = 0.5;

export interface ImportRow {
  /** Plants a second, the CLI's whole run (start included) and the bare writes, round by round. */
  imports: number[];
  bare: number[];
  ratio: number;
  roundRatios: number[];
  /** The bare rows and then the pages' indexes, plants a second, and against the bare rows alone. */
  indexed: number[];
  indexedRatio: number;
  roundIndexedRatios: number[];
}

export type ImportResults = { plants: number; rows: Partial<Record<'sqlite' | 'postgres', ImportRow>>; postgresSkipped?: string };

/** The catalogue's rows as the bare tables take them: users, plants (owner by user number) and user grants. */
interface Rows {
  users: Array<[name: string, admin: number]>;
  plants: Array<[name: string, tag: string | null, owner: number, isPublic: number]>;
  grants: Array<[user: number, plant: number]>;
}

async function writeCatalogue(file: string, spec: CatalogueSpec): Promise<Rows> {
  const rows: Rows = { users: [], plants: [], grants: [] };
  const userNumbers = new Map<string, number>();
  const out = createWriteStream(file);
  for (const record of generateCatalogue(spec) as Iterable<CatalogueRecord>) {
    if (!out.write(`${JSON.stringify(record)}\n`)) await once(out, 'drain');
    if (record.type === 'user') {
      rows.users.push([record.name, record.admin === true ? 1 : 0]);
      userNumbers.set(record.name, rows.users.length);
    } else if (record.type === 'plant') {
      rows.plants.push([record.name, record.tag ?? null, userNumbers.get(record.owner)!, record.public === true ? 1 : 0]);
      for (const grantee of record.sharedWith ?? []) rows.grants.push([userNumbers.get(grantee)!, rows.plants.length]);
    }
  }
  out.end();
  await once(out, 'finish');
  return rows;
}

/** The CLI's import of `file` into `db`: plants a second over its whole run. */
function importOnce(db: string, file: string, plants: number): number {
  const started = process.hrtime.bigint();
  const result = spawnSync(process.execPath, [CLI, '--db', db, 'import', file], { stdio: ['ignore', 'ignore', 'pipe'] });
  const seconds = Number(process.hrtime.bigint() - started) / 1e9;
  if (result.status !== 0) throw new Error(`import failed: ${String(result.stderr)}`);
  return plants / seconds;
}

/** The bare tables: no index (on SQLite the id is the row's own key, as in the service's tables). */
const BARE_TABLES = (id: string, integer: string) => [
  `CREATE TABLE users (id ${id}, name text NOT NULL, is_admin integer NOT NULL, created_at ${integer} NOT NULL)`,
  `CREATE TABLE plants (id ${id}, name text NOT NULL, tag text, owner_id ${integer} NOT NULL, is_public integer NOT NULL, created_at ${integer} NOT NULL)`,
  `CREATE TABLE grants (user_id ${integer} NOT NULL, plant_id ${integer} NOT NULL)`,
];

/**
 * The indexes of the service's plants and user grants that a page's reads use, on the bare tables' columns (those
 * on the public id and on a grant's tag have no column here, so they are left out: a floor, not the schema). A
 * first load builds them after its rows, as these are.
 */
const READ_INDEXES = [
  'CREATE INDEX plants_by_owner ON plants (owner_id, id)',
  'CREATE INDEX plants_public ON plants (id) WHERE is_public = 1',
  'CREATE INDEX plants_by_tag ON plants (tag, id, is_public, owner_id) WHERE tag IS NOT NULL',
  'CREATE INDEX plants_by_owner_and_tag ON plants (owner_id, tag, id) WHERE tag IS NOT NULL',
  'CREATE INDEX plants_public_by_tag ON plants (tag, id) WHERE is_public = 1 AND tag IS NOT NULL',
  'CREATE UNIQUE INDEX grants_key ON grants (user_id, plant_id)',
  'CREATE INDEX grants_by_plant ON grants (plant_id, user_id)',
];

/**
 * The rows into bare tables of a new SQLite file, at the service's durability, with the import's page cache when
 * `indexed` builds the read indexes before the commit: plants a second.
 */
async function bareSqlite(file: string, rows: Rows, indexed = false): Promise<number> {
  for (const suffix of ['', '-wal', '-shm']) await rm(`${file}${suffix}`, { force: true });
  const db = new BetterSqlite3(file);
  try {
    db.pragma('journal_mode = WAL');
    db.pragma('synchronous = FULL');
    if (indexed) db.pragma('cache_size = -65536');
    for (const statement of BARE_TABLES('INTEGER PRIMARY KEY', 'INTEGER')) db.exec(statement);
    const now = Date.now();
    const started = process.hrtime.bigint();
    const user = db.prepare('INSERT INTO users VALUES (?, ?, ?, ?)');
    const plant = db.prepare('INSERT INTO plants VALUES (?, ?, ?, ?, ?, ?)');
    const grant = db.prepare('INSERT INTO grants VALUES (?, ?)');
    db.exec('BEGIN');
    rows.users.forEach(([name, admin], i) => user.run(i + 1, name, admin, now));
    rows.plants.forEach(([name, tag, owner, isPublic], i) => plant.run(i + 1, name, tag, owner, isPublic, now));
    for (const [userId, plantId] of rows.grants) grant.run(userId, plantId);
    if (indexed) for (const statement of READ_INDEXES) db.exec(statement);
    db.exec('COMMIT');
    return rows.plants.length / (Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    db.close();
  }
}

/** COPY's text format of `rows` (the generated names need no escaping), in chunks of about 64 KB. */
function* copyLines(rows: ReadonlyArray<ReadonlyArray<string | number | null>>): Generator<string> {
  let chunk = '';
  for (const row of rows) {
    chunk += `${row.map((v) => (v === null ? '\\N' : String(v))).join('\t')}\n`;
    if (chunk.length >= 65_536) {
      yield chunk;
      chunk = '';
    }
  }
  if (chunk.length > 0) yield chunk;
}

/**
 * The rows into bare tables of a new PostgreSQL schema by COPY, in one transaction; when `indexed`, then the plants'
 * key and the read indexes, with the import's memory for index builds: plants a second.
 */
async function barePostgres(schema: string, rows: Rows, indexed = false): Promise<number> {
  const client = new pg.Client({ connectionString: args.pg.replace(/\?.*$/, '') });
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`);
    await client.query(`CREATE SCHEMA ${schema}`);
    await client.query(`SET search_path TO ${schema}`);
    for (const statement of BARE_TABLES('bigint NOT NULL', 'bigint')) await client.query(statement);
    const now = Date.now();
    const started = process.hrtime.bigint();
    await client.query('BEGIN');
    const copy = async (table: string, lines: Iterable<string>) =>
      pipeline(Readable.from(lines), client.query(copyFrom(`COPY ${table} FROM STDIN`)));
    await copy('users', copyLines(rows.users.map(([name, admin], i) => [i + 1, name, admin, now])));
    await copy('plants', copyLines(rows.plants.map(([name, tag, owner, isPublic], i) => [i + 1, name, tag, owner, isPublic, now])));
    await copy('grants', copyLines(rows.grants));
    if (indexed) {
      await client.query("SET LOCAL maintenance_work_mem = '256MB'");
      for (const statement of ['ALTER TABLE plants ADD PRIMARY KEY (id)', ...READ_INDEXES]) await client.query(statement);
    }
    await client.query('COMMIT');
    return rows.plants.length / (Number(process.hrtime.bigint() - started) / 1e9);
  } finally {
    await client.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`).catch(() => undefined);
    await client.end();
  }
}

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Plants a second, round by round: the CLI's import, the bare rows, and the bare rows with the read indexes. */
type Rounds = Record<'imports' | 'bare' | 'indexed', number[]>;
const noRounds = (): Rounds => ({ imports: [], bare: [], indexed: [] });

function row({ imports, bare, indexed }: Rounds): ImportRow {
  return {
    imports,
    bare,
    ratio: mean(imports) / mean(bare),
    roundRatios: imports.map((x, i) => x / bare[i]!),
    indexed,
    indexedRatio: mean(indexed) / mean(bare),
    roundIndexedRatios: indexed.map((x, i) => x / bare[i]!),
  };
}

/** The rows on SQLite and, unless `pgSkip` says why not, PostgreSQL. */
export async function measureImports(dir: string, pgSkip: string | false): Promise<ImportResults> {
  const spec: CatalogueSpec = { ...DEFAULT_SPEC, plants: IMPORT_PLANTS, groups: 0, sharedWithGroup: 0 };
  const file = join(dir, 'import-rows.ndjson');
  const rows = await writeCatalogue(file, spec);
  const results: ImportResults = { plants: IMPORT_PLANTS, rows: {} };
  const line = (backend: string, round: number, r: Rounds) => {
    const [imported, bare, indexed] = [r.imports.at(-1)!, r.bare.at(-1)!, r.indexed.at(-1)!];
    log(
      `  ${backend}, round ${round}: import ${fmt(imported)} plants/s, bare tables ${fmt(bare)} plants/s (${fmt(imported / bare, 2)}), ` +
        `with the read indexes ${fmt(indexed)} plants/s (${fmt(indexed / bare, 2)})`,
    );
  };
  try {
    log(`\nimports: ${fmt(IMPORT_PLANTS)} plants without groups, against the same rows into bare tables, alternately…`);
    const sqlite = noRounds();
    for (let round = 1; round <= ROUNDS; round++) {
      const db = join(dir, 'import-rows.db');
      for (const suffix of ['', '-wal', '-shm']) await rm(`${db}${suffix}`, { force: true });
      sqlite.imports.push(importOnce(db, file, IMPORT_PLANTS));
      sqlite.bare.push(await bareSqlite(join(dir, 'import-bare.db'), rows));
      sqlite.indexed.push(await bareSqlite(join(dir, 'import-bare.db'), rows, true));
      line('SQLite', round, sqlite);
    }
    results.rows.sqlite = row(sqlite);
    if (pgSkip) {
      results.postgresSkipped = pgSkip;
      return results;
    }
    const postgres = noRounds();
    const [schema, bareSchema] = [`bench_import_${process.pid}`, `bench_import_bare_${process.pid}`];
    for (let round = 1; round <= ROUNDS; round++) {
      await dropSchema(args.pg, schema);
      postgres.imports.push(importOnce(`${args.pg}${args.pg.includes('?') ? '&' : '?'}schema=${schema}`, file, IMPORT_PLANTS));
      postgres.bare.push(await barePostgres(bareSchema, rows));
      postgres.indexed.push(await barePostgres(bareSchema, rows, true));
      line('PostgreSQL', round, postgres);
    }
    await dropSchema(args.pg, schema);
    results.rows.postgres = row(postgres);
    return results;
  } finally {
    await rm(file, { force: true });
  }
}

export function renderImports(r: ImportResults): Rendered {
  const section = [
    `## Imports against bare tables (${fmt(r.plants)} plants, no groups)`,
    '',
    '`plantstore import` of a generated catalogue (users, plants, grants to users) into a new database, timed over the ' +
      "CLI's whole run, against the same rows written into bare tables (a key, no other index, no trigger) in one " +
      'transaction: on SQLite a prepared insert per row at the same durability, on PostgreSQL `COPY`. Beside them, the ' +
      "bare rows and then, in the same transaction, the indexes of plants and grants that a page's reads use (on " +
      'PostgreSQL the key of plants too): no import that leaves those indexes can beat it. Alternating rounds.',
    '',
    '| backend | import plants/s | bare tables plants/s | ratio | bare tables, then the read indexes, plants/s | ratio |',
    '|---|---|---|---|---|---|',
  ];
  const targets: string[] = [];
  for (const [backend, x] of Object.entries<ImportRow>(r.rows)) {
    const name = backend === 'sqlite' ? 'SQLite' : 'PostgreSQL';
    section.push(
      `| ${name} | ${fmt(mean(x.imports))} | ${fmt(mean(x.bare))} | ${fmt(x.ratio, 2)} | ${fmt(mean(x.indexed))} | ${fmt(x.indexedRatio, 2)} |`,
    );
    const rounds = ranged(x.ratio, x.roundRatios);
    const floor = `the bare rows with the read indexes reach ${ranged(x.indexedRatio, x.roundIndexedRatios)}`;
    targets.push(
      `| ${name}: an import ≥ ${IMPORT_LIMIT} of the same rows into bare tables | ${rounds}; ${floor} | ${verdict(x.ratio >= IMPORT_LIMIT)} |`,
    );
  }
  if (r.postgresSkipped) section.push('', `PostgreSQL: skipped (${r.postgresSkipped}).`);
  return { section, targets };
}
