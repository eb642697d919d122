import type { FastifyInstance } from 'fastify';
import { Type } from 'typebox';
import type { Health } from '../../store/store.js';
import { ApiError } from '../error-codes.js';
import { errorResponse } from '../schemas.js';

const Status = Type.Object({ status: Type.String() });

/** Liveness and readiness for orchestrators. Unauthenticated, and they say nothing about the data. */
export async function healthRoutes(app: FastifyInstance, opts: { health: Pick<Health, 'ping'> }): Promise<void> {
  app.get(
    '/healthz',
    {
      schema: {
        operationId: 'health',
        summary: 'Liveness: the process is up',
        security: [],
        response: { 200: { ...Status, description: 'The process is up' } },
      },
    },
    async (_request, reply) => {
      reply.header('cache-control', 'no-store');
      return { status: 'ok' };
    },
  );

  app.get(
    '/readyz',
    {
      schema: {
        operationId: 'ready',
        summary: 'Readiness: the database answers',
        security: [],
        response: {
          200: { ...Status, description: 'Ready to serve requests' },
          503: errorResponse('The database is unreachable or the server is shutting down'),
        },
      },
    },
    async (_request, reply) => {
      reply.header('cache-control', 'no-store');
      // A balancer that asks while the server drains sends the next requests elsewhere.
      if (closing) throw new ApiError('unavailable', 'The server is shutting down', RETRY_AFTER);
      try {
        await opts.health.ping();
      } catch {
        throw new ApiError('unavailable', 'The database is not reachable', RETRY_AFTER);
      }
      return { status: 'ready' };
    },
  );
  let closing = false;
  app.addHook('preClose', (done) => {
    closing = true;
    done();
  });
}

const RETRY_AFTER = { 'retry-after': '1' };
