import cluster from 'node:cluster';
import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config, ConfigInput } from './config.js';
import { tuneServingProcess } from './serving-process.js';
import { openStore } from './store/open-store.js';
import type { Store } from './store/store.js';

export interface RunningServer {
  app: FastifyInstance;
  store: Store;
  url: string;
  /** The admin listener's `/metrics` URL, when metrics are on (a cluster worker has none: the primary serves them). */
  metricsUrl: string | undefined;
  /** Stops accepting connections, lets in-flight requests finish, then closes the database. */
  stop(): Promise<void>;
}

/**
 * How long idle keep-alive connections stay open once shutdown begins. Closing an idle connection races with
 * a client that is sending on it right then (the client gets a reset, not a response); kept open a moment,
 * any request that arrives is answered with `Connection: close`, so busy clients move off cleanly.
 */
const IDLE_LINGER_MS = 1_000;

/** How often an embedded database's file is checked for being removed or replaced under the server. */
const FILE_CHECK_MS = 500;

/** How often idle connections are closed after the linger, while requests that arrived before shutdown finish. */
const IDLE_CLOSE_EVERY_MS = 100;

/**
 * `app.close()` stops listening at once and waits for open connections; Node would also drop idle
 * keep-alive connections at that instant. That is postponed by `lingerMs`, then done, and done again until the
 * close is over: a request that arrived before shutdown began is answered keep-alive (Fastify says
 * `Connection: close` only to those arriving after), and its connection, idle once it is answered, would
 * otherwise stay open and hold the close to the end of the grace period.
 *
 * Node stops applying the headers timeout once the server closes, and a connection whose request has begun is
 * not idle: one that sent half a request (a slow or stalled client) held the close to the end of the grace period.
 * Every `headersTimeoutMs` meanwhile, a connection with no answer under way is cut: its request, had it come
 * whole within the timeout, would have an answer under way by then.
 */
async function closeLingering(app: FastifyInstance, lingerMs: number, headersTimeoutMs: number, connections: Set<Socket>): Promise<void> {
  const server = app.server;
  const closeIdle = server.closeIdleConnections.bind(server);
  server.closeIdleConnections = () => {};
  let closing: NodeJS.Timeout | undefined;
  const timer = setTimeout(() => {
    server.closeIdleConnections = closeIdle;
    closeIdle();
    closing = setInterval(closeIdle, IDLE_CLOSE_EVERY_MS);
  }, lingerMs);
  const cutStalled = setInterval(
    () => {
      for (const socket of connections) if (!(socket as { _httpMessage?: unknown })._httpMessage) socket.destroy();
    },
    Math.max(headersTimeoutMs, lingerMs),
  );
  try {
    await app.close();
  } finally {
    clearTimeout(timer);
    clearInterval(closing);
    clearInterval(cutStalled);
    server.closeIdleConnections = closeIdle;
  }
}

