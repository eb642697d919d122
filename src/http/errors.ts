import { STATUS_CODES, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Duplex } from 'node:stream';
import type { FastifyError, FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { DomainError, type DomainErrorKind } from '../catalogue/errors.js';
import { COMMON_HEADERS, JSON_TYPE, MERGE_PATCH_TYPE, PATCH_TYPES } from './common-headers.js';
import { ApiError, type ErrorName } from './error-codes.js';

const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  return reply.code(error.status).headers(error.headers).type(JSON_TYPE).send(error.body);
}

const byStatus: Partial<Record<number, ErrorName>> = {
  400: 'bad_request',
  404: 'not_found',
  406: 'not_acceptable',
  408: 'request_timeout',
  412: 'static_file_changed',
  413: 'payload_too_large',
  414: 'uri_too_long',
  415: 'unsupported_media_type',
  416: 'range_not_satisfiable',
  429: 'rate_limited',
  431: 'headers_too_large',
  503: 'unavailable',
};

/** How long a client waits before it tries again when the database cannot be reached (or is locked too long). */
const UNAVAILABLE_RETRY_AFTER_SECONDS = 1;

const serviceUnavailable = (): ApiError =>
  new ApiError('unavailable', 'The service is temporarily unavailable; retry later', {
    'retry-after': String(UNAVAILABLE_RETRY_AFTER_SECONDS),
  });

/**
 * The answers a route gives to the store's refusals (DomainError) it can meet, by kind: each route names its own
 * codes (a create's conflict is plant_id_taken, an access change's invalid name invalid_parameter). A kind it
 * does not name keeps toApiError's answer: 503 for unavailable, 500 (a bug) for the others.
 */
export type RefusalAnswers = Partial<Record<Exclude<DomainErrorKind, 'unavailable'>, ErrorName>>;

/** `err` as the route's answer when it is a store refusal the route names an answer for; anything else unchanged. */
export function answerRefusal(err: unknown, answers: RefusalAnswers): unknown {
  const name = err instanceof DomainError && err.kind !== 'unavailable' ? answers[err.kind] : undefined;
  return name === undefined ? err : new ApiError(name, (err as Error).message);
}

/**
 * The refusal of a plant the caller may not change (the rule of catalogue/access-rule.ts): 403 to one who sees it,
 * saying what only its owner or an admin may do; to anyone else 404, the answer of no plant, which tells nothing.
 */
export function plantRefusal(outcome: 'hidden' | 'forbidden', id: number, onlyOwnerMay: string): ApiError {
  return outcome === 'forbidden'
    ? new ApiError('not_owner', `only the owner of plant ${id} or an admin may ${onlyOwnerMay}`)
    : new ApiError('plant_not_found', `no plant with id ${id}`);
}

/** Maps anything thrown while handling a request to exactly one catalogue entry. 5xx details stay in the log. */
export function toApiError(err: unknown, method?: string): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof DomainError && err.kind === 'unavailable') return serviceUnavailable();
  const status = (err as FastifyError).statusCode;
  // The body parser's refusals (not JSON, empty): what POST /plants documents as a bad body.
  if (status === 400 && (err as FastifyError).code?.startsWith('FST_ERR_CTP_')) return new ApiError('invalid_body', (err as Error).message);
  if (status === 415) {
    if (method === 'PATCH') {
      return new ApiError(
        'unsupported_media_type',
        `A change must be JSON Merge Patch: send it with Content-Type: ${MERGE_PATCH_TYPE} (or application/json)`,
        { 'accept-patch': PATCH_TYPES },
      );
    }
    return new ApiError('unsupported_media_type', 'The request body must be JSON: send it with Content-Type: application/json');
  }
  if (status !== undefined && status >= 400 && status < 500) {
    const name = byStatus[status] ?? 'bad_request';
    return new ApiError(name, (err as Error).message || (STATUS_CODES[status] ?? 'Bad request'));
  }
  if (status === 503) return serviceUnavailable();
  return new ApiError('internal', 'Internal server error');
}

/**
 * One place that turns every failure into the contract's Error body with `application/json`: route errors,
 * unknown paths (404), known paths with another method (405 with Allow), router-level URL errors, and
 * malformed HTTP that never reaches a route (written straight to the socket). Returns the answer to a request no
 * route takes, for the checks every request passes as it arrives.
 */
