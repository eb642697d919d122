import swagger from '@fastify/swagger';
import swaggerUi from '@fastify/swagger-ui';
import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import { errorCatalogueMarkdown } from './error-codes.js';
import { VERSION } from '../version.js';
import { sharedSchemas } from './schemas.js';
import { EVENT_TYPES, type EventType } from '../catalogue/plant-events.js';

export const API_TITLE = 'OpenAPI Plant Store';
/**
 * The version of the contract this service implements, kept as `info.version`: the document describes the
 * contract's interface, which clients are written against; the service's own version is in the description
 * and in the Plantstore-Version header.
 */
export const CONTRACT_VERSION = '1.0.0';
import { VERSION_HEADER } from './common-headers.js';
import { BODY_LIMIT, rateLimitHeaders } from './routes/protected.js';

export { VERSION_HEADER };

/** CSP hash of the <style> element in Swagger UI's logo SVG (checked by the browser test of /docs). */
const SWAGGER_UI_LOGO_STYLE = "'sha256-RL3ie0nH+Lzz2YNqQN83mnU0J1ot4QL7b99vMdIX99w='";

const description = `A sample API: Plant Store returns the plants that the calling user has access to.
This document describes Plant Store ${VERSION}, which implements the OpenAPI Plant Store contract
version ${CONTRACT_VERSION}.

The plant operations need a bearer token (\`Authorization: Bearer <token>\`), issued by an operator with
\`plantstore tokens create USER\`; \`/healthz\` and \`/readyz\` need none. A user sees a plant when the user
is an admin, owns the plant, the plant is public, or the plant is shared with the user or with a group the
user belongs to. Plants are listed in catalogue order (the order they were added). A plant's owner (or an
admin) decides who else sees it, at \`/plants/{id}/access\`: not part of the original contract, described
beside it.

Every error answer has the \`Error\` body, whose \`error\` field is a stable code: the codes are listed with
the \`Error\` schema, under Schemas at the end of this page.
`;

/** The `Error` schema, with the catalogue of codes: one click away on the docs page, below the operations. */
function withErrorCatalogue<T extends object>(doc: T): T {
  const error = (doc as { components?: { schemas?: Record<string, { description?: string }> } }).components?.schemas?.Error;
  if (error !== undefined) {
    error.description = `The body of every error answer. Its \`error\` field is one of these codes:\n\n${errorCatalogueMarkdown()}`;
  }
  return doc;
}

type Responses = Record<string, { description?: string; content?: unknown; headers?: Record<string, unknown> }>;

const errorAnswer = (description: string) => ({
  description,
  content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
});

/**
 * The answers the HTTP layer gives before any route runs, on every operation that does not describe them itself:
 * a request sent too slowly, a request target or headers too large, an `Expect` it cannot meet, and on a write that takes no body (a `DELETE`, a grantee's `PUT`) a
 * body that is not JSON or is too large. Written once here, so that no operation's list misses one.
 */
function withTransportAnswers<T extends object>(doc: T, bodyLimitKiB: number): T {
  const { paths } = doc as { paths?: Record<string, Record<string, unknown> | undefined> };
  for (const path of Object.values(paths ?? {})) {
    for (const [method, operation] of Object.entries(path ?? {})) {
      const described = operation as { responses?: Responses; requestBody?: unknown } | undefined;
      if (described?.responses === undefined) continue;
      const answers: Responses = {
        408: errorAnswer('The client took too long to send the request'),
        414: errorAnswer('The request target (path and query) is too long'),
        417: errorAnswer('An `Expect` header other than `100-continue`'),
        431: errorAnswer('The request line or headers are too large'),
      };
      if (['post', 'put', 'patch', 'delete'].includes(method) && described.requestBody === undefined) {
        answers[413] = errorAnswer(`A request body (this operation takes none) larger than ${bodyLimitKiB} KiB`);
        answers[415] = errorAnswer('A request body (this operation takes none) that is not application/json');
      }
      described.responses = { ...answers, ...described.responses };
    }
  }
  return doc;
}

/** Documents the version header on every response of every operation, as a reference to the one definition. */
function withVersionHeader<T extends object>(doc: T): T {
  const { paths } = doc as { paths?: Record<string, Record<string, unknown> | undefined> };
  for (const path of Object.values(paths ?? {})) {
    for (const operation of Object.values(path ?? {})) {
      const responses = (operation as { responses?: Responses } | undefined)?.responses;
      for (const response of Object.values(responses ?? {})) {
        response.headers = { ...response.headers, [VERSION_HEADER]: { $ref: `#/components/headers/${VERSION_HEADER}` } };
      }
    }
  }
  return doc;
}

/** The answers given before a route runs, and so before the rate limit counts the request (withTransportAnswers). */
const BEFORE_ROUTING = new Set(['408', '414', '417', '431']);

