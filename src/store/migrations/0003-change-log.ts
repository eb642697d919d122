import { sql, type Kysely, type Migration } from 'kysely';
import { WATCHED_TABLES } from './0002-change-notifications.js';

type Dialect = 'sqlite' | 'postgres';

/** The PostgreSQL setting an import turns on (SET LOCAL) so that its rows are not logged one by one. */
export const BULK_LOAD_SETTING = 'plantstore.bulk_load';

/** A PostgreSQL row trigger's condition that holds unless an import has turned BULK_LOAD_SETTING on. */
export const UNLESS_BULK_LOAD = `current_setting('${BULK_LOAD_SETTING}', true) IS DISTINCT FROM 'on'`;

/** The columns a change row can name, beside its table. */
type LoggedColumn = 'user_id' | 'group_id' | 'plant_id' | 'token_id' | 'name' | 'is_public';

/**
 * For each watched table, the change-log column each of its key columns goes to. An insert logs the new row, a
 * delete the old one, an update both (so a plant given to another owner names both owners).
 */
const LOGGED_TABLES = {
  users: { user_id: 'id' },
  groups: { group_id: 'id', name: 'name' },
  group_members: { group_id: 'group_id', user_id: 'user_id' },
  plants: { plant_id: 'id', user_id: 'owner_id', is_public: 'is_public' },
  plant_user_grants: { plant_id: 'plant_id', user_id: 'user_id' },
  plant_group_grants: { plant_id: 'plant_id', group_id: 'group_id' },
  tokens: { token_id: 'id', user_id: 'user_id' },
} as const satisfies Record<string, Partial<Record<LoggedColumn, string>>>;

export type LoggedTable = keyof typeof LOGGED_TABLES;

/**
 * An update or delete of a plant also logs the plant's grants as they stand: a renamed plant changes the pages of
 * everyone it is shared with. (A deleted plant's grants are gone by then when foreign keys cascade, and log
 * themselves; a plain `sqlite3` session runs without foreign keys, and then these rows name them.)
 */
const PLANT_GRANT_TABLES = ['plant_user_grants', 'plant_group_grants'] as const;

/** The table name of a row that says "anything may have changed". */
const EVERYTHING = '*';

/** The triggers of one table, by name (SQLite). */
export const changeTriggerName = (table: LoggedTable, operation: 'insert' | 'update' | 'delete'): string => `${table}_logged_${operation}`;

/** `INSERT INTO change_log …` of one row of `table`, as `OLD` or `NEW` (the same text in both dialects). */
function logRow(table: LoggedTable, row: 'OLD' | 'NEW'): string {
  const columns = Object.entries(LOGGED_TABLES[table]) as Array<[LoggedColumn, string]>;
  return (
    `INSERT INTO change_log (table_name, ${columns.map(([logged]) => logged).join(', ')}) ` +
    `VALUES ('${table}', ${columns.map(([, column]) => `${row}.${column}`).join(', ')});`
  );
}

/** The grants of the plant in `OLD`, logged as grant rows (see PLANT_GRANT_TABLES). */
function logPlantGrants(): string {
  return PLANT_GRANT_TABLES.map((grants) => {
    const grantee = Object.keys(LOGGED_TABLES[grants]).find((c) => c !== 'plant_id')!;
    return `INSERT INTO change_log (table_name, plant_id, ${grantee}) SELECT '${grants}', plant_id, ${grantee} FROM ${grants} WHERE plant_id = OLD.id;`;
  }).join('\n');
}

/** What an operation on `table` logs: the row before, after, or both, and for plants their grants. */
function loggedBy(table: LoggedTable, operation: 'insert' | 'update' | 'delete'): string {
  const statements = [
    ...(operation === 'insert' ? [] : [logRow(table, 'OLD')]),
    ...(operation === 'delete' ? [] : [logRow(table, 'NEW')]),
    ...(table === 'plants' && operation !== 'insert' ? [logPlantGrants()] : []),
  ];
  return statements.join('\n');
}

const OPERATIONS = ['insert', 'update', 'delete'] as const;

