import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * Member grants only for small groups; large ones are read group by group.
 *
 * A member grant is a row per member, plant and group, so joining a group given 10^6 plants wrote 10^6 rows, and
 * sharing a plant with a group of 10^5 members wrote 10^5. Now a group keeps member grants only while it is small
 * (at most RANGED.plants plants and RANGED.members members): a membership or a grant writes at most that many rows.
 * A larger group is "ranged": a listing reads its grants range by range, as it reads a JWT's claimed groups
 * (store/listing-sql.ts). `group_sizes` counts each group's plants and members and says which groups are ranged;
 * the same triggers keep the counts, under the same group lock on PostgreSQL (migration 0013). A group goes
 * ranged past either bound and back only at half of both, so that no group crossing a bound back and forth
 * rewrites its member grants each time. The member grants of a group are read by group when it goes ranged:
 * their index is by (group_id, plant_id) now, which also serves the removal of one grant.
 */
export function groupSizes(dialect: Dialect): Migration {
  return {
    up: (db: Kysely<any>) => (dialect === 'postgres' ? addPostgres(db) : addSqlite(db)),
  };
}

/** The bounds, in a table of one row (`group_access_bounds`): tests lower them to make every group ranged at once. */
const RANGED = { plants: 32, members: 256 } as const;
const bound = (column: 'plants' | 'members') => `(SELECT ${column} FROM group_access_bounds)`;
const over = (row = '') => `(${row}plants > ${bound('plants')} OR ${row}members > ${bound('members')})`;
const underHalf = (row = '') => `(${row}plants <= ${bound('plants')} / 2 AND ${row}members <= ${bound('members')} / 2)`;
const OVER = over();
const UNDER_HALF = underHalf();
const BOUNDS_TABLE = (integer: string) => [
  `CREATE TABLE group_access_bounds (id integer PRIMARY KEY CHECK (id = 1), plants ${integer} NOT NULL, members ${integer} NOT NULL)`,
  `INSERT INTO group_access_bounds (id, plants, members) VALUES (1, ${RANGED.plants}, ${RANGED.members})`,
];

/**
 * Brings the groups whose ids `ids` (SQL of a set of ids) selects to what their rows say: their counts, whether
 * they are ranged (past a bound, or still ranged above half of both), and member grants exactly for the others.
 */
export function resizeStatements(ids: string, insert: (sql: string) => string): string[] {
  return [
    `INSERT INTO group_sizes (group_id, plants, members, ranged) SELECT g.id, ` +
      `(SELECT count(*) FROM plant_group_grants WHERE group_id = g.id), (SELECT count(*) FROM group_members WHERE group_id = g.id), 0 ` +
      `FROM groups g WHERE g.id IN ${ids} ON CONFLICT (group_id) DO UPDATE SET plants = excluded.plants, members = excluded.members`,
    `UPDATE group_sizes SET ranged = CASE WHEN ${OVER} THEN 1 WHEN ${UNDER_HALF} THEN 0 ELSE ranged END WHERE group_id IN ${ids}`,
    `DELETE FROM plant_member_grants WHERE group_id IN (SELECT group_id FROM group_sizes WHERE group_id IN ${ids} AND ranged = 1)`,
    insert(
      `INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT m.user_id, g.plant_id, g.group_id ` +
        `FROM group_sizes s CROSS JOIN plant_group_grants g CROSS JOIN group_members m ` +
        `WHERE s.group_id IN ${ids} AND s.ranged = 0 AND g.group_id = s.group_id AND m.group_id = s.group_id`,
    ),
  ];
}

async function run(db: Kysely<any>, statements: string[]): Promise<void> {
  for (const statement of statements) await sql.raw(statement).execute(db);
}

