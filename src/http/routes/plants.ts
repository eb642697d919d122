import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Negotiator from 'negotiator';
import { Type } from 'typebox';
import type { Authenticator } from '../../access/authenticate.js';
import { bearerAuthentication, type AuthRefusal } from '../auth.js';
import { ApiError } from '../error-catalogue.js';
import type { RateLimiter } from '../rate-limit.js';
import { decodeCursor, MAX_BUFFERED_LIMIT, type Page, type PlantListing } from '../plant-listing.js';
import { errorResponse, ListPlantsQuery, PlantRef } from '../schemas.js';

// Header patterns give the documented form of each header, so clients and the conformance tests can check it.
const wwwAuthenticate = {
  'WWW-Authenticate': {
    type: 'string' as const,
    pattern: '^Bearer realm="[^"]*"(, error="invalid_token", error_description="[^"\\\\]*")?$',
    description: 'Bearer challenge (RFC 6750); `error="invalid_token"` when a token was sent.',
  },
};

/**
 * 406 only when the client's Accept header rules JSON out; no (or an empty) header, `*\/*` or JSON pass at
 * once. The offered type carries its charset so that `application/json; charset=utf-8` matches too.
 */
function requireJsonAcceptable(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const accept = request.headers.accept;
  if (accept === undefined || accept.trim() === '' || accept === '*/*' || accept === 'application/json') return done();
  if (new Negotiator(request.raw).mediaType(['application/json; charset=utf-8']) === undefined) {
    return done(new ApiError('not_acceptable', 'This resource is only available as application/json'));
  }
  done();
}

const JSON_TYPE = 'application/json; charset=utf-8';

const rateLimitHeaders = {
  RateLimit: {
    type: 'string' as const,
    description:
      'When rate limiting is on: the remaining requests of the current window and the seconds until it ends, e.g. ' +
      '`"default";r=29990;t=42` (IETF httpapi RateLimit header fields draft).',
  },
  'RateLimit-Policy': {
    type: 'string' as const,
    description: 'When rate limiting is on: the quota per window and the window in seconds, e.g. `"default";q=30000;w=60`.',
  },
};

export async function plantRoutes(
  app: FastifyInstance,
  opts: {
    listing: PlantListing;
    authenticator: Authenticator;
    limiter: RateLimiter | undefined;
    /** Told each refused request's reason (metrics). */
    onAuthRefused?: (reason: AuthRefusal) => void;
  },
): Promise<void> {
  const { listing, authenticator, limiter } = opts;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/plants',
    {
      onRequest: [bearerAuthentication(authenticator, limiter, opts.onAuthRefused), requireJsonAcceptable],
      schema: {
        operationId: 'listPlants',
        summary: 'List plants',
        description:
          'Returns all plants from the system that the user has access to. ' +
          `With \`limit\` up to ${MAX_BUFFERED_LIMIT}, a response that stops before the end of the listing carries ` +
          '`Link: </plants?limit=N&cursor=…>; rel="next"` (RFC 8288): follow it for the next page. Larger or absent ' +
          'limits are streamed in full.',
        querystring: ListPlantsQuery,
        response: {
          200: {
            ...Type.Array(PlantRef, { description: 'Plant response' }),
            headers: {
              Link: {
                type: 'string',
                pattern: '^</plants\\?limit=[0-9]+&cursor=[A-Za-z0-9_-]{1,32}>; rel="next"$',
                description: 'RFC 8288 `rel="next"` link to the next page, when there is one.',
              },
              ...rateLimitHeaders,
            },
          },
          400: errorResponse('Unexpected error: an invalid query parameter or a malformed request'),
          401: errorResponse('Missing, unknown, expired or revoked bearer token, or a JWT that does not verify', {
            ...wwwAuthenticate,
            ...rateLimitHeaders,
          }),
          406: errorResponse('The Accept header rules out application/json'),
          414: errorResponse('The request target (path and query) is too long'),
          429: errorResponse(
            'Too many requests in the current window for this token, or for this client address when no valid token ' +
              'was sent (which then also holds back its requests with a token until the window ends)',
            {
              'Retry-After': { type: 'string', description: 'Seconds until the window ends and requests are accepted again.' },
              ...rateLimitHeaders,
            },
          ),
          431: errorResponse('The request line or headers are too large'),
          500: errorResponse('Unexpected server error'),
          503: errorResponse("The database, or the identity provider's signing keys, cannot be reached; retry later"),
        },
      },
    },
    (request, reply) => {
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? 0 : decodeCursor(cursor);
      const viewer = request.viewer!;
      // Per-user data: the app-wide `Cache-Control: no-store` keeps it out of shared caches.
      reply.type(JSON_TYPE);
      if (limit === undefined || limit > MAX_BUFFERED_LIMIT) {
        return listing.stream(viewer, after, limit).then((stream) => reply.send(stream));
      }
      const send = (page: Page) => {
        if (page.link !== undefined) reply.header('link', page.link);
        // Already serialized from the Plant schema; Fastify sends a string with a JSON type as it is.
        return reply.send(page.body);
      };
      const page = listing.page(viewer, after, limit);
      // Not an async handler: a cached page is sent synchronously.
      if (page instanceof Promise) return page.then(send);
      send(page);
      return undefined;
    },
  );
}
