import type { BulkCatalogue } from './bulk.js';
import type { ChangeFeed } from './change-log.js';
import type { Credentials } from './credentials.js';
import type { Health } from './health.js';
import type { Listing } from './listing.js';
import type { AccessRepository } from './repositories/plant-access.js';
import type { GrantRepository } from './repositories/grants.js';
import type { GroupRepository } from './repositories/groups.js';
import type { PlantRepository } from './repositories/plants.js';
import type { TokenRepository } from './repositories/tokens.js';
import type { UserRepository } from './repositories/users.js';
import type { WebhookOutbox } from './webhook-outbox.js';

export type * from './records.js';
export type { Credentials } from './credentials.js';
export type { Health } from './health.js';
export type { Listing } from './listing.js';

/**
 * A backend (SQLite, PostgreSQL) as a record of roles, each built by its own module from the database's seam
 * (seam.ts) and declared beside its code. Each consumer takes the role it uses: the authenticator `credentials`,
 * `GET /plants` `listing`, the write routes `plants` and `access`, health routes and metrics `health`, each CLI
 * command its own. Names identify users and groups; a plant has a public id and a catalogue position
 * (catalogue/plant-ids.ts).
 */
export interface Store {
  readonly credentials: Credentials;
  readonly listing: Listing;
  /** Plants created, deleted and listed with the actor's rights (catalogue/access-rule.ts). */
  readonly plants: PlantRepository;
  /** Who has access to a plant, with the actor's rights. */
  readonly access: AccessRepository;
  readonly users: UserRepository;
  readonly groups: GroupRepository;
  /** The operator's shares and the public flag. */
  readonly grants: GrantRepository;
  readonly tokens: TokenRepository;
  readonly bulk: BulkCatalogue;
  /** The webhooks' endpoints and outbox: the CLI registers endpoints, serving processes deliver. */
  readonly webhooks: WebhookOutbox;
  readonly health: Health;
  /**
   * Every committed change, from any writer, as the change log records it: what the caches follow. Started by
   * its first `sync()`, so CLI commands never follow it.
   */
  readonly changes: ChangeFeed;
  /** The migrations opening the store applied, in order: none when its schema was up to date. */
  readonly migrated: readonly string[];
  close(): Promise<void>;
}