/** Opens the store (unless given one), builds the app and listens, with the admin listener when metrics are on. */
export async function startServer(
  { store: storeConfig, server: config, app: appConfig }: Config,
  existingStore?: Store,
): Promise<RunningServer> {
  const store = existingStore ?? (await openStore(storeConfig));
  let built: FastifyInstance | undefined;
  let admin: { app: FastifyInstance; url: string } | undefined;
  const connections = new Set<Socket>();
  try {
    const app = (built = await buildApp({ config: appConfig, store }));
    store.health.followFile?.(FILE_CHECK_MS, (event, detail) =>
      event === 'reopened'
        ? app.log.info({ event }, detail)
        : app.log.error({ event }, `${detail}; answering 503 until a database file is there again`),
    );
    store.changes.report?.((event, detail) =>
      event === 'following' ? app.log.info({ event: `changes_${event}` }, detail) : app.log.warn({ event: `changes_${event}` }, detail),
    );
    // A worker's registry goes to the primary before the first request can be counted in it.
    if (app.metrics && cluster.isWorker) app.metrics.reportToPrimary();
    app.server.on('connection', (socket: Socket) => {
      connections.add(socket);
      socket.once('close', () => connections.delete(socket));
    });
    await app.listen({ host: config.host, port: config.port });
    const metrics = app.metrics;
    if (config.metrics && metrics && !cluster.isWorker) {
      const { startMetricsListener } = await import('./http/metrics-listener.js');
      admin = await startMetricsListener(config.metrics, () => metrics.scrape());
      app.log.info({ url: admin.url }, `metrics listening at ${admin.url}`);
    }
  } catch (err) {
    await built?.close();
    await store.close();
    throw err;
  }
  const app = built;
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  let stopping: Promise<void> | undefined;
  return {
    app,
    store,
    url: `http://${host}:${port}`,
    metricsUrl: admin?.url,
    stop() {
      stopping ??= (async () => {
        try {
          await admin?.app.close();
          await closeLingering(
            app,
            Math.min(IDLE_LINGER_MS, (config.shutdownGraceSeconds * 1000) / 4),
            appConfig.http.headersTimeoutMs,
            connections,
          );
        } finally {
          await store.close();
        }
      })();
      return stopping;
    },
  };
}

/**
 * The signals that stop a server after draining it. SIGHUP is one: a terminal that closes sends it to the demo
 * started in it, and with no handler it killed the process with requests in flight. No configuration is read again
 * on it, as some daemons do: the settings are flags and environment, which a running process cannot re-read.
 */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;

/**
 * The serving process's entry: tunes the process (serving-process.ts), starts the server and runs until SIGTERM,
 * SIGINT or SIGHUP, then drains within the grace period and exits 0 (1 if the grace ran out). Resolves with the running server.
 */
export async function runServer(config: Config, existingStore?: Store): Promise<RunningServer> {
  tuneServingProcess();
  let server: RunningServer | undefined;
  let signalled: NodeJS.Signals | undefined;
  const drain = (running: RunningServer, signal: NodeJS.Signals) => {
    running.app.log.info({ signal }, 'shutting down: draining in-flight requests');
    running.stop().then(
      () => {
        running.app.log.info('stopped');
        process.exit(0);
      },
      (err: unknown) => {
        running.app.log.error({ err }, 'error while stopping');
        process.exit(1);
      },
    );
  };
  const onSignal = (signal: NodeJS.Signals) => {
    // One drain, whichever signals come: a closed terminal sends SIGHUP to a cluster's workers as well as the
    // primary's SIGTERM.
    if (signalled !== undefined) return;
    signalled = signal;
    const timer = setTimeout(() => {
      server?.app.log.error('shutdown grace period ran out; exiting with requests still open');
      process.exit(1);
    }, config.server.shutdownGraceSeconds * 1000);
    timer.unref();
    if (server) drain(server, signal);
  };
  // In place before the start: the server listens (and says so) a moment before the start is over, and a
  // SIGTERM in that moment killed the process undrained. One that comes during the start stops it once started.
  // Kept for every signal, not once: a second Ctrl-C or SIGTERM would otherwise kill the process undrained.
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);
  server = await startServer(config, existingStore);
  if (signalled) drain(server, signalled);
  return server;
}

/**
 * `serve --workers N`: a primary process that forks N HTTP workers sharing the port (node:cluster),
 * replaces any that die, and on SIGTERM, SIGINT or SIGHUP asks each to drain and waits for them. The schema is
 * migrated once here, before any worker starts, so workers never race on it.
 */
