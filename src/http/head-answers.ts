import type { FastifyInstance, FastifyReply } from 'fastify';

type OnSendHandler = (
  this: unknown,
  request: unknown,
  reply: FastifyReply,
  payload: unknown,
  done: (err: Error | null, payload: unknown) => void,
) => void;

/** The onSend handler Fastify gives the HEAD route it derives from a GET route (fastify/lib/head-route.js). */
const DERIVED_HEAD_HANDLER = 'headRouteOnSendHandler';

/**
 * Keeps `Content-Length` off the 304 and 204 answers of the HEAD routes Fastify derives from GET routes. The
 * handler it adds to such a route sets `Content-Length: 0` when the GET handler sends no body, and a 304 may carry
 * only the length its 200 would have had (RFC 9110 §8.6); a 204 none at all. Other answers keep the length it sets.
 */
export function installHeadAnswerLengths(app: FastifyInstance): void {
  app.addHook('onRoute', (route) => {
    if (route.method !== 'HEAD' || route.onSend === undefined) return;
    const handlers = [route.onSend].flat() as OnSendHandler[];
    const derived = handlers.findIndex((handler) => handler.name === DERIVED_HEAD_HANDLER);
    if (derived < 0) return;
    const setLength = handlers[derived]!;
    handlers[derived] = function (request, reply, payload, done) {
      if (reply.statusCode === 304 || reply.statusCode === 204) return done(null, null);
      return setLength.call(this, request, reply, payload, done);
    };
    route.onSend = handlers;
  });
}
