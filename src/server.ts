import type { FastifyInstance } from 'fastify';
import { buildApp } from './app.js';
import type { Config } from './config.js';
import { openStore } from './store/open-store.js';
import type { Store } from './store/store.js';

export interface RunningServer {
  app: FastifyInstance;
  store: Store;
  url: string;
  /** Stops accepting connections, lets in-flight requests finish, then closes the database. */
  stop(): Promise<void>;
}

export async function startServer(config: Config, existingStore?: Store): Promise<RunningServer> {
  const store = existingStore ?? (await openStore(config.db));
  let app: FastifyInstance;
  try {
    app = await buildApp({ config, store });
    await app.listen({ host: config.host, port: config.port });
  } catch (err) {
    await store.close();
    throw err;
  }
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : config.port;
  const host = config.host.includes(':') ? `[${config.host}]` : config.host;
  let stopping: Promise<void> | undefined;
  return {
    app,
    store,
    url: `http://${host}:${port}`,
    stop() {
      stopping ??= (async () => {
        try {
          await app.close();
        } finally {
          await store.close();
        }
      })();
      return stopping;
    },
  };
}

/** Runs until SIGTERM or SIGINT, then drains within the grace period and exits 0 (1 if the grace ran out). */
export async function runServer(config: Config, existingStore?: Store): Promise<void> {
  const server = await startServer(config, existingStore);
  const onSignal = (signal: NodeJS.Signals) => {
    server.app.log.info({ signal }, 'shutting down: draining in-flight requests');
    const timer = setTimeout(() => {
      server.app.log.error('shutdown grace period ran out; exiting with requests still open');
      process.exit(1);
    }, config.shutdownGraceSeconds * 1000);
    timer.unref();
    server.stop().then(
      () => {
        server.app.log.info('stopped');
        process.exit(0);
      },
      (err: unknown) => {
        server.app.log.error({ err }, 'error while stopping');
        process.exit(1);
      },
    );
  };
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
}