export async function runCluster(config: Config, input: ConfigInput): Promise<void> {
  const { pino } = await import('pino');
  const { fileURLToPath } = await import('node:url');
  const { loggerOptions } = await import('./logger.js');
  const { stream, ...options } = loggerOptions(config.server.logLevel);
  const log = pino(options, stream);
  let stopping = false;
  let exitCode = 0;
  const onSignal = (signal: NodeJS.Signals) => {
    // Once: a worker drains on the first SIGTERM it is sent.
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'shutting down: draining workers');
    for (const worker of Object.values(cluster.workers ?? {})) worker?.process.kill('SIGTERM');
    setTimeout(
      () => {
        log.error('shutdown grace period ran out');
        process.exit(1);
      },
      (config.server.shutdownGraceSeconds + 1) * 1000,
    ).unref();
  };
  // In place before anything starts: until a process listens for a signal, the signal kills it, and the line
  // saying the workers started is read (and answered with SIGTERM) a moment before the code after it runs.
  for (const signal of STOP_SIGNALS) process.on(signal, onSignal);

  await (await openStore(config.store)).close();

  if (config.server.metrics) {
    // The primary serves every worker's metrics, summed; the workers open no admin port of their own.
    const { clusterScraper, startMetricsListener } = await import('./http/metrics-listener.js');
    const { url } = await startMetricsListener(config.server.metrics, clusterScraper());
    log.info({ url }, `metrics listening at ${url}`);
  }

  cluster.setupPrimary({ exec: fileURLToPath(new URL('./worker.js', import.meta.url)), args: [] });
  // The flags, not the validated result: each worker reads them (with the environment it inherits) and
  // validates them again, as the primary did.
  const workerEnv = { PLANTSTORE_WORKER_INPUT: JSON.stringify({ ...input, workers: 1 }) };
  // Until a worker has listened, a worker's death is the configuration's (a port taken or refused), which a
  // replacement would meet again: the primary stops, as `serve` without workers does. After that, workers are
  // replaced.
  let served = false;
  cluster.once('listening', () => {
    served = true;
  });
  const startedAt = new Map<number, number>();
  // Node drops a worker from cluster.workers only once it has both exited and disconnected; its 'exit' can come
  // first, so the last worker may still be listed here. Dead is what counts.
  const exitOnceAllStopped = () => {
    if (!Object.values(cluster.workers ?? {}).every((w) => w === undefined || w.isDead())) return;
    log.info('all workers stopped');
    // Exit only once the line is written: process.exit does not wait for a pending stdout write.
    log.flush(() => process.exit(exitCode));
  };
  const fork = () => {
    // A replacement due after a pause is not started once the primary stops: nobody would ask it to drain. The
    // primary ends once the others have (with none left, now: no worker's exit would tell it).
    if (stopping) return exitOnceAllStopped();
    const worker = cluster.fork(workerEnv);
    startedAt.set(worker.id, Date.now());
  };
  cluster.on('exit', (worker, code, signal) => {
    const lived = Date.now() - (startedAt.get(worker.id) ?? 0);
    startedAt.delete(worker.id);
    if (!stopping && !served) {
      stopping = true;
      exitCode = 1;
      log.error({ workerPid: worker.process.pid, code, signal }, 'a worker exited before any could listen; stopping (its error is above)');
      for (const other of Object.values(cluster.workers ?? {})) if (other !== worker) other?.process.kill('SIGTERM');
    }
    if (stopping) {
      // A worker that could not drain in its grace period exits 1, as `serve` without workers does; so does the primary.
      // One ended by the SIGTERM this primary sent had no handler in place yet: it was still starting, serving nothing.
      if (code !== 0 && signal !== 'SIGTERM') exitCode = 1;
      exitOnceAllStopped();
      return;
    }
    // A worker that dies at once (the database down) is restarted after a pause, not in a tight loop.
    const delay = lived < 2_000 ? 1_000 : 0;
    log.warn({ workerPid: worker.process.pid, code, signal, restartInMs: delay }, 'worker exited; starting a replacement');
    setTimeout(fork, delay);
  });
  if (stopping) {
    // Signalled while the schema was migrated or the metrics listener started: no worker to drain.
    log.info('stopped before any worker started');
    log.flush(() => process.exit(0));
    return;
  }
  for (let i = 0; i < config.server.workers; i++) fork();
  log.info({ workers: config.server.workers }, 'started workers');
}
