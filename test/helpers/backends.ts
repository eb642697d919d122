import { mkdtemp, rename, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/open-store.js';
import { releaseHeldTransactions } from './held-transaction.js';
import { dropSchema, freshSchema, requirePostgres } from './postgres.js';
import type { Store } from '../../src/store/store.js';

/**
 * A storage backend every HTTP and access suite runs against. `open()` gives a fresh, empty, migrated
 * database each time it is called (never shared between tests or files); `cleanup()` closes whatever
 * this backend opened in this process and removes it (temp files, or later a scratch PostgreSQL database).
 */
export interface Backend {
  readonly name: string;
  /** Why this backend's suites are skipped here (PostgreSQL not reachable), or false. */
  readonly skip: string | false;
  open(): Promise<Store>;
  /** The `--db` value of a fresh, empty database, for tests that run the CLI or a server process. */
  freshDb(): Promise<string>;
  /**
   * Takes the database at `db` (a `freshDb()`) away from under the stores that have it open, as in an outage: the
   * SQLite file is moved aside, the PostgreSQL schema dropped. Opening a store at `db` again makes a fresh one.
   */
  takeAway(db: string): Promise<void>;
  cleanup(): Promise<void>;
}

/** Tracks what a backend created so that `cleanup()` can dispose of it, even after a failed test. */
function tracker() {
  const disposers: Array<() => Promise<void>> = [];
  return {
    add(dispose: () => Promise<void>): void {
      disposers.push(dispose);
    },
    async disposeAll(): Promise<void> {
      const errors: unknown[] = [];
      for (const dispose of disposers.splice(0).reverse()) {
        try {
          await dispose();
        } catch (err) {
          errors.push(err);
        }
      }
      if (errors.length > 0) throw new AggregateError(errors, 'backend cleanup failed');
    },
  };
}

function sqliteBackend(): Backend {
  const created = tracker();
  const freshDb = async () => {
    const dir = await mkdtemp(join(tmpdir(), 'plantstore-test-'));
    created.add(() => rm(dir, { recursive: true, force: true }));
    return join(dir, 'plantstore.db');
  };
  return {
    name: 'sqlite',
    skip: false,
    freshDb,
    async takeAway(db) {
      // Its write-ahead log and index go too: SQLite would take them for those of a new database at the path.
      await rename(db, `${db}.away`);
      for (const suffix of ['-wal', '-shm']) await rm(`${db}${suffix}`, { force: true });
    },
    async open() {
      const store = await openStore({ db: await freshDb() });
      // close() is idempotent, so closing here after a test already closed the store is fine.
      created.add(() => store.close());
      return store;
    },
    cleanup: () => created.disposeAll(),
  };
}

/** PostgreSQL: every `open()` gets a schema of its own on the test server; `cleanup()` drops them all. */
function postgresBackend(skip: string | false): Backend {
  const created = tracker();
  const freshDb = async () => {
    const { schema, url } = freshSchema();
    created.add(() => dropSchema(schema));
    return url;
  };
  return {
    name: 'postgres',
    skip,
    freshDb,
    takeAway: (db) => dropSchema(new URL(db).searchParams.get('schema')!),
    async open() {
      const store = await openStore({ db: await freshDb() });
      created.add(() => store.close());
      return store;
    },
    cleanup: () => (skip ? Promise.resolve() : created.disposeAll()),
  };
}

const postgresSkip = await requirePostgres();

/** Every backend known to the test suite. */
const ALL: Record<string, () => Backend> = {
  sqlite: sqliteBackend,
  postgres: () => postgresBackend(postgresSkip),
};

function selectBackends(env: string | undefined): Backend[] {
  const wanted = (env ?? '')
    .split(',')
    .map((name) => name.trim())
    .filter((name) => name !== '');
  const names = wanted.length > 0 ? [...new Set(wanted)] : Object.keys(ALL);
  const unknown = names.filter((name) => !(name in ALL));
  if (unknown.length > 0) {
    throw new Error(`PLANTSTORE_TEST_BACKENDS names unknown backend(s) ${unknown.join(', ')}; known: ${Object.keys(ALL).join(', ')}`);
  }
  return names.map((name) => ALL[name]!());
}

/** The backends to run every suite against; narrow with PLANTSTORE_TEST_BACKENDS=sqlite,postgres. */
export const BACKENDS: readonly Backend[] = selectBackends(process.env.PLANTSTORE_TEST_BACKENDS);

/** Disposes of everything every backend opened in this process; call from a top-level `after`. */
export async function cleanupBackends(): Promise<void> {
  await releaseHeldTransactions();
  for (const backend of BACKENDS) await backend.cleanup();
}
