import type { Generated } from 'kysely';

/**
 * Row types of the tables, shared by both backends. Booleans are 0/1 integers and times are epoch
 * milliseconds in both, so the two backends store and return the same values.
 */
export interface Database {
  users: { id: Generated<number>; name: string; is_admin: number; created_at: number; name_key: string | null };
  groups: { id: Generated<number>; name: string; created_at: number };
  group_members: { group_id: number; user_id: number };
  plants: {
    id: Generated<number>;
    /** The plant's public id (the API's and the CLI's); `id` is its catalogue position. */
    api_id: Generated<number>;
    name: string;
    tag: string | null;
    owner_id: number;
    is_public: number;
    created_at: number;
  };
  plant_user_grants: { user_id: number; plant_id: number };
  plant_group_grants: { group_id: number; plant_id: number };
  tokens: {
    id: Generated<number>;
    user_id: number;
    token_hash: Buffer;
    label: string | null;
    created_at: number;
    expires_at: number | null;
    revoked_at: number | null;
  };
}

export type Dialect = 'sqlite' | 'postgres';
