import type { FastifyCorsOptions } from '@fastify/cors';

/**
 * CORS for an allow-list of browser origins (or `*`): GET and HEAD, and the writes, POST, PUT, PATCH and DELETE, whose
 * preflight names `Authorization`, `Content-Type` and the conditions `If-Match` and `If-None-Match`; with the
 * response headers a page needs readable: `Link` to follow `rel="next"`, `ETag` to change a plant or its access only
 * while it is as read, the rate limit's `RateLimit`, `RateLimit-Policy` and `Retry-After`, and `Plantstore-Version`. An
 * origin not on the list gets no `Access-Control-*` header at all, and its OPTIONS request falls through to the
 * usual 404/405 Error body.
 */
export const CORS_METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE'] as const;
export const CORS_REQUEST_HEADERS = ['Authorization', 'Content-Type', 'If-Match', 'If-None-Match'] as const;
export const CORS_READABLE_HEADERS = ['Link', 'ETag', 'RateLimit', 'RateLimit-Policy', 'Retry-After', 'Plantstore-Version'] as const;

export function corsOptions(origins: readonly string[]): FastifyCorsOptions {
  const anyOrigin = origins.includes('*');
  const allowed = new Set(origins);
  return {
    origin: (origin, callback) => callback(null, origin !== undefined && (anyOrigin || allowed.has(origin)) ? origin : false),
    methods: [...CORS_METHODS],
    allowedHeaders: [...CORS_REQUEST_HEADERS],
    exposedHeaders: [...CORS_READABLE_HEADERS],
    // A plain OPTIONS from an allowed origin gets the preflight answer rather than a text/plain 400.
    strictPreflight: false,
    maxAge: 600,
  };
}
