import type { FastifyCorsOptions } from '@fastify/cors';

/**
 * CORS for an allow-list of browser origins (or `*`): GET and HEAD, and the writes, POST, PUT, PATCH and DELETE, whose
 * preflight names `Authorization`, `Content-Type` and the conditions `If-Match` and `If-None-Match`; with the
 * response headers a page needs readable: `Link` to follow `rel="next"`, `ETag` to change a plant or its access only
 * while it is as read, the rate limit's `RateLimit`, `RateLimit-Policy` and `Retry-After`, and `Plantstore-Version`. An
 * origin not on the list gets no `Access-Control-*` header at all, and its OPTIONS request falls through to the
 * usual 404/405 Error body.
 */
export function corsOptions(origins: readonly string[]): FastifyCorsOptions {
  const anyOrigin = origins.includes('*');
  const allowed = new Set(origins);
  return {
    origin: (origin, callback) => callback(null, origin !== undefined && (anyOrigin || allowed.has(origin)) ? origin : false),
    methods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'],
    allowedHeaders: ['Authorization', 'Content-Type', 'If-Match', 'If-None-Match'],
    exposedHeaders: ['Link', 'ETag', 'RateLimit', 'RateLimit-Policy', 'Retry-After', 'Plantstore-Version'],
    // A plain OPTIONS from an allowed origin gets the preflight answer rather than a text/plain 400.
    strictPreflight: false,
    maxAge: 600,
  };
}