async function addSqlite(db: Kysely<any>): Promise<void> {
  await run(db, [
    ...BOUNDS_TABLE('INTEGER'),
    `CREATE TABLE group_sizes (group_id INTEGER PRIMARY KEY REFERENCES groups (id) ON DELETE CASCADE,
      plants INTEGER NOT NULL, members INTEGER NOT NULL, ranged INTEGER NOT NULL)`,
    'DROP INDEX plant_member_grants_by_plant',
    'CREATE INDEX plant_member_grants_by_group ON plant_member_grants (group_id, plant_id)',
    ...resizeStatements('(SELECT id FROM groups)', (s) => s.replace('INSERT INTO', 'INSERT OR IGNORE INTO')),
  ]);
  // A CROSS JOIN keeps SQLite's join order: the group's one sizes row first, so a ranged group's grants or members
  // are never read.
  const goRanged = (group: string) => [
    `DELETE FROM plant_member_grants WHERE group_id = ${group} AND EXISTS (SELECT 1 FROM group_sizes WHERE group_id = ${group} AND ranged = 0 AND ${OVER})`,
    `UPDATE group_sizes SET ranged = 1 WHERE group_id = ${group} AND ranged = 0 AND ${OVER}`,
  ];
  const goMaterialized = (group: string) => [
    `INSERT OR IGNORE INTO plant_member_grants (user_id, plant_id, group_id) SELECT m.user_id, g.plant_id, g.group_id ` +
      `FROM group_sizes s CROSS JOIN plant_group_grants g CROSS JOIN group_members m WHERE s.group_id = ${group} AND s.ranged = 1 ` +
      `AND ${underHalf('s.')} AND g.group_id = s.group_id AND m.group_id = s.group_id`,
    `UPDATE group_sizes SET ranged = 0 WHERE group_id = ${group} AND ranged = 1 AND ${UNDER_HALF}`,
  ];
  const counted = (column: 'plants' | 'members', group: string, by: 1 | -1) =>
    by === 1
      ? `INSERT INTO group_sizes (group_id, plants, members, ranged) VALUES (${group}, ${column === 'plants' ? 1 : 0}, ${column === 'members' ? 1 : 0}, 0) ` +
        `ON CONFLICT (group_id) DO UPDATE SET ${column} = ${column} + 1`
      : `UPDATE group_sizes SET ${column} = ${column} - 1 WHERE group_id = ${group}`;
  const body = {
    group_members: {
      insert: [
        counted('members', 'NEW.group_id', 1),
        ...goRanged('NEW.group_id'),
        `INSERT OR IGNORE INTO plant_member_grants (user_id, plant_id, group_id) SELECT NEW.user_id, g.plant_id, g.group_id ` +
          `FROM group_sizes s CROSS JOIN plant_group_grants g WHERE s.group_id = NEW.group_id AND s.ranged = 0 AND g.group_id = s.group_id`,
      ],
      delete: [
        'DELETE FROM plant_member_grants WHERE user_id = OLD.user_id AND group_id = OLD.group_id',
        counted('members', 'OLD.group_id', -1),
        ...goMaterialized('OLD.group_id'),
      ],
    },
    plant_group_grants: {
      insert: [
        counted('plants', 'NEW.group_id', 1),
        ...goRanged('NEW.group_id'),
        `INSERT OR IGNORE INTO plant_member_grants (user_id, plant_id, group_id) SELECT m.user_id, NEW.plant_id, m.group_id ` +
          `FROM group_sizes s CROSS JOIN group_members m WHERE s.group_id = NEW.group_id AND s.ranged = 0 AND m.group_id = s.group_id`,
      ],
      delete: [
        'DELETE FROM plant_member_grants WHERE group_id = OLD.group_id AND plant_id = OLD.plant_id',
        counted('plants', 'OLD.group_id', -1),
        ...goMaterialized('OLD.group_id'),
      ],
    },
  };
  for (const [table, { insert, delete: remove }] of Object.entries(body)) {
    for (const operation of ['insert', 'update', 'delete'] as const) {
      const name = `${table}_member_grants_${operation}`;
      const statements = operation === 'insert' ? insert : operation === 'delete' ? remove : [...remove, ...insert];
      await run(db, [
        `DROP TRIGGER ${name}`,
        `CREATE TRIGGER ${name} AFTER ${operation.toUpperCase()} ON ${table} BEGIN ${statements.join('; ')}; END`,
      ]);
    }
  }
  // Plain SQL runs without foreign keys: a removed group's counts go with it all the same.
  await run(db, ['CREATE TRIGGER groups_sizes_delete AFTER DELETE ON groups BEGIN DELETE FROM group_sizes WHERE group_id = OLD.id; END']);
}

