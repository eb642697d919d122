import type { FastifyInstance, onRequestHookHandler, FastifyReply } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { decodeCursor, MAX_BUFFERED_LIMIT, type ListingView, type Page, type PlantListing } from '../plant-listing.js';
import { JSON_TYPE } from '../common-headers.js';
import type { Viewer } from '../../catalogue/access-rule.js';
import type { RepliesAfterPoll } from '../replies-after-poll.js';
import type { TokenPageRequest } from '../../store/store.js';
import { MAX_NAME_LENGTH } from '../../catalogue/names.js';
import { errorResponse, ListPlantsQuery, PlantRef } from '../schemas.js';
import { notAcceptable, rateLimitHeaders, requireJsonAcceptable, retryAfterWindow, unauthorized } from './protected.js';

/** `GET /plants` as the served document describes it; the same schema validates the query. */
const listPlantsSchema = {
  operationId: 'listPlants',
  summary: 'List plants',
  description:
    'Returns all plants from the system that the user has access to. ' +
    `With \`limit\` up to ${MAX_BUFFERED_LIMIT}, a response that stops before the end of the listing carries ` +
    '`Link: </plants?limit=N&cursor=…>; rel="next"` (RFC 8288): follow it for the next page. Larger or absent ' +
    'limits are streamed in full; such full listings are bounded per user and per process (429 or 503 with ' +
    '`Retry-After` past the bound), and a client that takes less than a minimum rate is cut off. Query ' +
    'parameters other than `limit`, `cursor`, `tag` and `fields` are refused (400, code 40004). With `tag`, only ' +
    'the plants with that tag are listed; with `fields=id,name,tag`, each plant with its id (`NewPlant`). Without ' +
    "them the answer is the contract's, byte for byte.",
  querystring: ListPlantsQuery,
  response: {
    200: {
      ...Type.Array(PlantRef, { description: 'Plant response' }),
      headers: {
        Link: {
          type: 'string',
          pattern: '^</plants\\?limit=[0-9]+&cursor=[A-Za-z0-9_-]{1,32}(&tag=[^>]+)?(&fields=id,name,tag)?>; rel="next"$',
          description: 'RFC 8288 `rel="next"` link to the next page, when there is one.',
        },
        ...rateLimitHeaders,
      },
    },
    400: errorResponse('Unexpected error: an invalid, repeated or unknown query parameter, or a malformed request'),
    401: unauthorized,
    406: notAcceptable,
    414: errorResponse('The request target (path and query) is too long'),
    429: errorResponse(
      'Too many requests in the current window for this token, or for this client address when no valid token ' +
        'was sent (which then also holds back its requests with a token until the window ends); or too many ' +
        'full listings (no `limit`, or above 1000) at once for this user',
      { ...retryAfterWindow, ...rateLimitHeaders },
    ),
    431: errorResponse('The request line or headers are too large'),
    500: errorResponse('Unexpected server error'),
    503: errorResponse(
      "The database, or the identity provider's signing keys, cannot be reached; or too many full listings are " +
        'being served at once; retry later',
      { 'Retry-After': { type: 'string', description: 'With too many full listings: seconds to wait before trying again.' } },
    ),
  },
};

