import type { FastifyInstance, FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Negotiator from 'negotiator';
import { Type } from 'typebox';
import type { Authenticator } from '../../access/authenticate.js';
import { bearerAuthentication, type AuthRefusal } from '../auth.js';
import { ApiError } from '../error-catalogue.js';
import { decodeCursor, encodeCursor, MAX_BUFFERED_LIMIT, type Page, type PlantListing } from '../plant-listing.js';
import { errorResponse, ListPlantsQuery, PlantRef } from '../schemas.js';

const wwwAuthenticate = {
  'WWW-Authenticate': { type: 'string' as const, description: 'Bearer challenge (RFC 6750); `error="invalid_token"` when a token was sent.' },
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

export interface PlantRoutesOptions {
  listing: PlantListing;
  authenticator: Authenticator;
  /** Told each refused request's reason (metrics). */
  onAuthRefused?: (reason: AuthRefusal) => void;
}

export async function plantRoutes(app: FastifyInstance, opts: PlantRoutesOptions): Promise<void> {
  const { listing, authenticator } = opts;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/plants',
    {
      onRequest: [bearerAuthentication(authenticator, opts.onAuthRefused), requireJsonAcceptable],
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
              Link: { type: 'string', description: 'RFC 8288 `rel="next"` link to the next page, when there is one.' },
            },
          },
          400: errorResponse('Unexpected error: an invalid query parameter or a malformed request'),
          401: errorResponse('Missing, unknown, expired or revoked bearer token, or a JWT that does not verify', wwwAuthenticate),
          406: errorResponse('The Accept header rules out application/json'),
          500: errorResponse('Unexpected server error'),
          503: errorResponse("The database, or the identity provider's signing keys, cannot be reached; retry later"),
        },
      },
    },
    (request, reply) => {
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? 0 : decodeCursor(cursor);
      const viewer = request.viewer!;
      // Per-user data: never stored by shared caches.
      reply.header('cache-control', 'no-store').type(JSON_TYPE);
      if (limit === undefined || limit > MAX_BUFFERED_LIMIT) {
        return listing.stream(viewer, after, limit).then((stream) => reply.send(stream));
      }
      const send = (page: Page) => {
        if (page.next !== undefined) reply.header('link', `</plants?limit=${limit}&cursor=${encodeCursor(page.next)}>; rel="next"`);
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