async function createSqlite(db: Kysely<any>): Promise<void> {
  // AUTOINCREMENT: a sequence number is never used twice, even after pruning empties the table.
  await sql`CREATE TABLE change_log (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, table_name TEXT NOT NULL,
    user_id INTEGER, group_id INTEGER, plant_id INTEGER, token_id INTEGER, name TEXT, is_public INTEGER)`.execute(db);
  await sql`CREATE TABLE change_log_state (
    id INTEGER PRIMARY KEY CHECK (id = 1), pruned_through INTEGER NOT NULL, mark_seq INTEGER NOT NULL, mark_at INTEGER NOT NULL)`.execute(
    db,
  );
  await sql`INSERT INTO change_log_state VALUES (1, 0, 0, ${Date.now()})`.execute(db);
  for (const table of Object.keys(LOGGED_TABLES) as LoggedTable[]) {
    for (const operation of OPERATIONS) {
      await sql
        .raw(
          `CREATE TRIGGER ${changeTriggerName(table, operation)} AFTER ${operation.toUpperCase()} ON ${table} BEGIN\n` +
            `${loggedBy(table, operation)}\nEND`,
        )
        .execute(db);
    }
  }
}

async function createPostgres(db: Kysely<any>): Promise<void> {
  // The per-statement notifications of migration 0002 go; the log's own inserts notify instead.
  for (const table of WATCHED_TABLES) await sql`DROP TRIGGER ${sql.id(`${table}_changed`)} ON ${sql.table(table)}`.execute(db);
  // tx: the writing transaction, so that a reader can tell which rows are final (see postgres-change-feed.ts).
  await sql`CREATE TABLE change_log (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, tx xid8 NOT NULL DEFAULT pg_current_xact_id(), table_name text NOT NULL,
    user_id bigint, group_id bigint, plant_id bigint, token_id bigint, name text, is_public integer)`.execute(db);
  await sql`CREATE INDEX change_log_by_tx ON change_log (tx)`.execute(db);
  await sql`CREATE TABLE change_log_state (
    id integer PRIMARY KEY CHECK (id = 1), pruned_below xid8 NOT NULL, mark_xmin xid8 NOT NULL, mark_at timestamptz NOT NULL)`.execute(db);
  await sql`INSERT INTO change_log_state VALUES (1, '0', pg_snapshot_xmin(pg_current_snapshot()), now())`.execute(db);
  // One notification per transaction that logged anything (NOTIFY merges repeats), on the channel of migration 0002.
  await sql`CREATE TRIGGER change_log_notify AFTER INSERT ON change_log FOR EACH STATEMENT EXECUTE FUNCTION plantstore_notify_change()`.execute(
    db,
  );
  for (const table of Object.keys(LOGGED_TABLES) as LoggedTable[]) {
    const fn = `plantstore_log_${table}`;
    // search_path fixed at creation: a writer whose own search_path differs (psql with a qualified table name)
    // still logs into this schema's change_log.
    await sql
      .raw(
        `CREATE FUNCTION ${fn}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF TG_OP = 'INSERT' THEN
    ${loggedBy(table, 'insert')}
  ELSIF TG_OP = 'UPDATE' THEN
    ${loggedBy(table, 'update')}
  ELSE
    ${loggedBy(table, 'delete')}
  END IF;
  RETURN NULL;
END $$`,
      )
      .execute(db);
    await sql
      .raw(
        `CREATE TRIGGER ${table}_logged AFTER INSERT OR UPDATE OR DELETE ON ${table} FOR EACH ROW ` +
          `WHEN (${UNLESS_BULK_LOAD}) EXECUTE FUNCTION ${fn}()`,
      )
      .execute(db);
    // TRUNCATE fires no row trigger: it says "everything".
    await sql
      .raw(
        `CREATE FUNCTION ${fn}_truncated() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN INSERT INTO change_log (table_name) VALUES ('${EVERYTHING}'); RETURN NULL; END $$`,
      )
      .execute(db);
    await sql
      .raw(`CREATE TRIGGER ${table}_truncated AFTER TRUNCATE ON ${table} FOR EACH STATEMENT EXECUTE FUNCTION ${fn}_truncated()`)
      .execute(db);
  }
}

/**
 * The change log (see store/change-log.ts): a table, the triggers that fill it on every watched table, and the
 * pruning state. On PostgreSQL it replaces the per-statement notifications of 0002 (which said only "something
 * changed"): the log's own inserts notify, and readers read the log.
 */
export function changeLog(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect === 'sqlite') await createSqlite(db);
      else await createPostgres(db);
    },
  };
}
