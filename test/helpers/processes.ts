import assert from 'node:assert/strict';
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The built `plantstore` bin: the CLI is tested the way users run it, as a child process. */
export const BIN = fileURLToPath(new URL('../../dist/cli/main.js', import.meta.url));

export interface CliRun {
  code: number;
  stdout: string;
  stderr: string;
}

export function runCli(db: string, args: string[], stdin?: string, env: NodeJS.ProcessEnv = {}): Promise<CliRun> {
  return new Promise((resolve) => {
    const child = execFile(
      process.execPath,
      [BIN, '--db', db, ...args],
      { env: { ...process.env, PLANTSTORE_DB: '', ...env }, maxBuffer: 256 * 1024 * 1024 },
      (error, stdout, stderr) => resolve({ code: error ? Number(error.code ?? 1) : 0, stdout, stderr }),
    );
    // A child that exits without reading all its input (a failed command) must not crash the test with EPIPE.
    child.stdin!.on('error', () => {});
    if (stdin !== undefined) child.stdin!.end(stdin);
  });
}

export interface ServeProcess {
  child: ChildProcess;
  url: string;
  output: () => string;
  /** Sends SIGTERM and resolves with the exit code. */
  stop(): Promise<number | null>;
}

/** Starts `plantstore serve` on a free port and resolves once it listens. */
export function spawnServe(db: string, extraArgs: string[] = [], env: NodeJS.ProcessEnv = {}): Promise<ServeProcess> {
  const child = spawn(process.execPath, [BIN, '--db', db, 'serve', '--port', '0', '--log-level', 'info', ...extraArgs], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, PLANTSTORE_DB: '', ...env },
  });
  let out = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return new Promise((resolve, reject) => {
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      const match = /Server listening at (http:\/\/127\.0\.0\.1:\d+)/.exec(out);
      if (match) {
        resolve({
          child,
          url: match[1]!,
          output: () => out,
          stop: async () => {
            if (child.exitCode === null) child.kill('SIGTERM');
            return exited;
          },
        });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    void exited.then(() => reject(new Error(`serve exited before listening:\n${out}`)));
  });
}

/** Starts `plantstore serve` on the database, checks that `token` lists exactly `expected`, and that it stops with 0. */
export async function assertServes(db: string, token: string, expected: unknown): Promise<void> {
  const server = await spawnServe(db);
  try {
    const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), expected);
  } finally {
    assert.equal(await server.stop(), 0);
  }
}
