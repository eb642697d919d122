import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import Negotiator from 'negotiator';
import { Type } from 'typebox';
import type { Authenticator } from '../../access/authenticate.js';
import { listVisiblePlants } from '../../access/viewer.js';
import type { Store } from '../../store/store.js';
import { bearerAuthentication } from '../auth.js';
import { ApiError } from '../error-catalogue.js';
import { errorResponse, ListPlantsQuery, PlantRef } from '../schemas.js';

const wwwAuthenticate = {
  'WWW-Authenticate': { type: 'string' as const, description: 'Bearer challenge (RFC 6750); `error="invalid_token"` when a token was sent.' },
};

/**
 * 406 only when the client's Accept header rules JSON out; no (or an empty) header, `*\/*` or JSON pass at
 * once. The offered type carries its charset so that `application/json; charset=utf-8` matches too.
 */
async function requireJsonAcceptable(request: FastifyRequest, _reply: FastifyReply): Promise<void> {
  const accept = request.headers.accept;
  if (accept === undefined || accept.trim() === '' || accept === '*/*' || accept === 'application/json') return;
  if (new Negotiator(request.raw).mediaType(['application/json; charset=utf-8']) === undefined) {
    throw new ApiError('not_acceptable', 'This resource is only available as application/json');
  }
}

export async function plantRoutes(app: FastifyInstance, opts: { store: Store; authenticator: Authenticator }): Promise<void> {
  const { store, authenticator } = opts;
  app.withTypeProvider<TypeBoxTypeProvider>().get(
    '/plants',
    {
      onRequest: [bearerAuthentication(authenticator), requireJsonAcceptable],
      schema: {
        operationId: 'listPlants',
        summary: 'List plants',
        description: 'Returns all plants from the system that the user has access to',
        querystring: ListPlantsQuery,
        response: {
          200: Type.Array(PlantRef, { description: 'Plant response' }),
          400: errorResponse('Unexpected error: an invalid query parameter or a malformed request'),
          401: errorResponse('Missing, unknown, expired or revoked bearer token, or a JWT that does not verify', wwwAuthenticate),
          406: errorResponse('The Accept header rules out application/json'),
          500: errorResponse('Unexpected server error'),
          503: errorResponse("The database, or the identity provider's signing keys, cannot be reached; retry later"),
        },
      },
    },
    async (request, reply) => {
      const plants = await listVisiblePlants(store, request.viewer!, request.query.limit);
      // Per-user data: never stored by shared caches.
      reply.header('cache-control', 'no-store');
      return plants;
    },
  );
}
