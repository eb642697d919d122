import cors from '@fastify/cors';
import Fastify, { LogController, type FastifyInstance, type FastifyRequest } from 'fastify';
import { AnswerCaches } from './cache/answer-caches.js';
import { createAuthenticator } from './auth/authenticate.js';
import { createJwtVerifier } from './auth/jwt.js';
import type { DestinationStream } from 'pino';
import type { AppConfig } from './config.js';
import { corsOptions } from './http/cors.js';
import {
  clientErrorHandler,
  frameworkErrorHandler,
  installErrorHandling,
  installServerErrorHandling,
  type AnsweredWithoutHooks,
} from './http/errors.js';
import { COMMON_HEADERS } from './http/common-headers.js';
import { AUTH_REFUSALS, bearerAuthentication, rightsNow } from './http/auth.js';
import { installContinueOnRead } from './http/expect-continue.js';
import { registerOpenApi } from './http/openapi.js';
import { healthRoutes } from './http/routes/health.js';
import { installJsonBodies } from './http/json-bodies.js';
import { ApiError } from './http/error-codes.js';
import { PlantListing } from './http/plant-listing.js';
import { createRateLimiter, createWriteBudget } from './http/rate-limit.js';
import { RepliesAfterPoll } from './http/replies-after-poll.js';
import { inSendingOrder } from './http/pipelined-requests.js';
import { installHeadAnswerLengths } from './http/head-answers.js';
import { plantRoutes } from './http/routes/plants.js';
import { plantWriteRoutes } from './http/routes/plant-writes.js';
import { plantAccessRoutes } from './http/routes/plant-access.js';
import { onePlantRoutes } from './http/routes/one-plant.js';
import { BODY_LIMIT } from './http/routes/protected.js';
import { parseQueryString, strictValidatorCompiler } from './http/request-validation.js';
import { lazyChildLogger, loggerOptions } from './logger.js';
import type { Metrics } from './metrics/metrics.js';
import type { Store } from './store/store.js';
import { DISPATCHER_DEFAULTS, WebhookDispatcher, type DispatcherOptions } from './webhooks/dispatcher.js';

declare module 'fastify' {
  interface FastifyInstance {
    /** This process's Prometheus metrics, or null when they are off (`--metrics-port` unset). */
    metrics: Metrics | null;
  }
}

export interface AppOptions {
  config: AppConfig;
  store: Store;
  /** Where JSON logs go (stdout by default); tests pass a stream to read them. */
  logStream?: DestinationStream;
  /** How webhook deliveries are paced (tests shorten the defaults). */
  webhooks?: Partial<DispatcherOptions>;
}

/**
 * The one factory of the HTTP application, used by the server, the CLI and the tests alike. The caller owns
 * the store: it opens it before and closes it after the app.
 */
export async function buildApp({ config, store, logStream, webhooks }: AppOptions): Promise<FastifyInstance> {
  // Off by default: then the metrics library is not even loaded and no hook is added.
  const metrics = config.metrics ? new (await import('./metrics/metrics.js')).Metrics(store, AUTH_REFUSALS) : null;
  const app = createFastify(config, logStream, metrics?.answeredWithoutHooks);
  installMetrics(app, metrics);
  installRequestChecks(app, config.http, installErrorHandling(app));
  installServerErrorHandling(app.server, metrics?.answeredWithoutHooks);
  installHeadAnswerLengths(app);
  installContinueOnRead(app);
  // Off unless configured: without it a browser page from another origin cannot read any answer.
  if (config.corsOrigins.length > 0) await app.register(cors, corsOptions(config.corsOrigins));
  await registerOpenApi(app);
  await app.register(healthRoutes, { health: store.health });
  await registerPlantRoutes(app, config, store, metrics);
  deliverWebhooks(app, store, {
    leaseMs: config.webhookLeaseSeconds * 1000,
    allowPrivateTargets: config.webhookAllowPrivate,
    ...(metrics ? { onAttempt: metrics.webhookAttempt } : {}),
    ...webhooks,
  });
  return app;
}