async function addPostgres(db: Kysely<any>): Promise<void> {
  const resize = resizeStatements('(SELECT unnest(ids))', (s) => `${s} ON CONFLICT DO NOTHING`);
  await run(db, [
    ...BOUNDS_TABLE('bigint'),
    `CREATE TABLE group_sizes (group_id bigint PRIMARY KEY REFERENCES groups (id) ON DELETE CASCADE,
      plants bigint NOT NULL, members bigint NOT NULL, ranged integer NOT NULL)`,
    'DROP INDEX plant_member_grants_by_plant',
    'CREATE INDEX plant_member_grants_by_group ON plant_member_grants (group_id, plant_id)',
    // Locks the groups first (in id order, as the triggers do), so that a resize derives from what every
    // other writer of these groups committed: an import or a TRUNCATE calls it as the triggers do.
    `CREATE FUNCTION plantstore_resize_groups(ids bigint[]) RETURNS void LANGUAGE plpgsql VOLATILE
  SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM 1 FROM groups WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
  ${resize.join(';\n  ')};
END $$`,
  ]);
  await run(db, [
    memberGrantsTrigger('group_members', 'members'),
    memberGrantsTrigger('plant_group_grants', 'plants'),
    // TRUNCATE fires no row trigger: everything derived is made again.
    ...['group_members', 'plant_group_grants'].map(
      (table) => `CREATE OR REPLACE FUNCTION plantstore_member_grants_${table}_truncated() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  TRUNCATE plant_member_grants;
  DELETE FROM group_sizes;
  PERFORM plantstore_resize_groups(ARRAY(SELECT id FROM groups));
  RETURN NULL;
END $$`,
    ),
    'SELECT plantstore_resize_groups(ARRAY(SELECT id FROM groups))',
  ]);
}

/**
 * PostgreSQL's trigger function of a membership or a group grant: its own member grants and its group's count,
 * under the group's lock; a count crossing a bound calls `onCrossing` for the group (0021 passes another).
 */
export const memberGrantsTrigger = (
  table: 'group_members' | 'plant_group_grants',
  column: 'members' | 'plants',
  onCrossing = 'plantstore_resize_groups',
): string => {
  const removeOwn =
    table === 'group_members'
      ? 'DELETE FROM plant_member_grants WHERE user_id = OLD.user_id AND group_id = OLD.group_id'
      : 'DELETE FROM plant_member_grants WHERE group_id = OLD.group_id AND plant_id = OLD.plant_id';
  const addOwn =
    table === 'group_members'
      ? 'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT NEW.user_id, plant_id, NEW.group_id FROM plant_group_grants WHERE group_id = NEW.group_id ON CONFLICT DO NOTHING'
      : 'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT user_id, NEW.plant_id, NEW.group_id FROM group_members WHERE group_id = NEW.group_id ON CONFLICT DO NOTHING';
  return `CREATE OR REPLACE FUNCTION plantstore_member_grants_${table}() RETURNS trigger LANGUAGE plpgsql VOLATILE
SET search_path FROM CURRENT AS $$
DECLARE
old_group bigint;
new_group bigint;
size group_sizes%ROWTYPE;
BEGIN
IF TG_OP IN ('UPDATE', 'DELETE') THEN old_group := OLD.group_id; END IF;
IF TG_OP IN ('UPDATE', 'INSERT') THEN new_group := NEW.group_id; END IF;
PERFORM 1 FROM groups WHERE id IN (old_group, new_group) ORDER BY id FOR NO KEY UPDATE;
IF TG_OP IN ('UPDATE', 'DELETE') THEN
  ${removeOwn};
  UPDATE group_sizes SET ${column} = ${column} - 1 WHERE group_id = OLD.group_id RETURNING * INTO size;
  IF FOUND AND size.ranged = 1 AND ${underHalf('size.')} THEN
    PERFORM ${onCrossing}(ARRAY[OLD.group_id]);
  END IF;
END IF;
IF TG_OP IN ('UPDATE', 'INSERT') THEN
  INSERT INTO group_sizes AS s (group_id, plants, members, ranged)
    VALUES (NEW.group_id, ${column === 'plants' ? 1 : 0}, ${column === 'members' ? 1 : 0}, 0)
    ON CONFLICT (group_id) DO UPDATE SET ${column} = s.${column} + 1 RETURNING * INTO size;
  IF size.ranged = 0 AND ${over('size.')} THEN
    PERFORM ${onCrossing}(ARRAY[NEW.group_id]);
  ELSIF size.ranged = 0 THEN
    ${addOwn};
  END IF;
END IF;
RETURN NULL;
END $$`;
};
