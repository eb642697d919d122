import { sql, type Kysely, type Migration } from 'kysely';
import { UNLESS_BULK_LOAD } from './0003-change-log.js';

type Dialect = 'sqlite' | 'postgres';

/** Every plant shared with a user through a group, with the group (schema-names.ts names it for running code). */
const MEMBER_GRANTS = 'plant_member_grants';

/** Fills the member grants from the memberships and group grants as they stand. */
const FILL_MEMBER_GRANTS =
  `INSERT INTO ${MEMBER_GRANTS} (user_id, plant_id, group_id) SELECT m.user_id, g.plant_id, g.group_id ` +
  'FROM plant_group_grants g JOIN group_members m ON m.group_id = g.group_id';

/**
 * What each change of a membership or a group grant does to the member grants, as trigger bodies on `OLD` and
 * `NEW` (the same text in both dialects): a membership brings the group's grants to the member, a grant brings the
 * plant to the group's members, and either taken away takes back exactly the rows it brought.
 */
const MAINTAINED = {
  group_members: {
    insert: `INSERT INTO ${MEMBER_GRANTS} (user_id, plant_id, group_id) SELECT NEW.user_id, plant_id, NEW.group_id FROM plant_group_grants WHERE group_id = NEW.group_id`,
    delete: `DELETE FROM ${MEMBER_GRANTS} WHERE user_id = OLD.user_id AND group_id = OLD.group_id`,
  },
  plant_group_grants: {
    insert: `INSERT INTO ${MEMBER_GRANTS} (user_id, plant_id, group_id) SELECT user_id, NEW.plant_id, NEW.group_id FROM group_members WHERE group_id = NEW.group_id`,
    delete: `DELETE FROM ${MEMBER_GRANTS} WHERE plant_id = OLD.plant_id AND group_id = OLD.group_id`,
  },
} as const;

type MaintainedTable = keyof typeof MAINTAINED;

const memberGrantTriggerName = (table: MaintainedTable, operation: 'insert' | 'update' | 'delete'): string =>
  `${table}_member_grants_${operation}`;

/**
 * The plants shared with a user through the user's groups, kept as rows of their own by triggers, so that a page
 * of a user in many groups reads one index range in catalogue order instead of one per group: the listing's cost
 * grows with its limit, not with the user's groups (store/listing-sql.ts). A row names the group that brought it,
 * so that a user in two groups a plant is shared with keeps it while either stays.
 */
export function memberGrants(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => (dialect === 'postgres' ? addPostgres(db) : addSqlite(db)),
  };
}

async function addSqlite(db: Kysely<any>): Promise<void> {
  await sql
    .raw(
      `CREATE TABLE ${MEMBER_GRANTS} (user_id INTEGER NOT NULL, plant_id INTEGER NOT NULL, group_id INTEGER NOT NULL,
        PRIMARY KEY (user_id, plant_id, group_id)) WITHOUT ROWID`,
    )
    .execute(db);
  await sql.raw(`CREATE INDEX ${MEMBER_GRANTS}_by_plant ON ${MEMBER_GRANTS} (plant_id, group_id)`).execute(db);
  for (const [table, body] of Object.entries(MAINTAINED) as Array<[MaintainedTable, (typeof MAINTAINED)[MaintainedTable]]>) {
    const insert = body.insert.replace('INSERT INTO', 'INSERT OR IGNORE INTO');
    await sql.raw(`CREATE TRIGGER ${memberGrantTriggerName(table, 'insert')} AFTER INSERT ON ${table} BEGIN ${insert}; END`).execute(db);
    await sql
      .raw(`CREATE TRIGGER ${memberGrantTriggerName(table, 'delete')} AFTER DELETE ON ${table} BEGIN ${body.delete}; END`)
      .execute(db);
    await sql
      .raw(`CREATE TRIGGER ${memberGrantTriggerName(table, 'update')} AFTER UPDATE ON ${table} BEGIN ${body.delete}; ${insert}; END`)
      .execute(db);
  }
  await sql.raw(FILL_MEMBER_GRANTS.replace('INSERT INTO', 'INSERT OR IGNORE INTO')).execute(db);
}

async function addPostgres(db: Kysely<any>): Promise<void> {
  await sql
    .raw(
      `CREATE TABLE ${MEMBER_GRANTS} (user_id bigint NOT NULL, plant_id bigint NOT NULL, group_id bigint NOT NULL,
        PRIMARY KEY (user_id, plant_id, group_id))`,
    )
    .execute(db);
  await sql.raw(`CREATE INDEX ${MEMBER_GRANTS}_by_plant ON ${MEMBER_GRANTS} (plant_id, group_id)`).execute(db);
  for (const [table, body] of Object.entries(MAINTAINED) as Array<[MaintainedTable, (typeof MAINTAINED)[MaintainedTable]]>) {
    const fn = `plantstore_member_grants_${table}`;
    // search_path fixed at creation, as the change log's: a writer with another search_path still keeps this schema's rows.
    await sql
      .raw(
        `CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP IN ('UPDATE', 'DELETE') THEN
    ${body.delete};
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    ${body.insert} ON CONFLICT DO NOTHING;
  END IF;
  RETURN NULL;
END $$`,
      )
      .execute(db);
    // An import (BULK_LOAD_SETTING) writes the rows of what it added in one statement instead.
    await sql
      .raw(
        `CREATE TRIGGER ${table}_member_grants AFTER INSERT OR UPDATE OR DELETE ON ${table} FOR EACH ROW ` +
          `WHEN (${UNLESS_BULK_LOAD}) EXECUTE FUNCTION ${fn}()`,
      )
      .execute(db);
    // TRUNCATE fires no row trigger: the member grants follow whole.
    await sql
      .raw(
        `CREATE FUNCTION ${fn}_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN TRUNCATE ${MEMBER_GRANTS}; ${FILL_MEMBER_GRANTS} ON CONFLICT DO NOTHING; RETURN NULL; END $$`,
      )
      .execute(db);
    await sql
      .raw(
        `CREATE TRIGGER ${table}_member_grants_truncated AFTER TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}_truncated()`,
      )
      .execute(db);
  }
  await sql.raw(`${FILL_MEMBER_GRANTS} ON CONFLICT DO NOTHING`).execute(db);
}
