import { bulkCatalogue } from './bulk.js';
import { credentialLookup } from './credentials.js';
import type { DatabaseSeam } from './seam.js';
import { storeHealth } from './health.js';
import { HotQueries } from './hot-queries.js';
import { listingPages } from './listing.js';
import { grantRepository } from './repositories/grants.js';
import { groupRepository } from './repositories/groups.js';
import { accessRepository } from './repositories/plant-access.js';
import { plantRepository } from './repositories/plants.js';
import { tokenRepository } from './repositories/tokens.js';
import { userRepository } from './repositories/users.js';
import type { Store } from './store.js';
import { WebhookOutbox } from './webhook-outbox.js';

/**
 * A Store composed from a database's seam (seam.ts): each role built by its own module, none differing by database.
 * `migrated` names the migrations the seam's opening applied.
 */
export function createStore(d: DatabaseSeam, migrated: readonly string[]): Store {
  const hot = new HotQueries(d);
  return {
    credentials: credentialLookup(d, hot),
    listing: listingPages(d, hot),
    plants: plantRepository(d),
    access: accessRepository(d),
    users: userRepository(d),
    groups: groupRepository(d),
    grants: grantRepository(d),
    tokens: tokenRepository(d),
    bulk: bulkCatalogue(d),
    webhooks: new WebhookOutbox(
      () => d.db,
      () => d.unfollowedWrites,
      d.statements,
    ),
    health: storeHealth(d, hot),
    changes: d.changes,
    migrated,
    close: () => d.close(),
  };
}
