import { spawn, spawnSync } from 'node:child_process';
import { connectPostgres } from './plain-sql.js';

/** A transaction another tool holds open on the database: its statements ran, its commit waits for the test. */
export interface HeldTransaction {
  commit(): Promise<void>;
  rollback(): Promise<void>;
}

/** Held transactions not ended yet: a test that fails before its commit leaves its transaction here. */
const open = new Set<HeldTransaction>();

/**
 * Rolls back every held transaction a failed test left open, so that its locks do not hold the cleanup's
 * DROP SCHEMA (and the test process) for good.
 */
export async function releaseHeldTransactions(): Promise<void> {
  await Promise.allSettled([...open].map((held) => held.rollback()));
}

/** `held`, counted open until it commits or rolls back. */
function tracked(held: HeldTransaction): HeldTransaction {
  let ended: Promise<void> | undefined;
  const end = (how: () => Promise<void>) => () => {
    open.delete(tracked);
    return (ended ??= how());
  };
  const tracked: HeldTransaction = { commit: end(() => held.commit()), rollback: end(() => held.rollback()) };
  open.add(tracked);
  return tracked;
}

/**
 * Runs `statements` in a transaction of its own session, as an operator in psql or sqlite3 would type
 * `begin; …;` and leave it open, and resolves once they ran. PostgreSQL: a connection of its own at the default
 * isolation. SQLite: the sqlite3 command in a process of its own (its connection holds the write lock, so the
 * service's writes wait for it as they would for another process; sqlite3 leaves foreign keys off, as plain SQL does).
 */
export async function holdTransaction(db: string, statements: string): Promise<HeldTransaction> {
  if (db.startsWith('postgres')) {
    const client = await connectPostgres(db);
    try {
      await client.query('BEGIN');
      await client.query(statements);
    } catch (err) {
      // Lost a deadlock or a key: rolled back and closed, as psql's session would be; an open client would keep the
      // test's process alive after its last test.
      await client.query('ROLLBACK').catch(() => {});
      await client.end().catch(() => {});
      throw err;
    }
    const end = async (how: string) => {
      try {
        await client.query(how);
      } finally {
        await client.end();
      }
    };
    return tracked({ commit: () => end('COMMIT'), rollback: () => end('ROLLBACK') });
  }
  const child = spawn('sqlite3', ['-batch', db], { stdio: ['pipe', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  const printed = (word: string) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (out.includes(word)) resolve();
        else if (err !== '') reject(new Error(`sqlite3: ${err}`));
      };
      child.stdout.on('data', (part: Buffer) => ((out += part.toString()), check()));
      child.stderr.on('data', (part: Buffer) => ((err += part.toString()), check()));
      void exited.then(() => reject(new Error(`sqlite3 exited: ${err}`)));
    });
  const held = printed('held-open');
  child.stdin.write(`.timeout 10000\nBEGIN IMMEDIATE;\n${statements};\nSELECT 'held-open';\n`);
  await held;
  const end = async (how: string) => {
    child.stdin.end(`${how};\n`);
    if ((await exited) !== 0 || err !== '') throw new Error(`sqlite3 ${how} failed: ${err}`);
  };
  return tracked({ commit: () => end('COMMIT'), rollback: () => end('ROLLBACK') });
}

/**
 * Runs `statements` in a transaction that its own session holds open for `ms` and then commits by itself, whatever
 * this process is doing meanwhile (sqlite3 sleeps with `.shell`; the PostgreSQL session's commit is sent by a timer).
 */
export async function holdFor(db: string, statements: string, ms: number): Promise<void> {
  if (db.startsWith('postgres')) {
    const held = await holdTransaction(db, statements);
    await new Promise((resolve) => setTimeout(resolve, ms));
    return held.commit();
  }
  const child = spawn('sqlite3', ['-batch', db], { stdio: ['pipe', 'ignore', 'pipe'] });
  let err = '';
  child.stderr.on('data', (part: Buffer) => (err += part.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', resolve));
  child.stdin.end(`.timeout 10000\nBEGIN IMMEDIATE;\n${statements};\n.shell sleep ${(ms / 1000).toFixed(3)}\nCOMMIT;\n`);
  if ((await exited) !== 0 || err !== '') throw new Error(`sqlite3: ${err}`);
}

/**
 * Why sessions cannot be held on `backend` here, or false: SQLite's are the sqlite3 command (Debian's package,
 * which .ci/run installs). Under CI nothing is skipped: a missing command fails the test that needs it.
 */
export function heldSessionsSkip(backend: string): string | false {
  if (backend !== 'sqlite' || process.env.CI) return false;
  return spawnSync('sqlite3', ['--version']).status === 0 ? false : 'the sqlite3 command is not installed';
}
