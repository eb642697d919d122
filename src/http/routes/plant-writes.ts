import type { FastifyInstance, onRequestHookHandler } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { checkClientPlant } from '../../catalogue/names.js';
import type { PlantId } from '../../catalogue/plant-ids.js';
import type { PlantRepository } from '../../store/repositories/plants.js';
import { failedWithoutVersion, type VersionCondition } from '../../catalogue/version-conditions.js';
import { ApiError } from '../error-codes.js';
import { versionCondition } from '../entity-tags.js';
import { answerRefusal, plantRefusal, type RefusalAnswers } from '../errors.js';
import { errorResponse, NewPlantRef, PlantRef, type NewPlant, type Plant } from '../schemas.js';
import type { RateLimiter } from '../rate-limit.js';
import {
  commonErrors,
  NoQuery,
  PLANT_BODY_LIMIT,
  PLANT_PATH,
  plantRefusals,
  notAcceptable,
  plantIdParam,
  requireJsonAcceptable,
  userWriteBudget,
  plantChanged,
  plantVersionRefusal,
  versionHeaders,
} from './protected.js';

const createPlantSchema = {
  operationId: 'createPlant',
  summary: 'Create a plant',
  description:
    'Creates a new plant in the store. The caller owns it; it is private and shared with nobody until its owner ' +
    '(or an admin) shares it or makes it public (`PUT /plants/{id}/access`), or an operator does with the CLI. The id is chosen by the client and must be unused: repeating ' +
    'the same create (same caller, id, name and tag) answers 200 again, so a client may retry safely; the id of ' +
    'another plant is a 409. Fields other than `id`, `name` and `tag` are refused (400, code 40005). The plant ' +
    "is in the caller's next `GET /plants` on any instance. The plant list has no version: `If-Match` other than " +
    '`*`, or `If-None-Match: *`, is a 412 (code 41204) and nothing is created.',
  querystring: NoQuery,
  headers: Type.Object({
    'if-match': Type.Optional(
      Type.String({ description: 'The plant list has no version: `*` is met (the list exists), entity tags never are (412).' }),
    ),
    'if-none-match': Type.Optional(
      Type.String({ description: 'The plant list has no version: entity tags are always met, `*` never is (the list exists; 412).' }),
    ),
  }),
  body: { ...NewPlantRef, description: 'Plant to add to the store' },
  response: {
    200: { ...PlantRef, description: 'plant response' },
    400: errorResponse(
      'unexpected error: the body is not JSON, or not a NewPlant (a missing, mistyped or unknown field; an id below 1 or above 2^53 - 1; a name or tag that is empty, too long or has control characters); If-Match or If-None-Match is not `*` or entity tags; or a query parameter was given (it takes none)',
    ),
    ...commonErrors,
    406: notAcceptable,
    409: errorResponse('The id is taken by another plant (of another user, or with another name or tag)'),
    412: errorResponse('If-Match names entity tags, or If-None-Match is `*`: the plant list has no version (code 41204)'),
    413: errorResponse(`The request body is larger than ${PLANT_BODY_LIMIT / 1024} KiB`),
    415: errorResponse('The request body is not application/json'),
  },
};

const deletePlantSchema = {
  operationId: 'deletePlant',
  summary: 'Delete a plant',
  description:
    'Deletes a single plant based on the ID supplied. Only its owner or an admin may: a caller who can see the ' +
    'plant but not delete it gets 403, and a plant the caller cannot see is answered as if it did not exist (404). ' +
    'With `If-Match`, the plant is deleted only while it is at that version (412 otherwise, with the current ETag).',
  querystring: NoQuery,
  params: Type.Object({
    id: plantIdParam('ID of plant to delete'),
  }),
  headers: versionHeaders('the plant', "The plant's", 'delete the plant').writeConditions,
  response: {
    204: { type: 'null', description: 'Plant deleted' },
    400: errorResponse(
      'unexpected error: the id is not a whole number from 1 to 2^53 - 1, If-Match or If-None-Match is not `*` or entity tags, ' +
        'a query parameter or a request body other than none, `{}` or `null` was given (it takes neither)',
    ),
    ...commonErrors,
    ...plantRefusals,
    ...plantVersionRefusal,
  },
};

/** `POST /plants` and `DELETE /plants/{id}`: writes on behalf of the authenticated caller. */
export async function plantWriteRoutes(
  app: FastifyInstance,
  opts: {
    plants: Pick<PlantRepository, 'create' | 'delete' | 'deleteIfAt'>;
    /** The bearer authentication (and rate limiting) hook, shared by every protected route. */
    authenticate: onRequestHookHandler;
    /** The per-user budget of writes, when on. */
    writeBudget: RateLimiter | undefined;
  },
): Promise<void> {
  const { plants, authenticate, writeBudget } = opts;
  const routes = app.withTypeProvider<TypeBoxTypeProvider>();
  const budget = userWriteBudget(writeBudget);

  routes.post(
    '/plants',
    {
      onRequest: [authenticate, requireJsonAcceptable],
      // A name or tag the rules refuse, or a malformed If-Match, is a 400 before the write budget is spent on it.
      preHandler: [
        async (request) => {
          refuseListConditions(versionCondition(request.headers));
          try {
            checkClientPlant(request.body as NewPlant);
          } catch (err) {
            throw answerRefusal(err, CREATE_REFUSALS);
          }
        },
        budget,
      ],
      bodyLimit: PLANT_BODY_LIMIT,
      schema: createPlantSchema,
    },
    async (request) => {
      const plant = request.body as NewPlant;
      try {
        await plants.create(request.viewer!, plant);
      } catch (err) {
        throw answerRefusal(err, CREATE_REFUSALS);
      }
      const answer: Plant = plant.tag === undefined ? { name: plant.name } : { name: plant.name, tag: plant.tag };
      return answer;
    },
  );

  routes.delete(
    PLANT_PATH,
    {
      onRequest: authenticate,
      // A malformed If-Match is a 400 before the write budget is spent on it.
      preHandler: [async (request) => void versionCondition(request.headers), budget],
      schema: deletePlantSchema,
    },
    async (request, reply) => {
      const { id } = request.params;
      const condition = versionCondition(request.headers);
      const deleted =
        condition === undefined
          ? { outcome: await plants.delete(request.viewer!, id as PlantId) }
          : await plants.deleteIfAt(request.viewer!, id as PlantId, condition);
      switch (deleted.outcome) {
        case 'deleted':
          return reply.code(204).send();
        case 'stale':
          throw plantChanged(id, deleted.plant, condition, 'delete it at that version');
        case 'forbidden':
        case 'hidden':
          throw plantRefusal(deleted.outcome, id, 'delete it');
      }
    },
  );
}

/**
 * The 412 of a create with preconditions on the plant list, which exists and has no version (RFC 9110 §13.1.1:
 * a method is not performed when its If-Match is not met); the same request without them would create the plant.
 */
function refuseListConditions(condition: VersionCondition | undefined): void {
  switch (failedWithoutVersion(condition)) {
    case 'match':
      throw new ApiError(
        'plant_list_unversioned',
        'If-Match names versions, and the plant list has none (only `*` is met): nothing was created',
      );
    case 'noneMatch':
      throw new ApiError('plant_list_unversioned', 'If-None-Match: * is never met by the plant list, which exists: nothing was created');
    case undefined:
  }
}

/** The store's refusals of a create, as the API names them. */
const CREATE_REFUSALS: RefusalAnswers = { conflict: 'plant_id_taken', invalid_input: 'invalid_body' };
