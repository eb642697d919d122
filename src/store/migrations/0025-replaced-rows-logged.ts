import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * SQLite: a row that plain SQL's `INSERT OR REPLACE` (or `REPLACE`, or `UPDATE OR REPLACE`) deletes to make room is
 * logged as a delete logs it. SQLite deletes such a row without running its delete triggers (unless
 * `recursive_triggers` is on, which the `sqlite3` shell leaves off), so the change log named only the new row: a
 * plant replaced by its public id at another position stayed, as it was, on every cached page that showed it (a
 * public plant made private stayed on everyone's), and a user replaced by name kept their cached tokens working.
 *
 * A trigger before each insert, and before each update of a unique key, logs the rows holding one of the new row's
 * unique keys, as the table's delete trigger would (a plant with its grants, whose grantees' pages showed it). Logging
 * a row that is not replaced after all (a plain insert that fails on the key rolls the log back with it; `INSERT OR
 * IGNORE` does not) only empties caches. Tables keyed by their whole logged key (grants, memberships) need none: the
 * row that replaces one is logged with the same keys.
 *
 * PostgreSQL has no REPLACE: `INSERT … ON CONFLICT DO UPDATE` runs the update triggers.
 */
export function replacedRowsLogged(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'sqlite') return;
      for (const [table, { keys, log }] of Object.entries(REPLACEABLE)) {
        const holding = (extra: string) =>
          `(SELECT * FROM ${table} WHERE (${keys.map((key) => `${key} = NEW.${key}`).join(' OR ')})${extra})`;
        // One probe of each key's index, and on an update only of a key that changes. A plant's id in the API is given
        // NULL and numbered by an update to one more than any used (migration 0007), which no row holds: that update
        // probes nothing.
        const onInsert = keys.map((key) => `(NEW.${key} IS NOT NULL AND EXISTS (SELECT 1 FROM ${table} WHERE ${key} = NEW.${key}))`);
        const onUpdate = keys.map(
          (key) =>
            `(OLD.${key} IS NOT NULL AND NEW.${key} IS NOT OLD.${key} AND EXISTS (SELECT 1 FROM ${table} WHERE ${key} = NEW.${key} AND id <> OLD.id))`,
        );
        const triggers = [
          ['insert', 'INSERT', onInsert, holding('')],
          ['update', `UPDATE OF ${keys.join(', ')}`, onUpdate, holding(' AND id <> OLD.id')],
        ] as const;
        for (const [suffix, event, when, rows] of triggers) {
          await sql
            .raw(
              `CREATE TRIGGER ${table}_logged_replaced_by_${suffix} BEFORE ${event} ON ${table} WHEN ${when.join(' OR ')} BEGIN ${log(rows).join('; ')}; END`,
            )
            .execute(db);
        }
      }
    },
  };
}

/** Each table with a unique key besides its logged key: its unique columns, and its delete trigger's log as a set. */
const REPLACEABLE: Record<string, { keys: string[]; log: (rows: string) => string[] }> = {
  users: { keys: ['id', 'name'], log: (rows) => [`INSERT INTO change_log (table_name, user_id) SELECT 'users', id FROM ${rows}`] },
  groups: {
    keys: ['id', 'name'],
    log: (rows) => [`INSERT INTO change_log (table_name, group_id, name) SELECT 'groups', id, name FROM ${rows}`],
  },
  tokens: {
    keys: ['id', 'token_hash'],
    log: (rows) => [`INSERT INTO change_log (table_name, token_id, user_id) SELECT 'tokens', id, user_id FROM ${rows}`],
  },
  plants: {
    keys: ['id', 'api_id'],
    log: (rows) => [
      `INSERT INTO change_log (table_name, plant_id, user_id, is_public) SELECT 'plants', id, owner_id, is_public FROM ${rows}`,
      `INSERT INTO change_log (table_name, plant_id, user_id) SELECT 'plant_user_grants', plant_id, user_id FROM plant_user_grants WHERE plant_id IN (SELECT id FROM ${rows})`,
      `INSERT INTO change_log (table_name, plant_id, group_id) SELECT 'plant_group_grants', plant_id, group_id FROM plant_group_grants WHERE plant_id IN (SELECT id FROM ${rows})`,
    ],
  },
};
