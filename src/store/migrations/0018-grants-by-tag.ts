import { sql, type Kysely, type Migration } from 'kysely';
import { UNLESS_BULK_LOAD } from './0003-change-log.js';

type Dialect = 'sqlite' | 'postgres';

/**
 * The tag in the access rule's ranges: every grant row carries its plant's tag, and each range has an index of its
 * tagged entries by (key, tag, position), so that a page of one tag reads the same ranges as an untagged page, each
 * from the cursor on, however rare the tag (store/listing-sql.ts). Before, a rare tag's page checked each of the
 * tag's plants against the rule, two or three index probes a plant.
 *
 * The tags are derived rows, kept by triggers for every writer:
 * - a grant written takes its plant's tag: a trigger after the row mends it when it differs (a writer that gives the
 *   right tag, as imports do, writes the row once);
 * - a change of a plant's tag rewrites the tags of its grants and member grants.
 *
 * On PostgreSQL, under concurrent writers: a user or group grant reads its plant's tag under a share lock of the
 * plant's row, which a change of tag (an update of that row) waits for, and which waits for it. Member grants are
 * written under their group's lock (migrations 0013 and 0014) and read the plant's tag without a lock; a change of
 * tag takes the locks of the plant's groups, in id order, before it rewrites their rows, so it waits for any
 * membership or grant of those groups being written, and they for it. Each statement of a READ COMMITTED
 * transaction reads anew, so whichever comes second reads what the first committed. (As first released, a group
 * grant's tag trigger fired after the one writing its member grants, which then read the tag unlocked, and a change
 * of tag missed a group a grant was moved to meanwhile: migration 0019 renames the tag triggers to fire first and
 * has a change of tag lock the groups once it has rewritten the grants.)
 *
 * Updates of the tag alone fire none of the grant tables' other triggers (the change log, the member grants and
 * group sizes): those now fire on updates of their key columns only. A change of tag logs the plant's grants already.
 * Imports write the tags themselves (they run without the triggers).
 */
export function grantsByTag(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => (dialect === 'postgres' ? addPostgres(db) : addSqlite(db)),
  };
}

/** The grant tables, each with its key columns (the grantee's first). */
const GRANT_TABLES = {
  plant_user_grants: ['user_id', 'plant_id'],
  plant_group_grants: ['group_id', 'plant_id'],
  plant_member_grants: ['user_id', 'plant_id', 'group_id'],
} as const;

type GrantTable = keyof typeof GRANT_TABLES;

const TABLES = Object.keys(GRANT_TABLES) as GrantTable[];

/** The new indexes: each grant table's tagged rows by grantee, tag and position; plants by owner and tag, public by tag. */
const TAG_RANGE_INDEXES = {
  plant_user_grants_by_tag: 'ON plant_user_grants (user_id, tag, plant_id) WHERE tag IS NOT NULL',
  plant_group_grants_by_tag: 'ON plant_group_grants (group_id, tag, plant_id) WHERE tag IS NOT NULL',
  plant_member_grants_by_tag: 'ON plant_member_grants (user_id, tag, plant_id) WHERE tag IS NOT NULL',
  plants_by_owner_and_tag: 'ON plants (owner_id, tag, id) WHERE tag IS NOT NULL',
  plants_public_by_tag: 'ON plants (tag, id) WHERE is_public = 1 AND tag IS NOT NULL',
} as const;

const PLANT_TAG = (row: string) => `(SELECT tag FROM plants WHERE id = ${row}.plant_id)`;

/** The condition that names row `NEW` of `table` by its key. */
const newRow = (table: GrantTable): string => GRANT_TABLES[table].map((column) => `${column} = NEW.${column}`).join(' AND ');

/** The statements that rewrite the tags of plant `plant`'s grants (the same text in both dialects): user grants, group grants, member grants. */
export const rewriteTags = (plant: string, tag: string): [users: string, groups: string, members: string] => [
  `UPDATE plant_user_grants SET tag = ${tag} WHERE plant_id = ${plant}`,
  `UPDATE plant_group_grants SET tag = ${tag} WHERE plant_id = ${plant}`,
  // By the plant's groups: member grants are indexed by group, not by plant.
  `UPDATE plant_member_grants SET tag = ${tag} WHERE group_id IN (SELECT group_id FROM plant_group_grants WHERE plant_id = ${plant}) AND plant_id = ${plant}`,
];

/**
 * The PostgreSQL function (`FUNCTION …`, to follow `CREATE` or `CREATE OR REPLACE`) that gives a grant row of `table`
 * its plant's tag; `guard`, when given, runs first (migration 0024's refusal at a stricter isolation level).
 */
export function grantTagFunction(table: GrantTable, guard = ''): string {
  // A member grant is written under its group's lock, which a change of tag takes too: no lock of the plant.
  const lock = table === 'plant_member_grants' ? '' : ' FOR SHARE';
  return `FUNCTION plantstore_${table}_tag() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
  plant_tag text;
BEGIN
${guard === '' ? '' : `  ${guard}\n`}  SELECT tag INTO plant_tag FROM plants WHERE id = NEW.plant_id${lock};
  IF NEW.tag IS DISTINCT FROM plant_tag THEN
    UPDATE ${table} SET tag = plant_tag WHERE ${newRow(table)};
  END IF;
  RETURN NULL;
END $$`;
}

