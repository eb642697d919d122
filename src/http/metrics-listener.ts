import Fastify, { type FastifyInstance } from 'fastify';
import type { MetricsListen } from '../config.js';
import { AggregatorRegistry } from 'prom-client';
import { COMMON_HEADERS } from './common-headers.js';
import { ApiError } from './error-codes.js';
import { clientErrorHandler, frameworkErrorHandler, installErrorHandling } from './errors.js';

export type Scrape = () => Promise<{ contentType: string; body: string }>;

/** How long a scrape's request may take to arrive: Prometheus's default scrape timeout is 10 s. */
const SCRAPE_TIMEOUT_MS = 10_000;

/**
 * The admin listener: `GET /metrics` in the Prometheus text format, on its own host and port so that it is
 * never reachable through the public one. Anything else is a 404 with the usual Error body.
 */
export async function startMetricsListener(listen: MetricsListen, scrape: Scrape): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({
    logger: false,
    clientErrorHandler: clientErrorHandler(),
    frameworkErrors: frameworkErrorHandler(),
    // A scrape is read again at the next interval: on close, an open one (or a connection that never sends its
    // request) is cut rather than waited for, which held the public port's drain for the whole grace period.
    forceCloseConnections: true,
    // Node checks the timeouts every 30 s by default, which would make 10 s up to 40.
    http: { headersTimeout: SCRAPE_TIMEOUT_MS, connectionsCheckingInterval: 1_000 },
    requestTimeout: SCRAPE_TIMEOUT_MS,
  });
  installErrorHandling(app);
  app.addHook('onRequest', (_request, reply, done) => {
    reply.headers(COMMON_HEADERS);
    done();
  });
  app.get('/metrics', async (_request, reply) => {
    const { contentType, body } = await scrape();
    reply.type(contentType);
    return body;
  });
  await app.listen({ host: listen.host, port: listen.port });
  const address = app.server.address();
  const port = typeof address === 'object' && address ? address.port : listen.port;
  const host = listen.host.includes(':') ? `[${listen.host}]` : listen.host;
  return { app, url: `http://${host}:${port}/metrics` };
}

/** In the `serve --workers` primary: every worker's metrics, summed (prom-client's aggregation rules). */
export function clusterScraper(): () => Promise<{ contentType: string; body: string }> {
  const aggregator = new AggregatorRegistry();
  return async () => {
    try {
      return { contentType: aggregator.contentType, body: await aggregator.clusterMetrics() };
    } catch {
      // prom-client waits 5 s for every connected worker; one that is still starting may not answer yet.
      throw new ApiError('unavailable', 'Not every worker answered for its metrics (one may be starting); retry');
    }
  };
}
