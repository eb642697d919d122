import { Type, type Static } from 'typebox';
import { MAX_NAME_LENGTH } from '../catalogue/names.js';
import { MAX_PLANT_ID } from '../catalogue/plant-ids.js';

/**
 * The contract's schemas, written once. They are registered as shared schemas, drive request validation
 * and response serialization, and appear as `components.schemas` in the served OpenAPI document.
 */
export const PlantSchema = Type.Object(
  {
    name: Type.String({ description: 'The name of the plant' }),
    tag: Type.Optional(Type.String({ description: 'Tag that specifies the type of the plant' })),
  },
  { $id: 'Plant' },
);

/** A plant as the contract shows it: `tag` is absent, never null, when the plant has none. */
export type Plant = Static<typeof PlantSchema>;

/**
 * What a client sends to create a plant, as the original document has it: a `Plant` and the plant's id, chosen
 * by the client. Fields other than these are refused (`unevaluatedProperties`), so a client cannot set what
 * only operators decide (owner, public, grants). Ids are int64 in the original; this service takes those a
 * JSON number holds exactly, 1 to 2^53 - 1.
 */
export const NewPlantSchema = Type.Intersect(
  [
    Type.Ref('Plant'),
    Type.Object({
      id: Type.Integer({
        format: 'int64',
        minimum: 1,
        maximum: MAX_PLANT_ID,
        description: 'Identification number of the plant, chosen by the client; unique in the store',
      }),
    }),
  ],
  { $id: 'NewPlant', type: 'object', unevaluatedProperties: false },
);

export type NewPlant = Plant & { id: number };

/**
 * A change of a plant's fields (not part of the original contract), as JSON Merge Patch (RFC 7396): a field left
 * out is kept, a value replaces it, and `"tag": null` removes the tag. The name cannot be removed.
 */
export const PlantPatchSchema = Type.Object(
  {
    name: Type.Optional(Type.String({ description: 'The new name of the plant' })),
    tag: Type.Optional(Type.Union([Type.String(), Type.Null()], { description: 'The new tag of the plant; null removes it' })),
  },
  { $id: 'PlantPatch', additionalProperties: false },
);

export const ErrorSchema = Type.Object(
  {
    error: Type.Integer({
      format: 'int32',
      description: 'A stable error code from the catalogue in the API description: the HTTP status times 100 plus a sequence number.',
    }),
    message: Type.String({ description: 'What went wrong, for a human.' }),
  },
  { $id: 'Error' },
);

/** Most users, and most groups, one `PUT /plants/{id}/access` names: a bound on the work of one request. */
export const MAX_GRANTEES = 1000;

const granteeNames = (what: string) =>
  Type.Array(Type.String({ minLength: 1, maxLength: MAX_NAME_LENGTH }), {
    uniqueItems: true,
    maxItems: MAX_GRANTEES,
    description: `Names of the ${what} the plant is shared with, in code-point order; each must exist (at most ${MAX_GRANTEES})`,
  });

/**
 * Who has access to a plant besides its owner and admins (not part of the original contract): what its owner
 * reads and replaces at `/plants/{id}/access`.
 */
export const PlantAccessSchema = Type.Object(
  {
    public: Type.Boolean({ description: 'Every user sees the plant' }),
    users: granteeNames('users'),
    groups: granteeNames('groups'),
  },
  { $id: 'PlantAccess', additionalProperties: false },
);

export const INT32_MAX = 2_147_483_647;

/** What `fields` may name: a listing of NewPlant objects, or the contract's Plant objects. */
export const LISTING_FIELDS = ['id,name,tag', 'name,tag'] as const;

export const ListPlantsQuery = Type.Object({
  limit: Type.Optional(
    Type.Integer({
      format: 'int32',
      minimum: 0,
      maximum: INT32_MAX,
      description:
        'The maximum number of results to return. Absent: every plant the caller has access to. ' +
        'Must be written in plain decimal digits (0 to 2147483647) and given at most once; anything else ' +
        '(empty, signed, fractional, exponent or hex notation, spaces, repeated) is a 400.',
    }),
  ),
  cursor: Type.Optional(
    Type.String({
      pattern: '^[A-Za-z0-9_-]{1,32}$',
      description:
        'Not part of the original contract, optional: the opaque continuation from a `Link: <…>; rel="next"` ' +
        'response header. Use that URL as given; the next page starts after the last plant of the previous one.',
    }),
  ),
  tag: Type.Optional(
    Type.String({
      minLength: 1,
      maxLength: MAX_NAME_LENGTH,
      // No stored tag holds NUL (catalogue/names.ts), and PostgreSQL's text cannot carry it.
      pattern: '^[^\\u0000]*$',
      description:
        'Not part of the original contract, optional: only the plants with this tag (exactly), in the same order. ' +
        'A tag has no NUL character.',
    }),
  ),
  fields: Type.Optional(
    Type.String({
      enum: [...LISTING_FIELDS],
      description:
        'Not part of the original contract, optional: `id,name,tag` lists each plant with its id (`NewPlant` objects, ' +
        '`{"id":…,"name":…,"tag":…}`), so that a client can read, change, share or delete it; `name,tag`, or no ' +
        "`fields`, lists the contract's `Plant` objects.",
    }),
  ),
});
export type ListPlantsQuery = Static<typeof ListPlantsQuery>;

export const sharedSchemas = [PlantSchema, NewPlantSchema, PlantPatchSchema, PlantAccessSchema, ErrorSchema];

export const PlantPatchRef = Type.Ref('PlantPatch');

export const PlantAccessRef = Type.Ref('PlantAccess');

export const NewPlantRef = Type.Ref('NewPlant');

export const PlantRef = Type.Ref('Plant');

/** A documented error response: the Error body, plus response headers where the status sends some. */
export function errorResponse(description: string, headers?: Record<string, { type: 'string'; pattern?: string; description: string }>) {
  return { description, ...(headers ? { headers } : {}), ...Type.Ref('Error') };
}