/** The new-plant webhook's deliveries run in the background of every serving process, from ready to close. */
function deliverWebhooks(app: FastifyInstance, store: Store, options: Partial<DispatcherOptions> = {}): void {
  const dispatcher = new WebhookDispatcher(store.webhooks, app.log, { ...DISPATCHER_DEFAULTS, ...options });
  // A new plant's event is on its way as soon as the change feed has its commit, from whichever writer.
  store.changes.subscribe((batch) => {
    if (batch === 'everything' || batch.some((change) => change.table === 'plants')) dispatcher.nudge();
  });
  app.addHook('onReady', (done) => {
    // A feed follows the log from the first request that asks it; the dispatcher asks now, so that an instance no
    // client calls yet still hears of other writers' commits at once.
    store.changes.sync();
    dispatcher.start();
    done();
  });
  app.addHook('onClose', async () => dispatcher.stop());
}

/** `answered`: told of the answers that Fastify's hooks never see (errors.ts), when metrics count them. */
function createFastify(config: AppConfig, logStream: DestinationStream | undefined, answered?: AnsweredWithoutHooks): FastifyInstance {
  const limits = config.http;
  const app = Fastify({
    logger: loggerOptions(config.logLevel, logStream),
    logController: new LogController({ disableRequestLogging: !config.logRequests }),
    childLoggerFactory: lazyChildLogger,
    clientErrorHandler: clientErrorHandler(answered),
    frameworkErrors: frameworkErrorHandler(answered),
    // Draining on SIGTERM: in-flight and already-arrived requests complete (with Connection: close);
    // Fastify's own closing reply would not be the contract's Error body.
    return503OnClosing: false,
    // Slow and oversized clients (OWASP API4). Node checks the two timeouts only every
    // connectionsCheckingInterval (30 s by default), so that is tied to the headers timeout.
    http: {
      maxHeaderSize: limits.maxHeaderBytes,
      headersTimeout: limits.headersTimeoutMs,
      connectionsCheckingInterval: Math.min(1000, Math.max(50, Math.floor(limits.headersTimeoutMs / 4))),
      // Refused by the onRequest hook below instead, with the Error body.
      requireHostHeader: false,
    },
    requestTimeout: limits.requestTimeoutMs,
    keepAliveTimeout: limits.keepAliveTimeoutMs,
    bodyLimit: BODY_LIMIT,
    // A user or group name in a path (/plants/{id}/access/users/{name}) may be as long as the URL limit allows. The
    // router refuses a longer parameter itself, with a 400 that echoes it, so its bound is one no URL Node reads
    // can reach: a longer URL is the onRequest check's 414.
    routerOptions: { maxParamLength: Math.max(limits.maxUrlBytes, limits.maxHeaderBytes), querystringParser: parseQueryString },
  });
  // Further connections are closed by Node as soon as they are accepted.
  app.server.maxConnections = limits.maxConnections;
  // Node keeps the first 2000 header lines and drops the rest unsaid, where a second Host, Authorization or
  // If-Match would hide from the checks that refuse it. The header size limit bounds them instead.
  app.server.maxHeadersCount = 0;
  app.decorateRequest('viewer', null);
  app.decorateRequest('bearerToken', null);
  app.decorateRequest('pageAhead', null);
  // Bodies are JSON only: Fastify would otherwise parse text/plain as a string, a bad body instead of a 415.
  app.removeContentTypeParser('text/plain');
  installJsonBodies(app);
  app.setValidatorCompiler(strictValidatorCompiler);
  return app;
}

/**
 * The headers every answer carries, set as the request arrives (with the checks every request passes first, and
 * the order of pipelined requests): they stay through errors, and a later
 * reply.header overrides them (the docs' static files set their own cache-control). An onSend hook would do the
 * same at the end, but any onSend hook makes Fastify run its hook machinery on every response. Before CORS, so
 * that a preflight answer carries them too. Callback style: a promise per request shows in profiles.
 */
