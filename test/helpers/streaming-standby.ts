import { execFile, spawnSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { appendFile, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/**
 * A real PostgreSQL streaming replication pair (primary + hot standby) in a temporary folder, for tests that need
 * actual replication lag. The shared test server (helpers/postgres.ts) has no replication access, so this one is
 * made from scratch with the PostgreSQL 15 binaries, run as the `postgres` OS user (PostgreSQL refuses root).
 */
export interface StreamingPair {
  primaryUrl: string; // postgres://postgres@127.0.0.1:PORT/postgres  (trust auth on loopback)
  standbyUrl: string; // same for the standby
  /** pg_wal_replay_pause() on the standby; resolves once pg_get_wal_replay_pause_state() = 'paused'. */
  pauseReplay(): Promise<void>;
  /** pg_wal_replay_resume() on the standby. */
  resumeReplay(): Promise<void>;
  /** Resolves once the standby has replayed everything the primary had written when called (compare pg_current_wal_lsn() on the primary with pg_last_wal_replay_lsn() on the standby, polling every 20 ms, timeout 20 s). */
  waitForReplay(): Promise<void>;
  /** Stops both servers (pg_ctl stop -m immediate is fine) and removes the folder; safe to call twice. */
  stop(): Promise<void>;
}

/** The server binaries of the newest PostgreSQL installed the Debian way (the one the machine's own server runs). */
const PG_BIN = (() => {
  const versions = existsSync('/usr/lib/postgresql')
    ? readdirSync('/usr/lib/postgresql')
        .filter((v) => /^\d+$/.test(v))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  return `/usr/lib/postgresql/${versions[0] ?? '15'}/bin`;
})();
const REQUIRED_BINARIES = ['initdb', 'pg_ctl', 'pg_basebackup', 'postgres'];
const RUNUSER = ['/usr/sbin/runuser', '/sbin/runuser', '/usr/bin/runuser'].find((path) => existsSync(path));
const POLL_MS = 20;
const REPLAY_TIMEOUT_MS = 20_000;

function postgresUser(): { uid: number; gid: number } | undefined {
  try {
    const line = readFileSync('/etc/passwd', 'utf8')
      .split('\n')
      .find((entry) => entry.startsWith('postgres:'));
    const fields = line?.split(':');
    if (!fields || fields.length < 4) return undefined;
    return { uid: Number(fields[2]), gid: Number(fields[3]) };
  } catch {
    return undefined;
  }
}

/** undefined when a pair can be made here, otherwise the reason (for `describe(..., { skip })`). */
export function streamingPairUnavailable(): string | undefined {
  if (process.getuid?.() !== 0) return 'a streaming pair needs root (to run PostgreSQL as the postgres user)';
  const missing = REQUIRED_BINARIES.filter((name) => !existsSync(join(PG_BIN, name)));
  if (missing.length > 0) return `PostgreSQL 15 binaries missing in ${PG_BIN}: ${missing.join(', ')}`;
  if (!RUNUSER) return 'runuser not found (needed to run PostgreSQL as the postgres user)';
  if (!postgresUser()) return 'no postgres OS user in /etc/passwd';
  return undefined;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** Runs a PostgreSQL binary as the postgres user; a failure carries the command's own output. */
function asPostgres(cwd: string, binary: string, args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      RUNUSER!,
      ['-u', 'postgres', '--', join(PG_BIN, binary), ...args],
      // cwd: the postgres user cannot read the repository folder, which initdb and pg_ctl complain about.
      { cwd, env: { ...process.env, LC_ALL: 'C' }, timeout: 60_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${binary} ${args.join(' ')} failed: ${error.message}\n${stdout}${stderr}`));
        else resolve(stdout);
      },
    );
  });
}

async function withClient<T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  try {
    await client.connect();
    return await fn(client);
  } finally {
    await client.end().catch(() => {});
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

// Servers started by pg_ctl outlive this process; a test process that exits without stop() must not leave them
// running, nor their folders behind.
const running = new Set<string>();
const folders = new Set<string>();
process.on('exit', () => {
  for (const dataDir of running) {
    spawnSync(RUNUSER!, ['-u', 'postgres', '--', join(PG_BIN, 'pg_ctl'), '-D', dataDir, '-m', 'immediate', 'stop'], { stdio: 'ignore' });
  }
  for (const dir of folders) rmSync(dir, { recursive: true, force: true });
});

export async function startStreamingPair(): Promise<StreamingPair> {
  const unavailable = streamingPairUnavailable();
  if (unavailable) throw new Error(unavailable);
  const { uid, gid } = postgresUser()!;

  const dir = await mkdtemp(join(tmpdir(), 'plantstore-standby-'));
  folders.add(dir);
  await chown(dir, uid, gid);
  const primaryDir = join(dir, 'primary');
  const standbyDir = join(dir, 'standby');
  const primaryLog = join(dir, 'primary.log');
  const standbyLog = join(dir, 'standby.log');
  const [primaryPort, standbyPort] = await Promise.all([freePort(), freePort()]);
  const primaryUrl = `postgres://postgres@127.0.0.1:${primaryPort}/postgres`;
  const standbyUrl = `postgres://postgres@127.0.0.1:${standbyPort}/postgres`;

  const logTails = async (): Promise<string> => {
    const tail = async (file: string) => {
      const text = await readFile(file, 'utf8').catch(() => '(no log)');
      return text.split('\n').slice(-40).join('\n');
    };
    return `--- primary log (${primaryLog}) ---\n${await tail(primaryLog)}\n--- standby log (${standbyLog}) ---\n${await tail(standbyLog)}`;
  };
  const withLogs = async (err: unknown): Promise<Error> => new Error(`${(err as Error).message}\n${await logTails()}`);

  let stopped: Promise<void> | undefined;
  const stop = (): Promise<void> => {
    stopped ??= (async () => {
      // Standby first, so it does not log a burst of reconnect attempts to a vanished primary.
      for (const dataDir of [standbyDir, primaryDir]) {
        if (existsSync(join(dataDir, 'postmaster.pid'))) {
          await asPostgres(dir, 'pg_ctl', ['-D', dataDir, '-m', 'immediate', '-w', 'stop']).catch(() => {});
        }
        running.delete(dataDir);
      }
      await rm(dir, { recursive: true, force: true });
      folders.delete(dir);
    })();
    return stopped;
  };

  try {
    const initdbArgs = ['-D', primaryDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '--no-instructions', '--locale=C', '-E', 'UTF8'];
    await asPostgres(dir, 'initdb', initdbArgs);
    // synchronous_commit stays on: with it off, pg_current_wal_lsn() (the write position) can lag a returned
    // commit, and waitForReplay would resolve before that commit reached the standby.
    const settings = [
      `listen_addresses = '127.0.0.1'`,
      `port = ${primaryPort}`,
      `unix_socket_directories = '${dir}'`,
      'wal_level = replica',
      'max_wal_senders = 4',
      'hot_standby = on',
      'fsync = off',
      'full_page_writes = off',
      'shared_buffers = 16MB',
    ];
    await appendFile(join(primaryDir, 'postgresql.conf'), `\n${settings.join('\n')}\n`);
    await writeFile(
      join(primaryDir, 'pg_hba.conf'),
      [
        'local all all trust',
        'local replication all trust',
        'host all all 127.0.0.1/32 trust',
        'host replication all 127.0.0.1/32 trust',
        '',
      ].join('\n'),
    );
    running.add(primaryDir);
    await asPostgres(dir, 'pg_ctl', ['-w', '-D', primaryDir, '-l', primaryLog, 'start']);

    // A slot keeps the primary's WAL until the standby has streamed it, however slowly the standby starts.
    await asPostgres(dir, 'pg_basebackup', [
      ...['-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres', '-D', standbyDir],
      ...['-R', '-X', 'stream', '-C', '-S', 'standby', '--checkpoint=fast', '--no-sync'],
    ]);
    await appendFile(join(standbyDir, 'postgresql.auto.conf'), `port = ${standbyPort}\n`);
    running.add(standbyDir);
    await asPostgres(dir, 'pg_ctl', ['-w', '-D', standbyDir, '-l', standbyLog, 'start']);
    const inRecovery = await withClient(
      standbyUrl,
      async (c) => (await c.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]?.r,
    );
    if (inRecovery !== true) throw new Error('the standby is up but not in recovery');
  } catch (err) {
    const error = await withLogs(err);
    await stop();
    throw error;
  }

  return {
    primaryUrl,
    standbyUrl,
    pauseReplay: () =>
      withClient(standbyUrl, async (c) => {
        await c.query('SELECT pg_wal_replay_pause()');
        const deadline = Date.now() + REPLAY_TIMEOUT_MS;
        for (;;) {
          const { rows } = await c.query<{ state: string }>('SELECT pg_get_wal_replay_pause_state() AS state');
          if (rows[0]?.state === 'paused') return;
          if (Date.now() > deadline) throw await withLogs(new Error(`replay did not pause (state ${rows[0]?.state})`));
          await sleep(POLL_MS);
        }
      }),
    resumeReplay: () =>
      withClient(standbyUrl, async (c) => {
        await c.query('SELECT pg_wal_replay_resume()');
      }),
    waitForReplay: async () => {
      const target = await withClient(
        primaryUrl,
        async (c) => (await c.query<{ lsn: string }>('SELECT pg_current_wal_lsn() AS lsn')).rows[0]!.lsn,
      );
      await withClient(standbyUrl, async (c) => {
        const deadline = Date.now() + REPLAY_TIMEOUT_MS;
        for (;;) {
          const { rows } = await c.query<{ replayed: string | null; done: boolean | null }>(
            'SELECT pg_last_wal_replay_lsn() AS replayed, pg_last_wal_replay_lsn() >= $1::pg_lsn AS done',
            [target],
          );
          if (rows[0]?.done === true) return;
          if (Date.now() > deadline) {
            throw await withLogs(new Error(`standby replayed only to ${rows[0]?.replayed} of ${target} after ${REPLAY_TIMEOUT_MS} ms`));
          }
          await sleep(POLL_MS);
        }
      });
    },
    stop,
  };
}