/**
 * Documents the rate limit's headers on every answer of an operation behind bearer authentication that a route
 * gives: a request is counted as it is authenticated, and every answer after that carries them while rate limiting
 * is on. Written out as the routes that declare them do (optional, as they are sent only then); an answer whose
 * route declares them keeps its own.
 */
function withRateLimitHeaders<T extends object>(doc: T): T {
  const declared = Object.fromEntries(
    Object.entries(rateLimitHeaders).map(([name, { description }]) => [name, { schema: { type: 'string' }, description }]),
  );
  const { paths } = doc as { paths?: Record<string, Record<string, unknown> | undefined> };
  for (const path of Object.values(paths ?? {})) {
    for (const operation of Object.values(path ?? {})) {
      const described = operation as { responses?: Responses; security?: unknown[] } | undefined;
      if (described?.security?.length === 0) continue;
      for (const [status, response] of Object.entries(described?.responses ?? {})) {
        if (BEFORE_ROUTING.has(status) || response.headers?.RateLimit !== undefined) continue;
        response.headers = { ...response.headers, ...declared };
      }
    }
  }
  return doc;
}

const signatureHeaders = [
  [
    'webhook-id',
    "The event's id (`msg_…`) in this body (the envelope's differs from the original body's), the same on every attempt: a receiver that has seen it can skip it.",
  ],
  ['webhook-timestamp', 'When this attempt was signed, in seconds since the epoch: refuse old ones (replay).'],
  [
    'webhook-signature',
    'Space-separated `v1,<base64 HMAC-SHA256 of id.timestamp.body>`, one per current secret of the endpoint (two while a ' +
      "rotation overlaps); verify with any Standard Webhooks library and the endpoint's `whsec_…` secret.",
  ],
] as const;

/** The signature headers, as the parameters of a webhook's request. */
const signatureParameters = signatureHeaders.map(([name, description]) => ({
  name,
  in: 'header' as const,
  required: true,
  description,
  schema: { type: 'string' as const },
}));

/** What every delivery's answer means, whatever it carries. */
const deliveryOutcome =
  'A 2xx answer within 15 s is success; anything else is tried again with backoff (at once, 5 s, 5 min, 30 min, ' +
  '2 h, 5 h, 10 h; a `Retry-After` is honoured), `410` disables the endpoint, and redirects are not followed.';

const received = { '200': { description: 'Return a 200 status (any 2xx) to indicate that the data was received successfully' } };

/** The events an endpoint chooses with `webhooks add --events`, each sent in the envelope (webhooks/event-body.ts). */
const plantEvents: Record<EventType, { operationId: string; summary: string; what: string; data: string }> = {
  'plant.created': {
    operationId: 'plantCreated',
    summary: 'A plant was added',
    what: 'A plant was added (over HTTP, by the CLI, by an import or by plain SQL).',
    data: 'The plant added.',
  },
  'plant.updated': {
    operationId: 'plantUpdated',
    summary: "A plant's name or tag changed",
    what: "A plant's name or tag changed (a change that leaves both as they were raises none).",
    data: 'The plant as it is now (without `tag` when its tag was removed).',
  },
  'plant.deleted': {
    operationId: 'plantDeleted',
    summary: 'A plant was deleted',
    what: 'A plant was deleted.',
    data: 'The plant as it last was.',
  },
};

/** The envelope of event `type`: the Standard Webhooks `{type, timestamp, data}`, with the plant's `sequence`. */
const envelope = (type: string, data: string) => ({
  type: 'object' as const,
  required: ['type', 'timestamp', 'sequence', 'data'],
  properties: {
    type: { type: 'string' as const, const: type, description: 'The event type.' },
    timestamp: { type: 'string' as const, format: 'date-time', description: 'When the change was made.' },
    sequence: {
      type: 'integer' as const,
      format: 'int64',
      minimum: 1,
      description:
        'Larger for every later change of the same plant (a plant deleted and added again included), in the order ' +
        'those changes were committed; not consecutive, and between two plants it says nothing of their order. ' +
        'Deliveries may arrive out of order: per plant id, keep the event with the largest sequence.',
    },
    data: { description: data, allOf: [{ $ref: '#/components/schemas/NewPlant' }] },
  },
});

/**
 * The webhooks, as this service sends them, signed as the Standard Webhooks specification says: the original
 * document's one webhook (every plant added, by any writer, to every endpoint registered without a choice of
 * events, its body the `NewPlant`), and the plant events an endpoint chooses, each in the envelope.
 */