export function installErrorHandling(app: FastifyInstance): (request: FastifyRequest) => ApiError {
  app.setErrorHandler((err, request, reply) => {
    // The docs' file server refuses a path that climbs out of its folder (`/docs/static/%2e%2e/…`) with a bare 403;
    // no file is there, as for any other path under it.
    const refusedFile = (err as FastifyError).statusCode === 403 && !(err instanceof ApiError);
    const apiError = refusedFile ? notFound(request) : toApiError(err, request.method);
    // Shedding load (too many full listings at once) is the server working as meant: a warning, with no stack.
    if (apiError.errorName === 'busy') request.log.warn({ code: apiError.code }, 'request refused: too many full listings at once');
    else if (apiError.status >= 500) request.log.error({ err }, 'request failed');
    return sendError(reply, apiError);
  });

  // Methods by path, for 405 answers. Asking the router (hasRoute) instead would read the client's path as route
  // syntax: `/*.+` or `/a/:b(` make it throw, and `/docs/*` would match a pattern, not a path. A route with
  // parameters (`/plants/:id`) is kept as a pattern of whole segments, a wildcard route (`/docs/static/*`, the
  // docs' files) as a pattern of every path under its prefix.
  const methodsByPath = new Map<string, Set<string>>();
  const methodsByPattern = new Map<string, { pattern: RegExp; methods: Set<string> }>();
  const addMethods = (url: string, method: string | string[]) => {
    const byPattern = url.includes(':') || url.includes('*');
    const methods = (byPattern ? methodsByPattern.get(url)?.methods : methodsByPath.get(url)) ?? new Set<string>();
    for (const one of [method].flat()) methods.add(one);
    if (!byPattern) methodsByPath.set(url, methods);
    else methodsByPattern.set(url, { pattern: segmentsPattern(url), methods });
  };
  app.addHook('onRoute', (route) => {
    // A route of every path (the CORS plugin's `OPTIONS *`, which answers preflights and passes anything else on to
    // this handler) says nothing of which methods a path has: kept, it would be the first pattern every path matches.
    if (route.url === '*' || route.url === '/*') return;
    addMethods(route.url, route.method);
    // A plugin's `/` route (the docs page) is served at its prefix and at the prefix with a slash, and onRoute
    // hears of the first only (Fastify's default prefixTrailingSlash, 'both').
    if (route.prefix !== '' && route.routePath === '' && !route.url.endsWith('/')) addMethods(`${route.url}/`, route.method);
  });
  const knownMethods = (path: string): Set<string> | undefined =>
    methodsByPath.get(path) ?? [...methodsByPattern.values()].find(({ pattern }) => pattern.test(path))?.methods;

  const notFound = (request: FastifyRequest): ApiError => {
    const path = request.url.split('?', 1)[0] ?? '/';
    const known = knownMethods(path);
    const allowed = METHODS.filter((method) => known?.has(method) || (method === 'HEAD' && known?.has('GET')));
    // A route that takes the method and still finds nothing (a file of the docs that is not there) is a 404.
    if (allowed.length > 0 && !(allowed as readonly string[]).includes(request.method)) {
      return new ApiError('method_not_allowed', `${request.method} is not allowed on ${path}; use ${allowed.join(' or ')}`, {
        allow: allowed.join(', '),
      });
    }
    // Where to look instead: a newcomer's first request is often GET /.
    return new ApiError(
      'not_found',
      `No such path: ${request.method} ${path.slice(0, 200)}; the API is described at /docs (and /openapi.json)`,
    );
  };
  app.setNotFoundHandler((request, reply) => sendError(reply, notFound(request)));
  return notFound;
}

/**
 * `/plants/:id` as a pattern that matches `/plants/` and one whole segment; `/docs/static/*` one that matches
 * every path under `/docs/static/`.
 */
