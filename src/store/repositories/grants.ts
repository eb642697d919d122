import type { PlantId } from '../../catalogue/plant-ids.js';
import { OPERATOR } from '../../catalogue/access-rule.js';
import { notFound } from '../../catalogue/errors.js';
import { noSuchGrantee, type AccessChange, type Grantee } from '../../catalogue/plant-access.js';
import type { DatabaseSeam } from '../seam.js';
import type { GrantInfo } from '../records.js';
import { accessRepository } from './plant-access.js';
import { plantPosition } from './plants.js';

// Grants (a plant shared with a user or a group) as the operator changes and lists them: the changes go through
// the one path of every actor (plant-access.ts).

/** Grants, and the public flag, as the operator changes and lists them (the CLI). */
export function grantRepository(d: DatabaseSeam) {
  const access = accessRepository(d);
  /** The operator's change of one plant's access: whether it changed anything; a missing plant or name is not_found. */
  const change = async (plantId: PlantId, accessChange: AccessChange): Promise<boolean> => {
    const result = await access.change(OPERATOR, plantId, accessChange);
    switch (result.outcome) {
      case 'changed':
        return true;
      case 'unchanged':
        return false;
      case 'unknown':
        throw notFound(noSuchGrantee(result.grantees[0]!));
      default:
        // The operator may change every plant, and names no version: only a plant that is not there is left.
        throw notFound(`no plant with id ${plantId}`);
    }
  };
  return {
    /** Resolves to false when the plant was already shared so. */
    add: (plantId: PlantId, grantee: Grantee) => change(plantId, { kind: 'share', grantee }),
    /** Resolves to false when the plant was not shared so. */
    remove: (plantId: PlantId, grantee: Grantee) => change(plantId, { kind: 'unshare', grantee }),
    /** Changes a plant's public flag; resolves to false when it already was so. */
    setPublic: (plantId: PlantId, isPublic: boolean) => change(plantId, { kind: 'public', public: isPublic }),
    /** The grants of every plant, or of one: a plant that does not exist is not found, as everywhere a name is given. */
    async list(filter: { plantId?: PlantId }): Promise<GrantInfo[]> {
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
    },
  };
}

export type GrantRepository = ReturnType<typeof grantRepository>;
