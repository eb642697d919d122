import { Type, type Static } from 'typebox';

/**
 * The newline-delimited JSON catalogue format read by `plantstore import` and written by `export`.
 * One record a line; a record may refer to users and groups defined on earlier lines or already stored.
 */
export const UserRecord = Type.Object(
  {
    type: Type.Literal('user'),
    name: Type.String(),
    admin: Type.Optional(Type.Boolean()),
  },
  { additionalProperties: false },
);

export const GroupRecord = Type.Object(
  {
    type: Type.Literal('group'),
    name: Type.String(),
    members: Type.Optional(Type.Array(Type.String())),
  },
  { additionalProperties: false },
);

export const PlantRecord = Type.Object(
  {
    type: Type.Literal('plant'),
    name: Type.String(),
    tag: Type.Optional(Type.String()),
    owner: Type.String(),
    public: Type.Optional(Type.Boolean()),
    /** User names, or `group:NAME` for a group (`user:NAME` is accepted too). */
    sharedWith: Type.Optional(Type.Array(Type.String())),
  },
  { additionalProperties: false },
);

export type UserRecord = Static<typeof UserRecord>;
export type GroupRecord = Static<typeof GroupRecord>;
export type PlantRecord = Static<typeof PlantRecord>;
export type CatalogueRecord = UserRecord | GroupRecord | PlantRecord;
