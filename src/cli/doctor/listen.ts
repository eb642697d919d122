import { createServer } from 'node:net';
import type { ServerConfig } from '../../config.js';
import { fail, ok, type Check } from './check.js';

/** Binds `host:port` for a moment: what `serve` will do, so its failure shows here first. */
function tryListen(host: string, port: number): Promise<NodeJS.ErrnoException | undefined> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    server.listen({ host, port, exclusive: true }, () => server.close(() => resolve(undefined)));
  });
}

const FIX: Record<string, string> = {
  EADDRINUSE: 'stop the process that holds it, or choose another port',
  EACCES: 'ports below 1024 need privileges: choose a port above 1024',
  EADDRNOTAVAIL: 'use an address of this machine (127.0.0.1, 0.0.0.0 for all)',
};

/** Why `serve` could not listen on `host:port` now, and what to do; undefined if it could. */
export async function listenProblem(host: string, port: number): Promise<{ why: string; fix: string } | undefined> {
  if (port === 0) return undefined;
  const err = await tryListen(host, port);
  if (err === undefined) return undefined;
  const why = err.code === 'EADDRINUSE' ? 'is in use by another process' : `cannot be listened on (${err.code ?? err.message})`;
  return { why: `${host}:${port} ${why}`, fix: FIX[err.code ?? ''] ?? 'check the address' };
}

async function listenCheck(check: string, host: string, port: number, flag: string): Promise<Check> {
  const problem = await listenProblem(host, port);
  if (problem === undefined) return ok(check, port === 0 ? `${host}: any free port` : `${host}:${port} is free`);
  return fail(check, problem.why, `${problem.fix} (${flag})`);
}

/** The public listener and, when on, the metrics listener: can `serve` listen where it is told to? */
export async function listenChecks(config: ServerConfig): Promise<Check[]> {
  const checks = [await listenCheck('listen', config.host, config.port, '--host, --port')];
  if (config.metrics)
    checks.push(await listenCheck('metrics listen', config.metrics.host, config.metrics.port, '--metrics-host, --metrics-port'));
  return checks;
}
