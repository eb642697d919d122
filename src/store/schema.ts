import type { Generated } from 'kysely';
import type { PlantId, Position } from '../catalogue/plant-ids.js';

/**
 * Row types of the tables, shared by both backends. Booleans are 0/1 integers and times are epoch
 * milliseconds in both, so the two backends store and return the same values. A plant's two numbers have types
 * of their own (see catalogue/plant-ids.ts): `plants.id` and every `plant_id` are catalogue positions,
 * `plants.api_id` the public id.
 */
export interface Database {
  users: { id: Generated<number>; name: string; is_admin: number; created_at: number; name_key: string | null };
  groups: { id: Generated<number>; name: string; created_at: number };
  group_members: { group_id: number; user_id: number };
  plants: {
    id: Generated<Position>;
    api_id: PlantId;
    name: string;
    tag: string | null;
    owner_id: number;
    is_public: number;
    created_at: number;
  };
  plant_user_grants: { user_id: number; plant_id: Position };
  plant_group_grants: { group_id: number; plant_id: Position };
  /** Kept by triggers (migration 0012): each plant shared with each user through a group, and the group. */
  plant_member_grants: { user_id: number; plant_id: Position; group_id: number };
  /** Kept by the same triggers (migration 0014): each group's plants and members, and whether it is read range by range. */
  group_sizes: { group_id: number; plants: number; members: number; ranged: number };
  /** One row: the largest public id a deleted plant held (see catalogue/plant-ids.ts, nextAutomaticId). */
  plant_id_watermark: { id: number; largest_deleted: number };
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

/** Which database a store runs on: the seam's name for it (DatabaseSeam.backend), and what its SQL builders take. */
export type Backend = 'sqlite' | 'postgres';
