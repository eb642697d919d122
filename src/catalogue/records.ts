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

export type SharedWith = { user: string } | { group: string };

export function parseSharedWith(entry: string): SharedWith {
  if (entry.startsWith('group:')) return { group: entry.slice('group:'.length) };
  if (entry.startsWith('user:')) return { user: entry.slice('user:'.length) };
  return { user: entry };
}

/** Builds export records in the one canonical shape both backends emit (absent, not empty, optional fields). */
export const exportRecord = {
  user: (name: string, admin: boolean): UserRecord => (admin ? { type: 'user', name, admin: true } : { type: 'user', name }),
  group: (name: string, members: string[]): GroupRecord => (members.length > 0 ? { type: 'group', name, members } : { type: 'group', name }),
  plant(name: string, tag: string | null, owner: string, isPublic: boolean, users: string[], groups: string[]): PlantRecord {
    const sharedWith = [...users, ...groups.map((g) => `group:${g}`)];
    return {
      type: 'plant',
      name,
      ...(tag === null ? {} : { tag }),
      owner,
      public: isPublic,
      ...(sharedWith.length > 0 ? { sharedWith } : {}),
    };
  },
};