function segmentsPattern(url: string): RegExp {
  const segments = url
    .split('/')
    .map((segment) => (segment.startsWith(':') ? '[^/]+' : segment === '*' ? '.*' : segment.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')));
  return new RegExp(`^${segments.join('/')}$`);
}

/**
 * Told of each answer that no onResponse hook sees, for metrics: those written straight to the socket, and the
 * router's own refusals. `method` is undefined when no request was read.
 */
export type AnsweredWithoutHooks = (method: string | undefined, status: number) => void;

/** For Fastify's `frameworkErrors`: errors raised by the router before any route runs (e.g. bad URL encoding). */
export function frameworkErrorHandler(
  answered?: AnsweredWithoutHooks,
): (error: FastifyError, request: FastifyRequest, reply: FastifyReply) => void {
  return (error, request, reply) => {
    // These replies skip the hooks, so the headers every response carries are set here.
    reply.headers(COMMON_HEADERS);
    sendError(reply, new ApiError('bad_request', error.message || 'Malformed request'));
    answered?.(request.method, reply.statusCode);
  };
}

/** A complete HTTP/1.1 error response with the Error body, for sockets that never become a Fastify request. */
function rawErrorResponse(error: ApiError, headers: Readonly<Record<string, string>> = {}): string {
  const body = JSON.stringify(error.body);
  const extra = Object.entries({ ...COMMON_HEADERS, ...error.headers, ...headers })
    .map(([name, value]) => `${name}: ${value}\r\n`)
    .join('');
  return (
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nContent-Type: ${JSON_TYPE}\r\n` +
    `Content-Length: ${Buffer.byteLength(body)}\r\n${extra}Connection: close\r\n\r\n${body}`
  );
}

/** The response a connection is sending, as Node's HTTP server keeps it on the socket. */
type ServedSocket = Socket & { _httpMessage?: ServerResponse | null };

/**
 * For Fastify's `clientErrorHandler`: HTTP that the parser rejects gets an Error body, then the socket closes.
 * Not while a response has begun on it (a pipelined request after a streamed listing): an answer written there
 * would land inside that response's body, so the socket only closes, as Node's own handler does.
 */
export function clientErrorHandler(answered?: AnsweredWithoutHooks): (err: NodeJS.ErrnoException, socket: Socket) => void {
  return (err, socket) => {
    const response = (socket as ServedSocket)._httpMessage;
    if (err.code === 'ECONNRESET' || !socket.writable || response?.headersSent) {
      socket.destroy();
      return;
    }
    const name: ErrorName =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? 'headers_too_large'
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? 'request_timeout'
          : 'bad_request';
    const message =
      name === 'headers_too_large'
        ? 'Request line or headers too large'
        : name === 'request_timeout'
          ? 'Request timed out'
          : 'Malformed HTTP request';
    const error = new ApiError(name, message);
    socket.end(rawErrorResponse(error));
    // A request whose body came too slowly was read, and has its unsent response here; any other was not.
    answered?.(response?.req.method, error.status);
  };
}

/**
 * Node hands CONNECT and unsupported `Expect` values to server events instead of requests; without these
 * listeners it drops the socket (CONNECT) or answers 417 with an empty body. Both get an Error body here.
 */
export function installServerErrorHandling(server: Server, answered?: AnsweredWithoutHooks): void {
  server.on('connect', (req: IncomingMessage, socket: Duplex) => {
    socket.on('error', () => socket.destroy());
    if (!socket.writable) return void socket.destroy();
    const error = new ApiError('bad_request', 'CONNECT is not supported: this service is not a proxy');
    socket.end(rawErrorResponse(error));
    answered?.(req.method, error.status);
    // Node hands this socket over paused: read and drop whatever the client still sends, or a client that
    // keeps sending never sees the end of the answer and the socket stays open (server.close() would wait).
    socket.resume();
    setTimeout(() => socket.destroy(), 5000).unref();
  });
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => {
    const error = new ApiError('expectation_failed', 'Only "Expect: 100-continue" is supported');
    const body = JSON.stringify(error.body);
    res.writeHead(error.status, {
      ...COMMON_HEADERS,
      'content-type': JSON_TYPE,
      'content-length': Buffer.byteLength(body),
      connection: 'close',
    });
    // The request body (if any) is never read; closing the connection keeps it from being parsed as a request.
    res.end(req.method === 'HEAD' ? undefined : body);
    answered?.(req.method, error.status);
  });
}
