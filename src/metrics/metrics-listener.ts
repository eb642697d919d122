import Fastify, { type FastifyInstance } from 'fastify';
import type { MetricsListen } from '../config.js';
import { clientErrorHandler, frameworkErrorHandler, installErrorHandling } from '../http/errors.js';
import { COMMON_HEADERS } from '../http/common-headers.js';

export type Scrape = () => Promise<{ contentType: string; body: string }>;

/**
 * The admin listener: `GET /metrics` in the Prometheus text format, on its own host and port so that it is
 * never reachable through the public one. Anything else is a 404 with the usual Error body.
 */
export async function startMetricsListener(listen: MetricsListen, scrape: Scrape): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify({ logger: false, clientErrorHandler, frameworkErrors: frameworkErrorHandler });
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