async function run(db: Kysely<any>, statements: string[]): Promise<void> {
  for (const statement of statements) await sql.raw(statement).execute(db);
}

async function addSqlite(db: Kysely<any>): Promise<void> {
  // Triggers of the grant tables that fire on any update fire on updates of their key columns only (see above).
  const triggers = (
    await sql<{ name: string; table: 'plant_user_grants' | 'plant_group_grants'; sql: string }>`SELECT name, tbl_name AS "table", sql
    FROM sqlite_master WHERE type = 'trigger' AND tbl_name IN ('plant_user_grants', 'plant_group_grants') AND sql LIKE '%AFTER UPDATE ON%'`.execute(
      db,
    )
  ).rows;
  for (const { name, table, sql: text } of triggers) {
    await run(db, [`DROP TRIGGER ${name}`, text.replace(/AFTER UPDATE ON/, `AFTER UPDATE OF ${GRANT_TABLES[table].join(', ')} ON`)]);
  }
  for (const table of TABLES) {
    const mend = `UPDATE ${table} SET tag = ${PLANT_TAG('NEW')} WHERE ${newRow(table)}`;
    await run(db, [
      `ALTER TABLE ${table} ADD COLUMN tag TEXT`,
      `UPDATE ${table} SET tag = ${PLANT_TAG(table)}`,
      `CREATE TRIGGER ${table}_tag_insert AFTER INSERT ON ${table} WHEN NEW.tag IS NOT ${PLANT_TAG('NEW')} BEGIN ${mend}; END`,
      `CREATE TRIGGER ${table}_tag_update AFTER UPDATE OF plant_id, tag ON ${table} WHEN NEW.tag IS NOT ${PLANT_TAG('NEW')} BEGIN ${mend}; END`,
    ]);
  }
  await run(db, [
    `CREATE TRIGGER plants_tag_to_grants AFTER UPDATE OF tag ON plants WHEN OLD.tag IS NOT NEW.tag BEGIN ${rewriteTags('NEW.id', 'NEW.tag').join('; ')}; END`,
    ...Object.entries(TAG_RANGE_INDEXES).map(([name, on]) => `CREATE INDEX ${name} ${on}`),
  ]);
}

async function addPostgres(db: Kysely<any>): Promise<void> {
  // Triggers of the grant tables that fire on any update fire on updates of their key columns only (see above).
  const keyed = (table: 'plant_user_grants' | 'plant_group_grants', trigger: string, fn: string) => [
    `DROP TRIGGER ${trigger} ON ${table}`,
    `CREATE TRIGGER ${trigger} AFTER INSERT OR UPDATE OF ${GRANT_TABLES[table].join(', ')} OR DELETE ON ${table} FOR EACH ROW ` +
      `WHEN (${UNLESS_BULK_LOAD}) EXECUTE FUNCTION ${fn}()`,
  ];
  await run(db, [
    ...keyed('plant_user_grants', 'plant_user_grants_logged', 'plantstore_log_plant_user_grants'),
    ...keyed('plant_group_grants', 'plant_group_grants_logged', 'plantstore_log_plant_group_grants'),
    ...keyed('plant_group_grants', 'plant_group_grants_member_grants', 'plantstore_member_grants_plant_group_grants'),
  ]);
  for (const table of TABLES) {
    await run(db, [
      `ALTER TABLE ${table} ADD COLUMN tag text`,
      `UPDATE ${table} g SET tag = p.tag FROM plants p WHERE p.id = g.plant_id AND p.tag IS NOT NULL`,
      // After the row, not before: a BEFORE row trigger, even one whose condition is false, makes COPY write row
      // by row instead of in batches, which made an import of 10^6 grants seconds slower.
      `CREATE ${grantTagFunction(table)}`,
      `CREATE TRIGGER ${table}_tag AFTER INSERT OR UPDATE OF plant_id, tag ON ${table} FOR EACH ROW WHEN (${UNLESS_BULK_LOAD}) ` +
        `EXECUTE FUNCTION plantstore_${table}_tag()`,
    ]);
  }
  await run(db, [
    `CREATE FUNCTION plantstore_plant_tag_to_grants() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM 1 FROM groups WHERE id IN (SELECT group_id FROM plant_group_grants WHERE plant_id = NEW.id) ORDER BY id FOR NO KEY UPDATE;
  ${rewriteTags('NEW.id', 'NEW.tag').join(';\n  ')};
  RETURN NULL;
END $$`,
    `CREATE TRIGGER plants_tag_to_grants AFTER UPDATE OF tag ON plants FOR EACH ROW ` +
      `WHEN (OLD.tag IS DISTINCT FROM NEW.tag AND ${UNLESS_BULK_LOAD}) EXECUTE FUNCTION plantstore_plant_tag_to_grants()`,
    ...Object.entries(TAG_RANGE_INDEXES).map(([name, on]) => `CREATE INDEX ${name} ${on}`),
  ]);
}
