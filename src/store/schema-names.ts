/**
 * Names of schema objects that running code refers to, beside the migrations that create them. Names only, never
 * lists or rules: a migration that imports this module creates exactly what it did when it was released.
 */

/** The unique index of public ids: an id given twice or already taken is refused by it. */
export const PLANT_API_ID_INDEX = 'plants_by_api_id';

/** The PostgreSQL setting an import turns on (SET LOCAL) so that its rows are not logged, numbered or announced one by one. */
export const BULK_LOAD_SETTING = 'plantstore.bulk_load';

/** The NOTIFY channel of one schema, so Plant Stores sharing a database do not wake each other. */
export const changeChannel = (schema: string): string => `plantstore_changes_${schema}`;

/**
 * The PostgreSQL advisory lock (hashed with the schema's name) that whoever numbers plants automatically holds to
 * the end of its transaction, so that two of them never take the same number: the CLI, an import, plain SQL.
 */
export const AUTOMATIC_IDS_LOCK = 'plants.api_id';

/** The table of every plant shared with a user through a small group, kept by triggers (migrations 0012, 0014). */
export const MEMBER_GRANTS = 'plant_member_grants';

/** Each group's counts and whether it is ranged, read range by range instead of through member grants (migration 0014). */
export const GROUP_SIZES = 'group_sizes';

/**
 * PostgreSQL: a condition true of the rows the current transaction wrote (their xmin is its id), as `alias` names
 * their table. An import tells its own rows from those other writers committed meanwhile by it.
 */
export const writtenHere = (alias = ''): string => `${alias}xmin = pg_current_xact_id()::xid`;

/** The indexes of the ranges of one tag (migration 0018): each grant table's tagged rows, plants by owner and tag, public by tag. */
export const TAG_RANGE_INDEX_NAMES = [
  'plant_user_grants_by_tag',
  'plant_group_grants_by_tag',
  'plant_member_grants_by_tag',
  'plants_by_owner_and_tag',
  'plants_public_by_tag',
] as const;
