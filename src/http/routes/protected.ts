import type { FastifyReply, FastifyRequest, HookHandlerDoneFunction, preHandlerHookHandler } from 'fastify';
import Negotiator from 'negotiator';
import { Type } from 'typebox';
import { MAX_PLANT_ID } from '../../catalogue/plant-ids.js';
import { plantVersion } from '../../catalogue/plant-fields.js';
import type { PlantRecord } from '../../store/store.js';
import { preconditionFailed } from '../entity-tags.js';
import type { VersionCondition } from '../../catalogue/version-conditions.js';
import { ApiError } from '../error-codes.js';
import type { RateLimiter } from '../rate-limit.js';
import { errorResponse } from '../schemas.js';

// What every route behind bearer authentication shares: the Accept check, and how the served document describes
// the answers authentication and rate limiting give. Header patterns give the documented form of each header,
// so clients and the conformance tests can check it.

export const wwwAuthenticate = {
  'WWW-Authenticate': {
    type: 'string' as const,
    pattern: '^Bearer realm="[^"]*"(, error="invalid_token", error_description="[^"\\\\]*")?$',
    description: 'Bearer challenge (RFC 6750); `error="invalid_token"` when a token was sent.',
  },
};

export const rateLimitHeaders = {
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

/** The `Retry-After` of a 429 for a spent rate-limit window. */
export const retryAfterWindow = {
  'Retry-After': { type: 'string' as const, description: 'Seconds until the window ends and requests are accepted again.' },
};

/** The 406 of every operation that answers JSON. */
export const notAcceptable = errorResponse('The Accept header rules out application/json');

/**
 * The path of one plant; the routes under it extend it. The id is never empty: `/plants/` is no plant's path but an
 * unknown one (404), as it was before plants could be read one by one.
 */
export const PLANT_PATH = '/plants/:id(^.+$)';

/** A plant's public id in a path: what the original document's int64 ids are here, 1 to 2^53 - 1. */
export const plantIdParam = (description: string) => Type.Integer({ format: 'int64', minimum: 1, maximum: MAX_PLANT_ID, description });

/** The 401 of every protected operation. */
export const unauthorized = errorResponse('Missing, unknown, expired or revoked bearer token, or a JWT that does not verify', {
  ...wwwAuthenticate,
  ...rateLimitHeaders,
});

/**
 * 406 only when the client's Accept header rules JSON out; no (or an empty) header, `*\/*` or JSON pass at
 * once. The offered type carries its charset so that `application/json; charset=utf-8` matches too.
 */
export function requireJsonAcceptable(request: FastifyRequest, _reply: FastifyReply, done: HookHandlerDoneFunction): void {
  const accept = request.headers.accept;
  if (accept === undefined || accept === '*/*' || accept === 'application/json') return done();
  // A list of empty elements (`Accept: ,`) names no type, as an empty header does: RFC 9110 §5.6.1 has them ignored.
  if (/^[\s,]*$/.test(accept)) return done();
  if (new Negotiator(request.raw).mediaType(['application/json; charset=utf-8']) === undefined) {
    return done(new ApiError('not_acceptable', 'This resource is only available as application/json'));
  }
  done();
}

/** The writes take no query parameter: one is refused with its name (40004), never silently ignored. */
export const NoQuery = Type.Object({});

/** The answers every write may give besides its own, as the listing documents them. */
export const commonErrors = {
  401: unauthorized,
  429: errorResponse(
    'Too many requests in the current window for this token (or client address), or too many writes (creates, changes, deletes, access changes) for this user (code 42903)',
    { ...retryAfterWindow, ...rateLimitHeaders },
  ),
  500: errorResponse('Unexpected server error'),
  503: errorResponse(
    "The database (unreachable, or locked for too long), or the identity provider's signing keys, cannot be reached; retry later",
    {
      'Retry-After': { type: 'string', description: 'Seconds to wait before trying again.' },
    },
  ),
};

/**
 * The per-user budget of writes: the user's, whichever token or JWT the request carries. A preHandler, after the
 * request's body and parameters are validated (by the schema, and by the rules of names and If-Match in the route's
 * preHandlers before it): a write refused as malformed (400, 413, 415) spends none of it.
 */
export function userWriteBudget(writeBudget: RateLimiter | undefined): preHandlerHookHandler {
  return (request, reply, done) =>
    writeBudget === undefined ? done() : writeBudget.checkKey(`user:${request.viewer!.userId}`, reply, done);
}

/** The 403 and 404 of an operation on one plant: the rule of catalogue/access-rule.ts, as answers. */
export const plantRefusals = {
  403: errorResponse('The caller can see the plant but is neither its owner nor an admin'),
  404: errorResponse('No plant with this id that the caller can see'),
};

/** The largest body of a route that sets no limit of its own: those that take none (a body sent anyway is read). */
export const BODY_LIMIT = 64 * 1024;

/**
 * The largest body a write of a plant's fields reads (`POST /plants`, `PATCH /plants/{id}`): a NewPlant with the
 * longest name and tag, each character (two UTF-16 units outside the BMP) written as `\uXXXX` escapes, 24 KiB,
 * fits with room to spare; a larger body is refused before it is parsed.
 */
export const PLANT_BODY_LIMIT = 32 * 1024;

/**
 * The largest body `PUT /plants/{id}/access` reads: 1000 users and 1000 groups (the schema's most) of names of
 * about 500 bytes each, written plainly. Longer lists of longer names are a 413, refused before they are parsed.
 */
export const ACCESS_BODY_LIMIT = 1024 * 1024;

/**
 * The `ETag` response header, and the `If-Match` and `If-None-Match` request headers of what is read or changed only
 * at a version: a plant or its access (`what`, with its possessive). A write (`act`, what it does) is made only
 * while they hold, a read answered in full only while If-Match holds and 304 when If-None-Match does not (RFC 9110
 * §13.2.2).
 */
export function versionHeaders(what: string, whose: string, act = `change ${what}`) {
  return {
    etag: {
      ETag: {
        type: 'string' as const,
        pattern: '^"[A-Za-z0-9_-]+"$',
        description: `${whose} version: send it back in If-Match to change ${what} only while it is still this one.`,
      },
    },
    writeConditions: Type.Object({
      'if-match': Type.Optional(
        Type.String({
          description: `${capitalized(act)} only while its version is one of these ETags (or \`*\`, any); otherwise 412 and nothing is done. Without it, whatever the version (the last writer wins).`,
        }),
      ),
      'if-none-match': Type.Optional(
        Type.String({
          description: `${capitalized(act)} only while its version is none of these ETags (weak comparison); \`*\` never holds, ${what} being there. Otherwise 412 and nothing is done.`,
        }),
      ),
    }),
    readConditions: Type.Object({
      'if-match': Type.Optional(
        Type.String({
          description: `Answer only while ${what} is at one of these versions (ETags), or \`*\`; otherwise 412 with the current ETag.`,
        }),
      ),
      'if-none-match': Type.Optional(
        Type.String({ description: `Answer 304 while ${what} is at one of these versions (ETags, weak comparison), or \`*\`.` }),
      ),
    }),
  };
}

const capitalized = (text: string) => text.charAt(0).toUpperCase() + text.slice(1);

/**
 * A request about a plant refused because its version does not meet If-Match or If-None-Match (`PATCH`, `DELETE`,
 * and `GET` with If-Match): the 412 of the served document, and the answer, which carries the current version;
 * `then` says what to do with it.
 */
export const plantVersionRefusal = {
  412: errorResponse(
    'The plant is not at a version If-Match names, or is at one If-None-Match names (code 41202); the ETag header has the current one',
    versionHeaders('the plant', "The plant's").etag,
  ),
};

export const plantChanged = (id: number, plant: PlantRecord, condition: VersionCondition | undefined, then: string): ApiError =>
  preconditionFailed('plant_changed', `plant ${id}`, plantVersion(id, plant), condition, { readAt: `/plants/${id}`, then });