function installRequestChecks(app: FastifyInstance, limits: AppConfig['http'], unrouted: (request: FastifyRequest) => ApiError): void {
  app.addHook('onRequest', (request, reply, done) => {
    reply.headers(COMMON_HEADERS);
    // HTTP/1.1 requires Host (RFC 9112 §3.2); Node's own refusal would be a bare 400 without the Error body.
    const host = request.headers.host;
    if (host === undefined) {
      if (request.raw.httpVersion === '1.1') return done(new ApiError('bad_request', 'An HTTP/1.1 request must have a Host header'));
    } else if (!HOST.test(host) || hostLines(request.raw.rawHeaders) > 1) {
      // Also RFC 9112 §3.2: Node keeps the first of several, where a proxy in front may have read another.
      return done(new ApiError('bad_request', 'The request must have one Host header, a host and an optional port'));
    }
    if (request.raw.url!.length > limits.maxUrlBytes) {
      return done(new ApiError('uri_too_long', `The request target is longer than ${limits.maxUrlBytes} bytes`));
    }
    // A 404 or 405 before the body is read: a body no route takes (bad JSON, over the size limit) is no reason
    // to hide that the path or the method is wrong.
    if (request.is404) return done(unrouted(request));
    inSendingOrder(request, reply, done);
  });
}

/** A Host header's value (RFC 9110 §7.2): uri-host [ ":" port ], or empty when the target has no authority. */
const HOST = /^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9\-._~!$&'()*+,;=%]*)(?::[0-9]*)?$/;

/** How many Host lines a request has: a loop of length checks, as few requests have more than a handful of lines. */
function hostLines(rawHeaders: string[]): number {
  let lines = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    if (name.length === 4 && (name === 'Host' || name === 'host' || name.toLowerCase() === 'host')) lines++;
  }
  return lines;
}

/** The metrics' one per-request hook, when they are on. */
function installMetrics(app: FastifyInstance, metrics: Metrics | null): void {
  app.decorate('metrics', metrics);
  if (metrics) {
    app.addHook('onResponse', metrics.onResponse);
    app.addHook('onClose', (_instance, done) => {
      metrics.close();
      done();
    });
  }
}

/** `GET`, `POST` and `DELETE /plants`, each plant's access, and what they stand on: the caches, the authenticator (tokens and JWTs), the rate limiter, the listing. */
async function registerPlantRoutes(app: FastifyInstance, config: AppConfig, store: Store, metrics: Metrics | null): Promise<void> {
  const jwt = config.jwt ? { config: config.jwt, verifier: createJwtVerifier(config.jwt) } : undefined;
  const caches = new AnswerCaches(store.changes, config.cache);
  const authenticator = createAuthenticator(
    store.credentials,
    caches,
    jwt,
    metrics ? { tokens: metrics.caches.tokens, users: metrics.caches.users } : {},
  );
  app.addHook('onClose', async () => authenticator.close());
  // Fetch the provider's keys before the first request; if it is down now, the first JWT retries it.
  app.addHook('onReady', async () => {
    if (jwt && !(await jwt.verifier.warmUp())) app.log.warn('JWKS not reachable at start; it is fetched again on demand');
  });
  const limiter = createRateLimiter(config.rateLimit, { url: config.redisUrl, prefix: config.redisKeyPrefix }, app.log);
  if (limiter) {
    app.addHook('onReady', async () => {
      if (!(await limiter.ready())) app.log.warn('Redis not reachable at start; requests are served without rate limiting until it is');
    });
    app.addHook('onClose', async () => limiter.close());
  }
  const listing = new PlantListing(store.listing, caches, config.listings, metrics?.caches.pages);
  app.addHook('onClose', (_instance, done) => {
    listing.close();
    done();
  });
  // One hook for every protected route: a second closure of it makes V8 compile the listing's hot path without
  // the closure's context (see docs/performance.md).
  const authenticate = bearerAuthentication(authenticator, limiter, metrics?.authRefused);
  await app.register(plantRoutes, {
    listing,
    authenticate,
    rightsNow: (token: string) => rightsNow(authenticator, token),
    replies: new RepliesAfterPoll(),
  });
  const writeBudget = createWriteBudget(config.writeRateLimit, { url: config.redisUrl, prefix: config.redisKeyPrefix }, app.log);
  if (writeBudget) app.addHook('onClose', async () => writeBudget.close());
  await app.register(plantWriteRoutes, { plants: store.plants, authenticate, writeBudget });
  await app.register(onePlantRoutes, { plants: store.plants, authenticate, writeBudget });
  await app.register(plantAccessRoutes, { access: store.access, authenticate, writeBudget });
}
