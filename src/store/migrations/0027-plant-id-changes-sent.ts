import { sql, type Kysely, type Migration } from 'kysely';
import { UNLESS_BULK_LOAD } from './0003-change-log.js';
import { postgresRecord } from './0016-webhook-event-types.js';
import { record as sqliteRecord, taken } from './0020-webhook-event-ids.js';
import { FLOORED_NOW } from './0022-webhook-clock-floored.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * A plant whose id in the API plain SQL changes (`UPDATE plants SET api_id = …`) is, to a receiver, the old id's
 * plant deleted and the new id's created: both events are sent, each to the endpoints that take its type. Only the
 * events of a name or tag changed were sent, so a receiver mirroring the catalogue kept the plant under its old id.
 * The service never changes a numbered plant's id (SQLite numbers a new plant by an update from NULL, whose event is
 * 0016's `plant.created`), so this costs its writes nothing. An `UPDATE OR REPLACE` on SQLite that takes another
 * plant's id deletes that plant silently; the new `plant.created` of that id supersedes it for a receiver.
 */
export function plantIdChangesSent(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect === 'sqlite') {
        const changed = (type: string, row: 'OLD' | 'NEW', also: string) =>
          `CREATE TRIGGER plants_webhook_id_${row === 'OLD' ? 'left' : 'taken'} AFTER UPDATE OF api_id ON plants ` +
          `WHEN OLD.api_id IS NOT NULL AND NEW.api_id IS NOT OLD.api_id${also} AND ${taken(type)} BEGIN ${sqliteRecord(type, row)} END`;
        await sql.raw(changed('plant.deleted', 'OLD', '')).execute(db);
        await sql.raw(changed('plant.created', 'NEW', ' AND NEW.api_id IS NOT NULL')).execute(db);
        return;
      }
      await sql
        .raw(
          `CREATE FUNCTION plantstore_webhook_id_changed() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  event bigint;
  now bigint := ${FLOORED_NOW};
BEGIN
  ${postgresRecord('plant.deleted', 'OLD')}
  IF NEW.api_id IS NOT NULL THEN ${postgresRecord('plant.created', 'NEW')}
  END IF;
  RETURN NULL;
END $$`,
        )
        .execute(db);
      await sql
        .raw(
          `CREATE TRIGGER plants_webhook_id_changed AFTER UPDATE OF api_id ON plants FOR EACH ROW ` +
            `WHEN (OLD.api_id IS NOT NULL AND NEW.api_id IS DISTINCT FROM OLD.api_id ` +
            `AND ${UNLESS_BULK_LOAD}) EXECUTE FUNCTION plantstore_webhook_id_changed()`,
        )
        .execute(db);
    },
  };
}
