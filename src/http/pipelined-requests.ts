import type { Socket } from 'node:net';
import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction } from 'fastify';

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);
/** The unsafe requests of a connection whose responses have not been sent yet. */
const unsafeUnanswered = Symbol('plantstore.unsafeUnanswered');
type Connection = Socket & { [unsafeUnanswered]?: number };

/**
 * Runs pipelined requests in the order they were sent (RFC 9112 §9.3.2), as an onRequest hook. Node hands the
 * service every request it reads from a connection at once and keeps only the responses in order, so a `GET`
 * written right behind a `POST` would read the catalogue before the `POST` had committed, and a `DELETE` behind
 * a `GET` could change what the `GET` answers. A request queued behind an unanswered one (its response has no
 * socket yet: Node gives it the socket when every earlier response is sent) waits for that moment when it, or an
 * unanswered request before it, is unsafe. Safe requests behind safe ones still run side by side, and a request
 * that arrives alone costs a property read.
 */
export function inSendingOrder(request: FastifyRequest, reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const connection = request.raw.socket as Connection;
  const unsafe = !SAFE_METHODS.has(request.method);
  if (unsafe) {
    connection[unsafeUnanswered] = (connection[unsafeUnanswered] ?? 0) + 1;
    reply.raw.once('close', () => {
      connection[unsafeUnanswered]!--;
    });
  }
  if (reply.raw.socket !== null || !(unsafe || connection[unsafeUnanswered]! > 0)) return done();
  // Never given the socket if the connection closes first: then the request is dropped with it, unstarted.
  reply.raw.once('socket', () => done());
}
