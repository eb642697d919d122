import { setImmediate } from 'node:timers/promises';
import type { FastifyInstance, FastifyReply, onRequestHookHandler } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import type { Viewer } from '../../catalogue/access-rule.js';
import { MAX_NAME_LENGTH } from '../../catalogue/names.js';
import {
  accessVersion,
  checkAccessChange,
  noSuchGrantee,
  type AccessChange,
  type Grantee,
  type PlantAccess,
} from '../../catalogue/plant-access.js';
import type { PlantId } from '../../catalogue/plant-ids.js';
import type { AccessRepository } from '../../store/repositories/plant-access.js';
import type { AccessWrite } from '../../store/store.js';
import { ApiError } from '../error-codes.js';
import { etagOf, preconditionFailed, versionCondition } from '../entity-tags.js';
import { failedCondition, type VersionCondition } from '../../catalogue/version-conditions.js';
import { answerRefusal, plantRefusal } from '../errors.js';
import { hasLargeBody } from '../json-bodies.js';
import type { RateLimiter } from '../rate-limit.js';
import { errorResponse, MAX_GRANTEES, PlantAccessRef } from '../schemas.js';
import {
  commonErrors,
  NoQuery,
  PLANT_PATH,
  plantRefusals,
  versionHeaders,
  notAcceptable,
  plantIdParam,
  requireJsonAcceptable,
  userWriteBudget,
  ACCESS_BODY_LIMIT,
} from './protected.js';

// Who has access to one plant, for its owner and admins: read and replaced whole at /plants/{id}/access, one user
// or group shared or unshared at /plants/{id}/access/users/{name} and …/groups/{name}. The rule is delete's:
// a caller who sees the plant but does not own it gets 403, one who cannot see it 404.

const PlantIdParam = plantIdParam('ID of the plant');
const AccessParams = Type.Object({ id: PlantIdParam });
const GranteeParams = (what: 'user' | 'group') =>
  Type.Object({
    id: PlantIdParam,
    name: Type.String({
      minLength: 1,
      maxLength: MAX_NAME_LENGTH,
      description:
        `Name of the ${what}. URL clients remove a \`.\` or \`..\` segment, so no new ${what} is given either name; ` +
        `share with one named so before through \`PUT /plants/{id}/access\`.`,
    }),
  });

const { etag, writeConditions, readConditions } = versionHeaders('the access', "The access's");
/** The unknown grantees a 422 names; it counts the rest. */
const UNKNOWN_NAMED = 20;

const accessErrors = { ...commonErrors, ...plantRefusals };

/**
 * The 400 of an access operation: what its path (and body) may get wrong, each with the code it answers, and then
 * what every one of them may.
 */
const badRequest = (own: string) =>
  errorResponse(
    `unexpected error: ${own}; a query parameter, as it takes none (code 40004); or a malformed request: a bad ` +
      'percent-encoding, or If-Match or If-None-Match that is not `*` or entity tags (code 40003)',
  );
const BAD_ID = 'the id is not a whole number from 1 to 2^53 - 1';

const versionRefusal = {
  412: errorResponse(
    'The access is not at a version If-Match names, or is at one If-None-Match names (code 41201); the ETag header has the current one',
    etag,
  ),
};

const changeErrors = { ...accessErrors, ...versionRefusal };

const describeAccess =
  'Who has access to the plant besides its owner and admins (not part of the original contract): whether every ' +
  'user sees it, and the users and groups it is shared with. Only its owner or an admin may read or change it: ' +
  'a caller who can see the plant but does not own it gets 403, and a plant the caller cannot see is answered as ' +
  "if it did not exist (404). Changes are in every grantee's next `GET /plants` on this instance, and on every " +
  'other within the documented freshness bound.';

const sharingNote =
  'Only users and groups that exist can be given access; an operator creates groups (`plantstore groups add`). ' +
  'An owner can therefore tell whether a user name exists, as on any service where people share with each other ' +
  'by name.';

