import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * PostgreSQL: a group's counts (`group_sizes`, migration 0014) stay right when one statement writes many of its
 * grants or memberships (plain SQL such as `INSERT … SELECT`, or `DELETE … WHERE plant_id <= 39`).
 *
 * Each row's trigger adds or takes one from the group's count, and when the count crosses a bound it called
 * `plantstore_resize_groups`, which counted the group's rows again from the table. PostgreSQL runs a statement's
 * AFTER ROW triggers once the statement has written all its rows, so that count held the rows whose triggers had
 * not run yet, and they were then added (or taken) once more: 40 grants inserted in one statement counted 47, and
 * 39 deleted left -7. The counts kept by the rows' triggers are right by themselves; a crossing now only decides
 * whether the group is ranged and writes or drops its member grants (`plantstore_rerange_groups`), reading the
 * group's grants and members as they are, as before. Every group is counted again once, here, to mend counts made
 * wrong before. An import and a TRUNCATE, which count whole tables, still call `plantstore_resize_groups`.
 *
 * SQLite runs each row's trigger right after the row is written, before the next: its counts were right.
 */
export function groupSizesByRow(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect !== 'postgres') return;
      for (const statement of postgresStatements()) await sql.raw(statement).execute(db);
    },
  };
}

const bound = (column: 'plants' | 'members') => `(SELECT ${column} FROM group_access_bounds)`;
const over = (row = '') => `(${row}plants > ${bound('plants')} OR ${row}members > ${bound('members')})`;
const underHalf = (row = '') => `(${row}plants <= ${bound('plants')} / 2 AND ${row}members <= ${bound('members')} / 2)`;

function postgresStatements(): string[] {
  const ids = '(SELECT unnest(ids))';
  const trigger = (table: 'group_members' | 'plant_group_grants', column: 'members' | 'plants') => {
    const removeOwn =
      table === 'group_members'
        ? 'DELETE FROM plant_member_grants WHERE user_id = OLD.user_id AND group_id = OLD.group_id'
        : 'DELETE FROM plant_member_grants WHERE group_id = OLD.group_id AND plant_id = OLD.plant_id';
    const addOwn =
      table === 'group_members'
        ? 'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT NEW.user_id, plant_id, NEW.group_id FROM plant_group_grants WHERE group_id = NEW.group_id ON CONFLICT DO NOTHING'
        : 'INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT user_id, NEW.plant_id, NEW.group_id FROM group_members WHERE group_id = NEW.group_id ON CONFLICT DO NOTHING';
    // As 0014's, but a crossing calls plantstore_rerange_groups, which keeps the counts.
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
      PERFORM plantstore_rerange_groups(ARRAY[OLD.group_id]);
    END IF;
  END IF;
  IF TG_OP IN ('UPDATE', 'INSERT') THEN
    INSERT INTO group_sizes AS s (group_id, plants, members, ranged)
      VALUES (NEW.group_id, ${column === 'plants' ? 1 : 0}, ${column === 'members' ? 1 : 0}, 0)
      ON CONFLICT (group_id) DO UPDATE SET ${column} = s.${column} + 1 RETURNING * INTO size;
    IF size.ranged = 0 AND ${over('size.')} THEN
      PERFORM plantstore_rerange_groups(ARRAY[NEW.group_id]);
    ELSIF size.ranged = 0 THEN
      ${addOwn};
    END IF;
  END IF;
  RETURN NULL;
END $$`;
  };
  return [
    // plantstore_resize_groups without its count: whether each group is ranged, from the counts it has, and member
    // grants exactly for those that are not, from their rows as they are. The groups are locked first, in id order.
    `CREATE FUNCTION plantstore_rerange_groups(ids bigint[]) RETURNS void LANGUAGE plpgsql VOLATILE
  SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM 1 FROM groups WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
  UPDATE group_sizes SET ranged = CASE WHEN ${over()} THEN 1 WHEN ${underHalf()} THEN 0 ELSE ranged END WHERE group_id IN ${ids};
  DELETE FROM plant_member_grants WHERE group_id IN (SELECT group_id FROM group_sizes WHERE group_id IN ${ids} AND ranged = 1);
  INSERT INTO plant_member_grants (user_id, plant_id, group_id) SELECT m.user_id, g.plant_id, g.group_id
    FROM group_sizes s CROSS JOIN plant_group_grants g CROSS JOIN group_members m
    WHERE s.group_id IN ${ids} AND s.ranged = 0 AND g.group_id = s.group_id AND m.group_id = s.group_id ON CONFLICT DO NOTHING;
END $$`,
    trigger('group_members', 'members'),
    trigger('plant_group_grants', 'plants'),
    'SELECT plantstore_resize_groups(ARRAY(SELECT id FROM groups))',
  ];
}
