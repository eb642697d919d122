import type { Kysely } from 'kysely';
import type { PlantId } from '../../catalogue/plant-ids.js';
import type { StoreDialect } from '../dialect.js';
import type { Database } from '../schema.js';
import type { GrantInfo, Grantee } from '../store.js';
import { groupIdByName } from './groups.js';
import { plantPosition } from './plants.js';
import { userIdByName } from './users.js';

// Grants (a plant shared with a user or a group): the shared SQL of both backends.

/** Fails (not_found) unless the plant and the grantee of a grant both exist: the plant is named first. */
async function grantParties(db: Kysely<Database>, plantId: PlantId, grantee: Grantee): Promise<void> {
  await plantPosition(db, plantId);
  if ('user' in grantee) await userIdByName(db, grantee.user);
  else await groupIdByName(db, grantee.group);
}

/**
 * Grants a plant to a user or a group, in one statement when both are there: false when it already was. Only
 * when nothing was inserted are the plant and the grantee looked up, for the error that names what is missing.
 */
export async function addGrant(d: StoreDialect, plantId: PlantId, grantee: Grantee): Promise<boolean> {
  const result = await d.writeStatement((db) =>
    'user' in grantee
      ? db
          .insertInto('plant_user_grants')
          .columns(['user_id', 'plant_id'])
          .expression(
            db
              .selectFrom(['users as u', 'plants as p'])
              .select(['u.id as user_id', 'p.id as plant_id'])
              .where('u.name', '=', grantee.user)
              .where('p.api_id', '=', plantId),
          )
          .onConflict((oc) => oc.doNothing())
          .executeTakeFirst()
      : db
          .insertInto('plant_group_grants')
          .columns(['group_id', 'plant_id'])
          .expression(
            db
              .selectFrom(['groups as g', 'plants as p'])
              .select(['g.id as group_id', 'p.id as plant_id'])
              .where('g.name', '=', grantee.group)
              .where('p.api_id', '=', plantId),
          )
          .onConflict((oc) => oc.doNothing())
          .executeTakeFirst(),
  );
  if (Number(result.numInsertedOrUpdatedRows ?? 0) > 0) return true;
  await grantParties(d.db, plantId, grantee);
  return false;
}

/** Removes a grant in one statement: false when there was none. Then, as for addGrant, what is missing is an error. */
export async function removeGrant(d: StoreDialect, plantId: PlantId, grantee: Grantee): Promise<boolean> {
  const result = await d.writeStatement((db) => {
    const plant = db.selectFrom('plants').select('id').where('api_id', '=', plantId);
    return 'user' in grantee
      ? db
          .deleteFrom('plant_user_grants')
          .where('user_id', '=', db.selectFrom('users').select('id').where('name', '=', grantee.user))
          .where('plant_id', '=', plant)
          .executeTakeFirst()
      : db
          .deleteFrom('plant_group_grants')
          .where('group_id', '=', db.selectFrom('groups').select('id').where('name', '=', grantee.group))
          .where('plant_id', '=', plant)
          .executeTakeFirst();
  });
  if (Number(result.numDeletedRows) > 0) return true;
  await grantParties(d.db, plantId, grantee);
  return false;
}

/** The grants of every plant, or of one: a plant that does not exist is not found, as everywhere a name is given. */
export async function listGrants(d: StoreDialect, filter: { plantId?: PlantId }): Promise<GrantInfo[]> {
  if (filter.plantId !== undefined) await plantPosition(d.db, filter.plantId);
  let users = d.db
    .selectFrom('plant_user_grants as g')
    .innerJoin('plants as p', 'p.id', 'g.plant_id')
    .innerJoin('users as u', 'u.id', 'g.user_id')
    .select(['p.id as position', 'p.api_id as plantId', 'p.name as plantName', 'u.name as grantee', 'u.id as granteeId']);
  let groups = d.db
    .selectFrom('plant_group_grants as g')
    .innerJoin('plants as p', 'p.id', 'g.plant_id')
    .innerJoin('groups as gr', 'gr.id', 'g.group_id')
    .select(['p.id as position', 'p.api_id as plantId', 'p.name as plantName', 'gr.name as grantee', 'gr.id as granteeId']);
  if (filter.plantId !== undefined) {
    users = users.where('p.api_id', '=', filter.plantId);
    groups = groups.where('p.api_id', '=', filter.plantId);
  }
  const [u, g] = await Promise.all([users.execute(), groups.execute()]);
  // Catalogue order, then users before groups, each in the order they were added.
  const all = [
    ...u.map((r) => ({
      plantId: Number(r.plantId) as PlantId,
      plantName: r.plantName,
      grantee: { user: r.grantee },
      order: [Number(r.position), 0, Number(r.granteeId)],
    })),
    ...g.map((r) => ({
      plantId: Number(r.plantId) as PlantId,
      plantName: r.plantName,
      grantee: { group: r.grantee },
      order: [Number(r.position), 1, Number(r.granteeId)],
    })),
  ];
  all.sort((a, b) => a.order[0]! - b.order[0]! || a.order[1]! - b.order[1]! || a.order[2]! - b.order[2]!);
  return all.map(({ plantId, plantName, grantee }) => ({ plantId, plantName, grantee }));
}
