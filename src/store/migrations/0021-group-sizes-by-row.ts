import { sql, type Kysely, type Migration } from 'kysely';
import { memberGrantsTrigger, resizeStatements } from './0014-group-sizes.js';

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

function postgresStatements(): string[] {
  // 0014's resize without its first statement, the count: whether each group is ranged, from the counts it has, and
  // member grants exactly for those that are not, from their rows as they are.
  const rerange = resizeStatements('(SELECT unnest(ids))', (s) => `${s} ON CONFLICT DO NOTHING`).slice(1);
  return [
    // The groups are locked first, in id order, as plantstore_resize_groups locks them.
    `CREATE FUNCTION plantstore_rerange_groups(ids bigint[]) RETURNS void LANGUAGE plpgsql VOLATILE
  SET search_path FROM CURRENT AS $$
BEGIN
  PERFORM 1 FROM groups WHERE id = ANY(ids) ORDER BY id FOR NO KEY UPDATE;
  ${rerange.join(';\n  ')};
END $$`,
    // 0014's trigger functions, a crossing calling plantstore_rerange_groups, which keeps the counts.
    memberGrantsTrigger('group_members', 'members', 'plantstore_rerange_groups'),
    memberGrantsTrigger('plant_group_grants', 'plants', 'plantstore_rerange_groups'),
    'SELECT plantstore_resize_groups(ARRAY(SELECT id FROM groups))',
  ];
}
