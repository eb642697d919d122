import { createServer, type AddressInfo } from 'node:net';
import type { ServerConfig } from '../../config.js';
import { VERSION_HEADER } from '../../http/common-headers.js';
import { fail, ok, type Check } from './check.js';

/** How long a running service has to answer the probe of a port in use. */
const PROBE_MS = 2_000;

/**
 * The version of the Plant Store answering `path` on `host:port`, if one does: every answer it gives, on either
 * listener, carries VERSION_HEADER, so the path tells which listener holds the port (each answers the other's
 * path with a 404). Undefined when something else holds the port, or nothing answers in time.
 */
async function runningPlantStore(host: string, port: number, path: string): Promise<string | undefined> {
  const address = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host.includes(':') ? `[${host}]` : host;
  try {
    const res = await fetch(`http://${address}:${port}${path}`, { signal: AbortSignal.timeout(PROBE_MS) });
    await res.body?.cancel();
    return res.ok ? (res.headers.get(VERSION_HEADER) ?? undefined) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Binds `host:port` for a moment: what `serve` will do, so its failure shows here first. Resolves to the port bound
 * (for 0, the one the system chose), or the error.
 */
function tryListen(host: string, port: number): Promise<number | NodeJS.ErrnoException> {
  return new Promise((resolve) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => resolve(err));
    server.listen({ host, port, exclusive: true }, () => {
      const bound = (server.address() as AddressInfo).port;
      server.close(() => resolve(bound));
    });
  });
}

const FIX: Record<string, string> = {
  EADDRINUSE: 'stop the process that holds it, or choose another port',
  EACCES: 'ports below 1024 need privileges: choose a port above 1024',
  EADDRNOTAVAIL: 'use an address of this machine (127.0.0.1, 0.0.0.0 for all)',
};

export interface ListenProblem {
  why: string;
  fix: string;
}

/** The port `serve` could listen on at `host:port` now (for 0, one the system has free), or why it could not and what to do. */
export async function listenablePort(host: string, port: number): Promise<number | ListenProblem> {
  const bound = await tryListen(host, port);
  if (typeof bound === 'number') return bound;
  const why = bound.code === 'EADDRINUSE' ? 'is in use by another process' : `cannot be listened on (${bound.code ?? bound.message})`;
  return { why: `${host}:${port} ${why}`, fix: FIX[bound.code ?? ''] ?? 'check the address' };
}

/** Why `serve` could not listen on `host:port` now, and what to do; undefined if it could. */
export async function listenProblem(host: string, port: number): Promise<ListenProblem | undefined> {
  if (port === 0) return undefined;
  const found = await listenablePort(host, port);
  return typeof found === 'number' ? undefined : found;
}

/** Whether `serve` can listen where told, or a Plant Store already does: doctor is run beside a live service too. */
async function listenCheck(check: string, host: string, port: number, flag: string, path: string): Promise<Check> {
  const problem = await listenProblem(host, port);
  if (problem === undefined) return ok(check, port === 0 ? `${host}: any free port` : `${host}:${port} is free`);
  const running = await runningPlantStore(host, port, path);
  if (running !== undefined) return ok(check, `${host}:${port} is served by a running Plant Store ${running}`);
  return fail(check, problem.why, `${problem.fix} (${flag})`);
}

/** The public listener and, when on, the metrics listener: can `serve` listen where it is told to? */
export async function listenChecks(config: ServerConfig): Promise<Check[]> {
  const checks = [await listenCheck('listen', config.host, config.port, '--host, --port', '/healthz')];
  if (config.metrics)
    checks.push(
      await listenCheck('metrics listen', config.metrics.host, config.metrics.port, '--metrics-host, --metrics-port', '/metrics'),
    );
  return checks;
}
