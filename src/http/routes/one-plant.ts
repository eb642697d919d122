import type { FastifyInstance, FastifyReply, onRequestHookHandler } from 'fastify';
import type { TypeBoxTypeProvider } from '@fastify/type-provider-typebox';
import { Type } from 'typebox';
import { checkClientChange } from '../../catalogue/names.js';
import { plantVersion, type PlantChange } from '../../catalogue/plant-fields.js';
import type { PlantId } from '../../catalogue/plant-ids.js';
import type { PlantRepository } from '../../store/repositories/plants.js';
import type { PlantRecord } from '../../store/store.js';
import { JSON_TYPE, MERGE_PATCH_TYPE, PATCH_TYPES } from '../common-headers.js';
import { etagOf, versionCondition } from '../entity-tags.js';
import { failedCondition } from '../../catalogue/version-conditions.js';
import { answerRefusal, plantRefusal } from '../errors.js';
import type { RateLimiter } from '../rate-limit.js';
import { errorResponse, NewPlantRef, PlantPatchRef } from '../schemas.js';
import {
  commonErrors,
  NoQuery,
  PLANT_BODY_LIMIT,
  PLANT_PATH,
  plantChanged,
  plantRefusals,
  plantVersionRefusal,
  versionHeaders,
  notAcceptable,
  plantIdParam,
  requireJsonAcceptable,
  userWriteBudget,
} from './protected.js';

const PlantParams = Type.Object({ id: plantIdParam('ID of the plant') });

const { etag, writeConditions, readConditions } = versionHeaders('the plant', "The plant's");

const describeRead =
  'The plant with this id (not part of the original contract), with its id, as a `NewPlant`, to a caller who can ' +
  'see it; a plant the caller cannot see is answered as if it did not exist (404). `If-None-Match` with its ETag ' +
  'answers 304 while it is unchanged.';

const describeChange =
  'Changes the name and tag of the plant (not part of the original contract), as JSON Merge Patch (RFC 7396): a ' +
  'field left out is kept, `"tag": null` removes the tag. Only its owner or an admin may: a caller who can see the ' +
  'plant but not change it gets 403, and a plant the caller cannot see is answered as if it did not exist (404). ' +
  'The plant keeps its id, its place in the listing and who has access to it. Names and tags follow the rules of ' +
  '`POST /plants`. With `If-Match`, the change is made only while the plant is at that version (412 otherwise, ' +
  "with the current ETag). The change is in every viewer's next `GET /plants` on this instance, and on every " +
  'other within the documented freshness bound, and raises the `plant.updated` event.';

/** What a 403 of these routes says only the owner or an admin may do. */
const ONLY_OWNER_MAY = 'change it';

