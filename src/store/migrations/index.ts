import { Migrator, type Kysely, type Migration, type MigrationProvider } from 'kysely';
import { initialSchema } from './0001-initial.js';
import { changeNotifications } from './0002-change-notifications.js';
import { changeLog } from './0003-change-log.js';
import { userNameKeys } from './0004-user-name-keys.js';
import { plantIds } from './0005-plant-ids.js';
import { webhooks } from './0006-webhooks.js';
import { plantIdWatermark } from './0007-plant-id-watermark.js';
import { changeAnnouncements } from './0008-change-announcements.js';
import { webhookClock } from './0009-webhook-clock.js';
import { webhookMessageIds } from './0010-webhook-message-ids.js';
import { webhookDueByEndpoint } from './0011-webhook-due-by-endpoint.js';
import { memberGrants } from './0012-member-grants.js';
import { memberGrantsLocked } from './0013-member-grants-locked.js';
import { groupSizes } from './0014-group-sizes.js';
import { groupGrantsByPlant } from './0015-group-grants-by-plant.js';
import { webhookEventTypes } from './0016-webhook-event-types.js';
import { plantsByTag } from './0017-plants-by-tag.js';
import { grantsByTag } from './0018-grants-by-tag.js';
import { grantTagsFirst } from './0019-grant-tags-first.js';
import { webhookEventIds } from './0020-webhook-event-ids.js';
import { groupSizesByRow } from './0021-group-sizes-by-row.js';
import { webhookClockFloored } from './0022-webhook-clock-floored.js';
import { deletedPlantShared } from './0023-deleted-plant-shared.js';
import { grantTagsReadCommitted } from './0024-grant-tags-read-committed.js';
import { replacedRowsLogged } from './0025-replaced-rows-logged.js';
import { replacedPlantsSent } from './0026-replaced-plants-sent.js';
import { plantIdChangesSent } from './0027-plant-id-changes-sent.js';
import { plantIdsKeptByEveryWriter } from './0028-plant-ids-kept-by-every-writer.js';

type Dialect = 'sqlite' | 'postgres';

/** Every migration, listed explicitly (no directory scanning), in order. Names never change once released. */
function migrations(dialect: Dialect): Record<string, Migration> {
  return {
    '0001-initial': initialSchema(dialect),
    '0002-change-notifications': changeNotifications(dialect),
    '0003-change-log': changeLog(dialect),
    '0004-user-name-keys': userNameKeys(dialect),
    '0005-plant-ids': plantIds(dialect),
    '0006-webhooks': webhooks(dialect),
    '0007-plant-id-watermark': plantIdWatermark(dialect),
    '0008-change-announcements': changeAnnouncements(dialect),
    '0009-webhook-clock': webhookClock(dialect),
    '0010-webhook-message-ids': webhookMessageIds(dialect),
    '0011-webhook-due-by-endpoint': webhookDueByEndpoint(),
    '0012-member-grants': memberGrants(dialect),
    '0013-member-grants-locked': memberGrantsLocked(dialect),
    '0014-group-sizes': groupSizes(dialect),
    '0015-group-grants-by-plant': groupGrantsByPlant(dialect),
    '0016-webhook-event-types': webhookEventTypes(dialect),
    '0017-plants-by-tag': plantsByTag(dialect),
    '0018-grants-by-tag': grantsByTag(dialect),
    '0019-grant-tags-first': grantTagsFirst(dialect),
    '0020-webhook-event-ids': webhookEventIds(dialect),
    '0021-group-sizes-by-row': groupSizesByRow(dialect),
    '0022-webhook-clock-floored': webhookClockFloored(dialect),
    '0023-deleted-plant-shared': deletedPlantShared(dialect),
    '0024-grant-tags-read-committed': grantTagsReadCommitted(dialect),
    '0025-replaced-rows-logged': replacedRowsLogged(dialect),
    '0026-replaced-plants-sent': replacedPlantsSent(dialect),
    '0027-plant-id-changes-sent': plantIdChangesSent(dialect),
    '0028-plant-ids-kept-by-every-writer': plantIdsKeptByEveryWriter(dialect),
  };
}

/** The names of the migrations this version knows, in order (what `doctor` compares a database against). */
export function knownMigrationNames(): string[] {
  return Object.keys(migrations('sqlite'));
}

class ListedMigrations implements MigrationProvider {
  constructor(private readonly dialect: Dialect) {}
  async getMigrations(): Promise<Record<string, Migration>> {
    return migrations(this.dialect);
  }
}

/** A database migrated by a later release than this one, which cannot know what its schema holds. */
function newerSchema(migration: string): Error {
  return new Error(
    `the database has a migration this version of plantstore does not know (${migration}): it was written by a newer version; ` +
      'run the plantstore version that migrated it, or restore a backup made before the upgrade',
  );
}

/** Brings the schema to the latest version; throws with the failing migration's name on error. */
export async function migrateToLatest(db: Kysely<any>, dialect: Dialect, schema?: string): Promise<string[]> {
  // With a schema, the bookkeeping tables live in it too (several Plant Stores can share one database).
  const migrator = new Migrator({ db, provider: new ListedMigrations(dialect), ...(schema ? { migrationTableSchema: schema } : {}) });
  // On PostgreSQL, the dialect's introspector looks only at our own schema (see own-schema-dialect.ts), so
  // schemas dropped meanwhile by others cannot fail this.
  const { error, results } = await migrator.migrateToLatest();
  if (error) {
    const failed = results?.find((r) => r.status === 'Error')?.migrationName;
    // Failing before any migration ran (no database, no connection) is not a migration's failure.
    const cause = error instanceof Error ? error : new Error(JSON.stringify(error));
    const unknown = /previously executed migration (\S+) is missing/.exec(cause.message)?.[1];
    if (unknown !== undefined) throw newerSchema(unknown);
    if (failed === undefined) throw cause;
    throw new Error(`database migration ${failed} failed: ${cause.message}`);
  }
  return (results ?? []).filter((r) => r.status === 'Success').map((r) => r.migrationName);
}