const webhooks = {
  '/plant/webhook': {
    post: {
      operationId: 'newPlant',
      summary: 'A plant was added',
      description:
        'Information about a new plant added to the store, sent to every endpoint registered with ' +
        `\`plantstore webhooks add URL\`. ${deliveryOutcome}`,
      security: [],
      parameters: signatureParameters,
      requestBody: {
        description: 'plant added to the store',
        content: { 'application/json': { schema: { $ref: '#/components/schemas/NewPlant' } } },
      },
      responses: received,
    },
  },
  ...Object.fromEntries(
    EVENT_TYPES.map((type) => {
      const { operationId, summary, what, data } = plantEvents[type];
      return [
        type,
        {
          post: {
            operationId,
            summary,
            description:
              `${what} Sent in the Standard Webhooks envelope to every endpoint that chose \`${type}\` with ` +
              `\`plantstore webhooks add URL --events ${type},…\`; one registered without \`--events\` receives new ` +
              'plants alone, as the `newPlant` webhook. To mirror the catalogue, take all three types and keep, per ' +
              'plant id, the event of the largest `sequence`: the plant, unless that event is `plant.deleted`. ' +
              deliveryOutcome,
            security: [],
            parameters: signatureParameters,
            requestBody: {
              description: `the \`${type}\` event`,
              content: { 'application/json': { schema: envelope(type, data) } },
            },
            responses: received,
          },
        },
      ];
    }),
  ),
};

/**
 * The served OpenAPI 3.1 document is generated from the route schemas and the shared schemas, so it cannot
 * drift from what the service validates and sends. Must be registered before any route.
 */
export async function registerOpenApi(app: FastifyInstance): Promise<void> {
  for (const schema of sharedSchemas) app.addSchema(schema);

  await app.register(swagger, {
    openapi: {
      openapi: '3.1.0',
      info: {
        title: API_TITLE,
        version: CONTRACT_VERSION,
        description,
        license: { name: 'MIT', identifier: 'MIT' },
      },
      // Relative to wherever the document is served from, so "try it out" calls this very service.
      servers: [{ url: '/' }],
      components: {
        securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer' } },
        headers: {
          [VERSION_HEADER]: {
            description: 'The version of Plant Store that answered; on every response.',
            schema: { type: 'string' },
            example: VERSION,
          },
        },
      },
      security: [{ bearerAuth: [] }],
    },
    transformObject: (documentObject) =>
      'openapiObject' in documentObject
        ? {
            ...withErrorCatalogue(
              withVersionHeader(withRateLimitHeaders(withTransportAnswers(documentObject.openapiObject, BODY_LIMIT / 1024))),
            ),
            webhooks,
          }
        : documentObject.swaggerObject,
    // Shared schemas keep their own names (Plant, Error) in components.schemas.
    refResolver: { buildLocalReference: (json, _baseUri, _fragment, i) => (typeof json.$id === 'string' ? json.$id : `def-${i}`) },
  });

  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  app.addHook('onRoute', (route) => {
    if (route.url === `${DOCS_FILES}*`) route.onRequest = [strongIfMatch, ...[route.onRequest ?? []].flat()];
  });
  await app.register(swaggerUi, {
    routePrefix: '/docs',
    uiConfig: { tryItOutEnabled: true, displayRequestDuration: true, validatorUrl: null, deepLinking: false },
    // Everything the page needs is served from here: no external origins, and no upgrade-insecure-requests,
    // which would break "try it out" on a plain-HTTP deployment. The one inline style allowed (by hash) is the
    // <style> inside Swagger UI's own logo SVG; without it every page load logs a CSP violation.
    staticCSP:
      "default-src 'self'; base-uri 'self'; connect-src 'self'; font-src 'self' data:; frame-ancestors 'self'; " +
      "img-src 'self' data:; object-src 'none'; script-src 'self'; script-src-attr 'none'; " +
      `style-src 'self' ${SWAGGER_UI_LOGO_STYLE}`,
  });
  // The files' folder itself would serve Swagger UI's own index.html, a copy of the page that asks for a document
  // at a path that has none; its file's name already leads to the page (swagger-ui's route), and so does this.
  app.get(DOCS_FILES, { schema: { hide: true } }, (_request, reply) => reply.redirect('../'));
}

/** Where the docs page's static files are served from (by @fastify/static under swagger-ui's prefix). */
const DOCS_FILES = '/docs/static/';

/**
 * A static file's ETag is weak (its size and time), and If-Match compares strongly (RFC 9110, 13.1.1): no list of
 * tags is met by it, only `*`. The file server compares weakly, so such a list is put to it as one it cannot meet.
 */
const strongIfMatch: onRequestHookHandler = (request, _reply, done) => {
  const ifMatch = request.headers['if-match'];
  if (ifMatch !== undefined && ifMatch.trim() !== '*') request.headers['if-match'] = '"none"';
  done();
};