/** `GET /plants/{id}` and `PATCH /plants/{id}`: one plant, read and changed on behalf of the authenticated caller. */
export async function onePlantRoutes(
  app: FastifyInstance,
  opts: {
    plants: Pick<PlantRepository, 'read' | 'update'>;
    /** The bearer authentication (and rate limiting) hook, shared by every protected route. */
    authenticate: onRequestHookHandler;
    /** The per-user budget of writes, when on. */
    writeBudget: RateLimiter | undefined;
  },
): Promise<void> {
  const { plants, authenticate } = opts;
  const routes = app.withTypeProvider<TypeBoxTypeProvider>();

  routes.get(
    PLANT_PATH,
    {
      onRequest: [authenticate, requireJsonAcceptable],
      schema: {
        operationId: 'getPlant',
        summary: 'Read one plant',
        description: describeRead,
        querystring: NoQuery,
        params: PlantParams,
        headers: readConditions,
        response: {
          200: { ...NewPlantRef, description: 'The plant', headers: etag },
          304: { type: 'null', description: 'The plant is at a version If-None-Match names', headers: etag },
          ...commonErrors,
          400: errorResponse(
            'unexpected error: the id is not a whole number from 1 to 2^53 - 1, If-Match or If-None-Match is not `*` or entity tags, ' +
              'or a query parameter was given (it takes none)',
          ),
          404: errorResponse('No plant with this id that the caller can see'),
          406: notAcceptable,
          ...plantVersionRefusal,
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const read = await plants.read(request.viewer!, id as PlantId);
      if (read.outcome !== 'read') throw plantRefusal('hidden', id, ONLY_OWNER_MAY);
      const condition = versionCondition(request.headers);
      const version = plantVersion(id, read.plant);
      switch (failedCondition(condition, version)) {
        case 'match':
          throw plantChanged(id, read.plant, condition, 'ask with that version');
        case 'noneMatch':
          return reply.code(304).header('etag', etagOf(version)).send();
        default:
          return sendPlant(reply, read.plant);
      }
    },
  );

  routes.patch(
    PLANT_PATH,
    {
      onRequest: [authenticate, requireJsonAcceptable],
      // A malformed If-Match, or a name or tag the rules refuse, is a 400 before the write budget is spent on it.
      preHandler: [
        async (request) => {
          versionCondition(request.headers);
          try {
            checkClientChange(request.body as PlantChange);
          } catch (err) {
            throw answerRefusal(err, CHANGE_REFUSALS);
          }
        },
        userWriteBudget(opts.writeBudget),
      ],
      bodyLimit: PLANT_BODY_LIMIT,
      schema: {
        operationId: 'updatePlant',
        summary: 'Change a plant',
        description: describeChange,
        querystring: NoQuery,
        params: PlantParams,
        headers: writeConditions,
        // The document lists both media types the body is taken in (Fastify's own parsing goes by the parsers).
        consumes: [MERGE_PATCH_TYPE, 'application/json'],
        body: { ...PlantPatchRef, description: 'The fields to change' },
        response: {
          200: { ...NewPlantRef, description: 'The plant, as changed', headers: etag },
          ...commonErrors,
          400: errorResponse(
            'unexpected error: the id is not a whole number from 1 to 2^53 - 1; the body is not JSON or not a PlantPatch (an unknown or mistyped field, a name or tag that is empty, too long or has control characters, a null name); If-Match is not `*` or entity tags; or a query parameter was given (it takes none)',
          ),
          ...plantRefusals,
          406: notAcceptable,
          ...plantVersionRefusal,
          413: errorResponse(`The request body is larger than ${PLANT_BODY_LIMIT / 1024} KiB`),
          415: errorResponse(`The request body is not ${MERGE_PATCH_TYPE} or application/json`, {
            'Accept-Patch': { type: 'string', description: `The media types a change is taken in: \`${PATCH_TYPES}\`` },
          }),
        },
      },
    },
    async (request, reply) => {
      const { id } = request.params;
      const condition = versionCondition(request.headers);
      let written;
      try {
        written = await plants.update(request.viewer!, id as PlantId, request.body as PlantChange, condition);
      } catch (err) {
        throw answerRefusal(err, CHANGE_REFUSALS);
      }
      switch (written.outcome) {
        case 'changed':
        case 'unchanged':
          return sendPlant(reply, written.plant);
        case 'stale':
          throw plantChanged(id, written.plant, condition, 'send the change with that version');
        default:
          throw plantRefusal(written.outcome, id, ONLY_OWNER_MAY);
      }
    },
  );
}

/** The store's refusals of a change, as the API names them. */
const CHANGE_REFUSALS = { invalid_input: 'invalid_body' } as const;

/**
 * The plant as `NewPlant`, with its version as the ETag: serialized here, id first, as a listing with ids and an
 * event show it (the schema's serializer would put the id after the name).
 */
function sendPlant(reply: FastifyReply, plant: PlantRecord): string {
  void reply.header('etag', etagOf(plantVersion(plant.id, plant))).type(JSON_TYPE);
  const { id, ...fields } = plant;
  return JSON.stringify({ id, ...fields });
}
