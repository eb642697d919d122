import Fastify, { LogController, type FastifyInstance } from 'fastify';
import { createAuthenticator } from './access/authenticate.js';
import { createJwtVerifier } from './access/jwt.js';
import type { DestinationStream } from 'pino';
import type { Config } from './config.js';
import { clientErrorHandler, frameworkErrorHandler, installErrorHandling } from './http/errors.js';
import { registerOpenApi, VERSION_HEADER } from './http/openapi.js';
import { healthRoutes } from './http/routes/health.js';
import { PlantListing } from './http/plant-listing.js';
import { plantRoutes } from './http/routes/plants.js';
import { strictValidatorCompiler } from './http/strict-query.js';
import { loggerOptions } from './logger.js';
import type { Metrics } from './metrics/metrics.js';
import type { Store } from './store/store.js';
import { VERSION } from './version.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** This process's Prometheus metrics, or null when they are off (`--metrics-port` unset). */
    metrics: Metrics | null;
  }
}

export interface AppOptions {
  config: Config;
  store: Store;
  /** Where JSON logs go (stdout by default); tests pass a stream to read them. */
  logStream?: DestinationStream;
}

/**
 * The one factory of the HTTP application, used by the server, the CLI and the tests alike. The caller owns
 * the store: it opens it before and closes it after the app.
 */
export async function buildApp({ config, store, logStream }: AppOptions): Promise<FastifyInstance> {
  const app = Fastify({
    logger: loggerOptions(config.logLevel, logStream),
    logController: new LogController({ disableRequestLogging: !config.logRequests }),
    clientErrorHandler,
    frameworkErrors: frameworkErrorHandler,
    // Draining on SIGTERM: in-flight and already-arrived requests complete (with Connection: close);
    // Fastify's own closing reply would not be the contract's Error body.
    return503OnClosing: false,
    requestTimeout: 30_000,
    bodyLimit: 64 * 1024,
  });

  app.decorateRequest('viewer', null);
  app.setValidatorCompiler(strictValidatorCompiler);
  // Callback style, not async: this runs on every response, and a promise per request shows in profiles.
  app.addHook('onSend', (_request, reply, payload, done) => {
    reply.header('x-content-type-options', 'nosniff').header(VERSION_HEADER, VERSION);
    done(null, payload);
  });
  installErrorHandling(app);

  // Off by default: then the metrics library is not even loaded and no hook is added.
  const metrics = config.metrics ? new (await import('./metrics/metrics.js')).Metrics(store) : null;
  app.decorate('metrics', metrics);
  if (metrics) {
    app.addHook('onResponse', metrics.onResponse);
    app.addHook('onClose', (_instance, done) => {
      metrics.close();
      done();
    });
  }

  await registerOpenApi(app);
  await app.register(healthRoutes, { store });
  const jwt = config.jwt ? { config: config.jwt, verifier: createJwtVerifier(config.jwt) } : undefined;
  const authenticator = createAuthenticator(store, jwt, config.cache, metrics ? { tokens: metrics.caches.tokens, users: metrics.caches.users } : {});
  app.addHook('onClose', async () => authenticator.close());
  // Fetch the provider's keys before the first request; if it is down now, the first JWT retries it.
  app.addHook('onReady', async () => {
    if (jwt && !(await jwt.verifier.warmUp())) app.log.warn('JWKS not reachable at start; it is fetched again on demand');
  });
  await app.register(plantRoutes, {
    listing: new PlantListing(store, config.cache, metrics?.caches.pages),
    authenticator,
    ...(metrics ? { onAuthRefused: metrics.authRefused } : {}),
  });
  return app;
}
