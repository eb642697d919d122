import type { FastifyInstance, preParsingHookHandler } from 'fastify';

/**
 * `Expect: 100-continue` answered when the route is about to read the body, not when the headers arrive. Node
 * sends `100 Continue` at once, so a client was told to send a body the route then refused unread: larger than the
 * route takes (413), or refused from the headers alone (401, 404, 405, 406). A route reads its body after those
 * checks, in its parsing stage, and a declared length over its limit is refused there before any 100 goes out.
 */
export function installContinueOnRead(app: FastifyInstance): void {
  // With a listener, Node sends no 100 of its own and no 'request' event: this request goes on as any other.
  app.server.on('checkContinue', (request, response) => app.server.emit('request', request, response));
  app.addHook('onRoute', (route) => {
    const methods = [route.method].flat();
    if (methods.every((method) => method === 'GET' || method === 'HEAD')) return;
    route.preParsing = [continueToRead, ...[route.preParsing ?? []].flat()];
  });
}

const continueToRead: preParsingHookHandler = (request, reply, payload, done) => {
  if (request.headers.expect?.toLowerCase() === '100-continue' && !reply.raw.headersSent) {
    const declared = Number(request.headers['content-length']);
    if (!(declared > request.routeOptions.bodyLimit)) reply.raw.writeContinue();
  }
  done(null, payload);
};
