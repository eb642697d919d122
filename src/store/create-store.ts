import type { CatalogueRecord } from '../import-format/records.js';
import { exportCatalogue } from './catalogue-export.js';
import { importCatalogue } from './catalogue-import.js';
import type { StoreDialect } from './dialect.js';
import { addGrant, listGrants, operatorChange, removeGrant } from './repositories/grants.js';
import { changeAccess, readAccess } from './repositories/plant-access.js';
import { addGroup, addMember, listGroups, removeGroup, removeMember } from './repositories/groups.js';
import { listPlants, plantWrites } from './repositories/plants.js';
import { addToken, listTokens, revokeToken } from './repositories/tokens.js';
import { addUser, listUsers, provisionUser, removeUser, setAdmin } from './repositories/users.js';
import { TimedReads } from './timed-reads.js';
import type { Database } from './schema.js';
import type { CatalogueCounts, Store } from './store.js';
import { WebhookOutbox } from './webhook-outbox.js';

/**
 * A Store composed from a database's dialect (dialect.ts) and the repositories both databases share: every role of
 * store.ts, each a plain function of the dialect. Nothing here differs between SQLite and PostgreSQL.
 */
export function createStore(d: StoreDialect): Store {
  const requests = new TimedReads(d);
  const plants = plantWrites(d);
  return {
    backend: d.backend,
    changes: d.changes,
    webhooks: new WebhookOutbox(
      () => d.db,
      () => d.unfollowedWrites,
      d.statements,
    ),

    // The request path.
    findToken: (hash) => requests.findToken(hash),
    findUser: (name) => requests.findUser(name),
    provisionUser: (name) => provisionUser(d, name),
    listVisiblePlants: (viewer, page) => requests.listVisiblePlants(viewer, page),
    createPlant: plants.createPlant,
    deletePlant: plants.deletePlant,
    readAccess: (actor, id) => readAccess(d, actor, id),
    changeAccess: (actor, id, change, ifVersion) => changeAccess(d, actor, id, change, ifVersion),

    // Health.
    ping: async () => requests.ping(),
    ...(d.health.followFile ? { followFile: d.health.followFile } : {}),
    timeQueries: (timer) => requests.timeQueries(timer),
    poolStats: () => d.health.poolStats(),

    // Administration.
    addUser: (name, admin) => addUser(d, name, admin),
    setAdmin: (name, admin) => setAdmin(d, name, admin),
    removeUser: (name, opts) => removeUser(d, name, opts),
    listUsers: () => listUsers(d),
    addGroup: (name) => addGroup(d, name),
    removeGroup: (name) => removeGroup(d, name),
    addMember: (group, user) => addMember(d, group, user),
    removeMember: (group, user) => removeMember(d, group, user),
    listGroups: () => listGroups(d),
    listPlants: (filter) => listPlants(d, filter),
    addGrant: (plantId, grantee) => addGrant(d, plantId, grantee),
    removeGrant: (plantId, grantee) => removeGrant(d, plantId, grantee),
    setPublic: (plantId, isPublic) => operatorChange(d, plantId, { kind: 'public', public: isPublic }),
    listGrants: (filter) => listGrants(d, filter),
    addToken: (token) => addToken(d, token),
    revokeToken: (id) => revokeToken(d, id),
    listTokens: (filter) => listTokens(d, filter),

    // The whole catalogue.
    async importRecords(batches, progress) {
      const summary = await d.bulk.importing((target) => importCatalogue(batches, target, progress));
      await d.changes.catchUp();
      return summary;
    },
    exportRecords: (): AsyncGenerator<CatalogueRecord> => exportCatalogue(() => d.bulk.exportSnapshot()),
    counts: () => counts(d),
    backup: (file) => d.bulk.backup(file),

    close: () => d.close(),
  };
}

/** Row counts, for `doctor` and for sizing the export progress bar; `grants` counts user and group grants together. */
async function counts(d: StoreDialect): Promise<CatalogueCounts> {
  const count = async (table: keyof Database) =>
    Number(
      (
        await d.db
          .selectFrom(table)
          .select((eb) => eb.fn.countAll().as('n'))
          .executeTakeFirstOrThrow()
      ).n,
    );
  const [users, groups, plants, userGrants, groupGrants, tokens] = await Promise.all(
    (['users', 'groups', 'plants', 'plant_user_grants', 'plant_group_grants', 'tokens'] as const).map(count),
  );
  return { users: users!, groups: groups!, plants: plants!, grants: userGrants! + groupGrants!, tokens: tokens! };
}
