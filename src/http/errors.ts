import { STATUS_CODES } from 'node:http';
import type { Socket } from 'node:net';
import type { FastifyError, FastifyInstance, FastifyReply } from 'fastify';
import { DomainError } from '../errors.js';
import { ApiError, type ErrorName } from './error-catalogue.js';

const JSON_TYPE = 'application/json; charset=utf-8';
const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const;

export function sendError(reply: FastifyReply, error: ApiError): FastifyReply {
  return reply.code(error.status).headers(error.headers).type(JSON_TYPE).send(error.body);
}

const byStatus: Partial<Record<number, ErrorName>> = {
  400: 'bad_request',
  404: 'not_found',
  406: 'not_acceptable',
  408: 'request_timeout',
  413: 'payload_too_large',
  414: 'uri_too_long',
  415: 'unsupported_media_type',
  429: 'rate_limited',
  431: 'headers_too_large',
  503: 'unavailable',
};

/** Maps anything thrown while handling a request to exactly one catalogue entry. 5xx details stay in the log. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  if (err instanceof DomainError && err.kind === 'unavailable') {
    return new ApiError('unavailable', 'The service is temporarily unavailable; retry later');
  }
  const status = (err as FastifyError).statusCode;
  if (status !== undefined && status >= 400 && status < 500) {
    const name = byStatus[status] ?? 'bad_request';
    return new ApiError(name, (err as Error).message || (STATUS_CODES[status] ?? 'Bad request'));
  }
  if (status === 503) return new ApiError('unavailable', 'The service is temporarily unavailable; retry later');
  return new ApiError('internal', 'Internal server error');
}

/**
 * One place that turns every failure into the contract's Error body with `application/json`: route errors,
 * unknown paths (404), known paths with another method (405 with Allow), router-level URL errors, and
 * malformed HTTP that never reaches a route (written straight to the socket).
 */
export function installErrorHandling(app: FastifyInstance): void {
  app.setErrorHandler((err, request, reply) => {
    const apiError = toApiError(err);
    if (apiError.status >= 500) request.log.error({ err }, 'request failed');
    return sendError(reply, apiError);
  });

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?', 1)[0] ?? '/';
    const allowed = METHODS.filter((method) => app.hasRoute({ method, url: path }));
    if (allowed.length > 0) {
      return sendError(
        reply,
        new ApiError('method_not_allowed', `${request.method} is not allowed on ${path}; use ${allowed.join(' or ')}`, {
          allow: allowed.join(', '),
        }),
      );
    }
    return sendError(reply, new ApiError('not_found', `No such path: ${request.method} ${path.slice(0, 200)}`));
  });
}

/** For Fastify's `frameworkErrors`: errors raised by the router before any route runs (e.g. bad URL encoding). */
export function frameworkErrorHandler(error: FastifyError, _request: unknown, reply: FastifyReply): void {
  sendError(reply, new ApiError('bad_request', error.message || 'Malformed request'));
}

/** For Fastify's `clientErrorHandler`: HTTP that the parser rejects gets an Error body, then the socket closes. */
export function clientErrorHandler(err: NodeJS.ErrnoException, socket: Socket): void {
  if (err.code === 'ECONNRESET' || !socket.writable) {
    socket.destroy();
    return;
  }
  const name: ErrorName =
    err.code === 'HPE_HEADER_OVERFLOW' ? 'headers_too_large' : err.code === 'ERR_HTTP_REQUEST_TIMEOUT' ? 'request_timeout' : 'bad_request';
  const message =
    name === 'headers_too_large' ? 'Request line or headers too large' : name === 'request_timeout' ? 'Request timed out' : 'Malformed HTTP request';
  const error = new ApiError(name, message);
  const body = JSON.stringify(error.body);
  socket.end(
    `HTTP/1.1 ${error.status} ${STATUS_CODES[error.status]}\r\nContent-Type: ${JSON_TYPE}\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n${body}`,
  );
}
