import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { DEFAULT_SPEC } from './catalogue.js';
import { loadGenerator } from './load.js';

// The bench's command line (its options are listed in the README's Performance section) and what every
// part reads from it: durations, rounds, connections, the load generator, the log.

export const { values: args } = parseArgs({
  options: {
    plants: { type: 'string', default: String(DEFAULT_SPEC.plants) },
    duration: { type: 'string', default: '5' },
    rounds: { type: 'string', default: '3' },
    connections: { type: 'string', default: '50' },
    'with-1e7': { type: 'boolean', default: false },
    /** Plants of the catalogue listed in full by the looping clients of the "pages while listings stream" rows. */
    'listing-plants': { type: 'string', default: '200000' },
    /** Clients that loop those full listings (all as the admin, so at most 4 run at once), or run nothing else. */
    listers: { type: 'string', default: '10' },
    'while-listing-only': { type: 'boolean', default: false },
    /** Those listings as a typical user's (a union over owner, public, grants and groups) instead of the admin's. */
    'lister-user': { type: 'boolean', default: false },
    /** Catalogue sizes of the scale curve (a quick check can pass smaller ones). */
    scale: { type: 'string', default: '10000,100000,1000000' },
    'no-postgres': { type: 'boolean', default: false },
    /** Skip the rows of users in many groups (and PostgreSQL's plan at 10^7), or run nothing else. */
    'no-groups': { type: 'boolean', default: false },
    'groups-only': { type: 'boolean', default: false },
    /** Plants of the large-group rows' catalogues (joins of a group given all of them, imports with groups). */
    'large-group-plants': { type: 'string', default: '1000000' },
    'large-groups-only': { type: 'boolean', default: false },
    /** Only the worst body of each route, and /healthz meanwhile. */
    'worst-bodies-only': { type: 'boolean', default: false },
    /** Only the import rows: imports against the same rows written into bare tables. */
    'imports-only': { type: 'boolean', default: false },
    /** Only the cold-page rows: 200 users' first pages uncached against cached. */
    'cold-pages-only': { type: 'boolean', default: false },
    /** Skip the write rows, or run nothing else (a quick look at writes). */
    'no-writes': { type: 'boolean', default: false },
    'writes-only': { type: 'boolean', default: false },
    /** Skip the event (webhook) rows, or run nothing else. */
    'no-events': { type: 'boolean', default: false },
    'events-only': { type: 'boolean', default: false },
    pg: { type: 'string', default: process.env.PLANTSTORE_BENCH_PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test' },
    'load-generator': { type: 'string' },
    out: { type: 'string', default: 'docs' },
  },
});

export const ROOT = new URL('..', import.meta.url).pathname;
export const CLI = join(ROOT, 'dist/cli/main.js');
export const DURATION = Number(args.duration);
export const ROUNDS = Number(args.rounds);
export const CONNECTIONS = Number(args.connections);
export const ROTATING_USERS = 100;
export const load = await loadGenerator(args['load-generator']);

export const log = (line: string) => process.stderr.write(`${line}\n`);