/** `/plants/{id}/access` and its users and groups: the plant's access, changed on behalf of the authenticated caller. */
export async function plantAccessRoutes(
  app: FastifyInstance,
  opts: {
    access: AccessRepository;
    /** The bearer authentication (and rate limiting) hook, shared by every protected route. */
    authenticate: onRequestHookHandler;
    /** The per-user budget of writes, when on. */
    writeBudget: RateLimiter | undefined;
  },
): Promise<void> {
  const { access, authenticate } = opts;
  const budget = userWriteBudget(opts.writeBudget);
  const routes = app.withTypeProvider<TypeBoxTypeProvider>();

  routes.get(
    `${PLANT_PATH}/access`,
    {
      onRequest: [authenticate, requireJsonAcceptable],
      schema: {
        operationId: 'getPlantAccess',
        summary: 'Who has access to a plant',
        description: describeAccess,
        querystring: NoQuery,
        params: AccessParams,
        headers: readConditions,
        response: {
          200: { ...PlantAccessRef, description: 'The access of the plant', headers: etag },
          304: { type: 'null', description: 'The access is at a version If-None-Match names', headers: etag },
          ...accessErrors,
          400: badRequest(`${BAD_ID} (code 40001)`),
          406: notAcceptable,
          ...versionRefusal,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const read = await access.read(request.viewer!, id as PlantId);
      if (read.outcome !== 'read') throw plantRefusal(read.outcome, id, ONLY_OWNER_MAY);
      const condition = versionCondition(request.headers);
      switch (failedCondition(condition, accessVersion(read.access))) {
        case 'match':
          throw accessChanged(id, read.access, condition, 'ask with that version');
        case 'noneMatch':
          return reply.code(304).header('etag', tagOf(read.access)).send();
        default:
          return sendAccess(reply, read.access);
      }
    },
  );

  routes.put(
    `${PLANT_PATH}/access`,
    {
      onRequest: [authenticate, requireJsonAcceptable],
      bodyLimit: ACCESS_BODY_LIMIT,
      preHandler: [
        async (request) => {
          refuseMalformed({ kind: 'replace', access: request.body as PlantAccess }, request.headers, 'body');
          // Two thousand names' checks, then their lookups: each its own stretch of the thread, others' requests between.
          if (hasLargeBody(request)) await setImmediate();
        },
        budget,
      ],
      schema: {
        operationId: 'putPlantAccess',
        summary: 'Replace who has access to a plant',
        description: `Replaces the whole access of the plant with the one given (idempotent), and answers it. ${describeAccess} ${sharingNote}`,
        querystring: NoQuery,
        params: AccessParams,
        headers: writeConditions,
        body: { ...PlantAccessRef, description: 'The access the plant is to have' },
        response: {
          200: { ...PlantAccessRef, description: 'The access of the plant, as changed', headers: etag },
          ...changeErrors,
          400: badRequest(
            `${BAD_ID} (code 40001); the body is not JSON or not a PlantAccess: a missing, mistyped or unknown field, ` +
              `more than ${MAX_GRANTEES} names in a list, a name given twice, or one no user or group can have (code 40005)`,
          ),
          406: notAcceptable,
          413: errorResponse(`The request body is larger than ${ACCESS_BODY_LIMIT / 1024 / 1024} MiB`),
          415: errorResponse('The request body is not application/json'),
          422: errorResponse('The access names users or groups that do not exist (code 42201; the message names them)'),
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const written = await change(
        access,
        request.viewer!,
        id,
        { kind: 'replace', access: request.body as PlantAccess },
        versionCondition(request.headers),
        'body',
      );
      return sendAccess(reply, written);
    },
  );

  for (const what of ['user', 'group'] as const) {
    const path = `${PLANT_PATH}/access/${what}s/:name`;
    const grantee = (name: string): Grantee => (what === 'user' ? { user: name } : { group: name });
    const shared = {
      querystring: NoQuery,
      params: GranteeParams(what),
      headers: writeConditions,
    };
    const responses = (done: string) => ({
      204: { type: 'null', description: done, headers: etag },
      ...changeErrors,
      400: badRequest(
        `${BAD_ID}, or the name is one no ${what} can have (code 40001); a request body other than none, \`{}\` or \`null\`, ` +
          'as it takes none (code 40005)',
      ),
      404: errorResponse(
        `No plant with this id that the caller can see (code 40402), or no ${what} with this name (code ${what === 'user' ? 40403 : 40404})`,
      ),
    });
    for (const [method, kind] of [
      ['PUT', 'share'],
      ['DELETE', 'unshare'],
    ] as const) {
      const sharing = kind === 'share';
      routes.route({
        method,
        url: path,
        onRequest: authenticate,
        preHandler: [
          async (request) => {
            const { name } = request.params as { name: string };
            refuseMalformed({ kind, grantee: grantee(name) }, request.headers, 'path');
          },
          budget,
        ],
        schema: {
          operationId: `${kind}PlantWith${what === 'user' ? 'User' : 'Group'}`,
          summary: sharing ? `Share a plant with a ${what}` : `Stop sharing a plant with a ${what}`,
          description: sharing
            ? `Gives the ${what} access to the plant (idempotent: sharing again changes nothing). ${describeAccess} ${sharingNote}`
            : `Takes the ${what}'s access to the plant away (idempotent: a ${what} it was not shared with changes nothing). ${describeAccess}`,
          ...shared,
          response: responses(sharing ? `Shared with the ${what} (or already so)` : `No longer shared with the ${what} (or never was)`),
        },
        handler: async (request, reply) => {
          const { id, name } = request.params;
          const accessChange = { kind, grantee: grantee(name) };
          const written = await change(access, request.viewer!, id, accessChange, versionCondition(request.headers), 'path');
          return reply.code(204).header('etag', tagOf(written)).send();
        },
      });
    }
  }
}

/** The 412 of a request about an access not at the version its If-Match or If-None-Match asks for. */
const accessChanged = (id: number, current: PlantAccess, condition: VersionCondition | undefined, then: string): ApiError =>
  preconditionFailed('access_changed', `the access of plant ${id}`, accessVersion(current), condition, {
    readAt: `/plants/${id}/access`,
    then,
  });

/** The ETag of an access: its version, quoted. */
const tagOf = (access: PlantAccess): string => etagOf(accessVersion(access));

function sendAccess(reply: FastifyReply, access: PlantAccess): PlantAccess {
  void reply.header('etag', tagOf(access));
  return access;
}

/**
 * Refuses (400) a change with a malformed If-Match or a name nobody can have, before the write budget is spent
 * on it: a malformed request counts for nothing, whatever it is refused for.
 */
function refuseMalformed(
  accessChange: AccessChange,
  headers: { 'if-match'?: string; 'if-none-match'?: string },
  namesFrom: 'body' | 'path',
): void {
  versionCondition(headers);
  try {
    checkAccessChange(accessChange);
  } catch (err) {
    throw answerRefusal(err, NAME_REFUSALS[namesFrom]);
  }
}

/** A store's or a rule's refusal of the names a change gives, as the API names it by where they were given. */
const NAME_REFUSALS = { body: { invalid_input: 'invalid_body' }, path: { invalid_input: 'invalid_parameter' } } as const;

/** What a 403 of the access routes says only the owner or an admin may do. */
const ONLY_OWNER_MAY = 'see or change who has access to it';

/** Makes one change of the caller's, and turns every refusal into its Error answer. */
async function change(
  access: AccessRepository,
  viewer: Viewer,
  id: number,
  accessChange: AccessChange,
  condition: VersionCondition | undefined,
  namesFrom: 'body' | 'path',
): Promise<PlantAccess> {
  let written: AccessWrite;
  try {
    written = await access.change(viewer, id as PlantId, accessChange, condition);
  } catch (err) {
    throw answerRefusal(err, NAME_REFUSALS[namesFrom]);
  }
  switch (written.outcome) {
    case 'changed':
    case 'unchanged':
      return written.access;
    case 'stale':
      throw accessChanged(id, written.access, condition, 'send the change with that version');
    case 'unknown': {
      // Named, up to a screenful: a body of 2000 unknown names would otherwise be echoed whole.
      const { grantees } = written;
      const more = grantees.length > UNKNOWN_NAMED ? `; and ${grantees.length - UNKNOWN_NAMED} more that nobody has` : '';
      const message = grantees.slice(0, UNKNOWN_NAMED).map(noSuchGrantee).join('; ') + more;
      if (namesFrom === 'body') throw new ApiError('unknown_grantee', message);
      throw new ApiError('user' in written.grantees[0]! ? 'user_not_found' : 'group_not_found', message);
    }
    default:
      throw plantRefusal(written.outcome, id, ONLY_OWNER_MAY);
  }
}
