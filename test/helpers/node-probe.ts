import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

/** A built module of the service (under dist/), as a URL a probe can import. */
export const distUrl = (path: string): string => pathToFileURL(join(import.meta.dirname, '../../dist', path)).href;

/**
 * Runs `source` as an ES module in a child Node started with V8 `flags` (test hooks, traces), so that what it
 * does to V8's state cannot leak into the test process; returns its stdout once it has exited 0.
 */
export function runProbe(flags: readonly string[], source: string): string {
  const run = spawnSync(process.execPath, [...flags, '--input-type=module', '-e', source], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(run.status, 0, run.stderr);
  return run.stdout;
}

/**
 * Probe source that starts a Plant Store server on the SQLite file `db` as `server`, silent, on a free port,
 * through the serving process's entry (runServer), as `plantstore serve` does.
 */
export const startServerSource = (db: string): string => `
  const { loadConfig } = await import(${JSON.stringify(distUrl('config.js'))});
  const { runServer } = await import(${JSON.stringify(distUrl('server.js'))});
  const server = await runServer(loadConfig({ db: ${JSON.stringify(db)}, host: '127.0.0.1', port: 0, logLevel: 'silent' }));`;