export async function plantRoutes(
  app: FastifyInstance,
  opts: {
    listing: PlantListing;
    /** The bearer authentication (and rate limiting) hook, shared by every protected route. */
    authenticate: onRequestHookHandler;
    /** The rights a token gives now (see auth.ts, rightsNow): a full listing reads each chunk with them. */
    rightsNow: (token: string) => Promise<Viewer | undefined>;
    replies: RepliesAfterPoll;
  },
): Promise<void> {
  const { listing, replies, rightsNow } = opts;
  // GET and HEAD pass the same hooks and the same query validation; they differ only in what they send.
  const onRequest = [opts.authenticate, requireJsonAcceptable];
  const routes = app.withTypeProvider<TypeBoxTypeProvider>();
  routes.get(
    '/plants',
    {
      onRequest,
      // HEAD is a route of its own (below): Fastify's would run this handler and throw the listing away.
      exposeHeadRoute: false,
      schema: listPlantsSchema,
      config: { pageAhead },
    },
    (request, reply) => {
      const { limit, cursor } = request.query;
      const after = cursor === undefined ? 0 : decodeCursor(cursor);
      const view = viewOf(request.query);
      // Per-user data: the app-wide `Cache-Control: no-store` keeps it out of shared caches.
      reply.type(JSON_TYPE);
      if (limit === undefined || limit > MAX_BUFFERED_LIMIT) {
        const token = request.bearerToken!;
        return listing
          .stream(
            request.viewer!,
            after,
            limit,
            () => reply.raw.destroy(),
            () => rightsNow(token),
            view,
          )
          .then((stream) => reply.send(stream));
      }
      return sendPage(replies, reply, listing.page(request.viewer!, after, limit, view, request.pageAhead));
    },
  );
  // HEAD answers the status and headers GET would, at the cost of at most one page read: a full listing would be
  // streamed (no length, no Link), so nothing is read for it but at the listings' bounds, where GET may refuse it;
  // a page is read (or found in the cache) for its length and Link, and Node sends no body for HEAD.
  routes.head('/plants', { onRequest, schema: { querystring: ListPlantsQuery, hide: true }, config: { pageAhead } }, (request, reply) => {
    const { limit, cursor } = request.query;
    const after = cursor === undefined ? 0 : decodeCursor(cursor);
    reply.type(JSON_TYPE);
    if (limit === undefined || limit > MAX_BUFFERED_LIMIT) {
      return listing.refuseAsStreamWould(request.viewer!, after, limit, viewOf(request.query)).then(() => reply.send());
    }
    return sendPage(replies, reply, listing.page(request.viewer!, after, limit, viewOf(request.query), request.pageAhead));
  });
}

/** A limit as a query gives it before validation: plain decimal digits, a page that is read in one go. */
const PAGE_LIMIT = /^[1-9][0-9]{0,3}$/;

/**
 * The page a listing's raw query asks for (`limit`, a `cursor` this service issued, and a `tag`), which the token's
 * read may bring along (see FastifyContextConfig.pageAhead): the contract's page, or one tag's. Any other query is
 * read after validation.
 */
function pageAhead(query: unknown): TokenPageRequest | undefined {
  const { limit, cursor, tag } = query as Record<string, unknown>;
  if (typeof limit !== 'string' || !PAGE_LIMIT.test(limit) || Number(limit) > MAX_BUFFERED_LIMIT) return undefined;
  let parameters = 0;
  for (const _ in query as object) parameters++;
  if (parameters !== 1 + Number(cursor !== undefined) + Number(tag !== undefined)) return undefined;
  // Within the schema's bounds (its maxLength counts code points, never more than these UTF-16 units): a tag the
  // schema refuses would fail the whole statement of the requests read with it.
  if (tag !== undefined && (typeof tag !== 'string' || tag.length === 0 || tag.length > MAX_NAME_LENGTH || tag.includes('\u0000'))) {
    return undefined;
  }
  const page = { limit: Number(limit), ...(tag === undefined ? {} : { tag }) };
  if (cursor === undefined) return { after: 0, ...page };
  if (typeof cursor !== 'string') return undefined;
  try {
    return { after: decodeCursor(cursor), ...page };
  } catch {
    return undefined;
  }
}

/** The view a listing's query asks for: none for the contract's own parameters. */
function viewOf({ tag, fields }: ListPlantsQuery): ListingView {
  if (tag === undefined && fields === undefined) return NO_VIEW;
  return { ...(tag === undefined ? {} : { tag }), ...(fields === 'id,name,tag' ? { withIds: true } : {}) };
}

const NO_VIEW: ListingView = Object.freeze({});

/**
 * Sends a page: its Link when more follow, and its body, already serialized from the Plant schema. Sent with the
 * replies of the requests that arrived with it (see replies-after-poll.ts), so the handler returns nothing and
 * Fastify waits for the send.
 */
function sendPage(replies: RepliesAfterPoll, reply: FastifyReply, page: Page | Promise<Page>): undefined {
  const send = (ready: Page) => {
    if (ready.link !== undefined) reply.header('link', ready.link);
    // Fastify sends a string with a JSON type as it is.
    reply.send(ready.body);
  };
  // A cached page (and any page on SQLite) is ready at once: no promise.
  if (page instanceof Promise) {
    // A failed read is answered as Fastify answers an error thrown by the handler.
    page.then(
      (ready) => replies.send(reply, () => send(ready)),
      (err: unknown) => reply.send(err),
    );
  } else {
    replies.send(reply, () => send(page));
  }
  return undefined;
}
