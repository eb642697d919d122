import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * Users, groups, plants, grants and hashed tokens. Plant ids only grow (AUTOINCREMENT / identity), so id
 * order is catalogue order. Every listing branch is an index range in id order: public plants (partial
 * index), owned plants (owner_id, id), user grants (user_id, plant_id) and group grants (group_id, plant_id).
 */
export function initialSchema(dialect: Dialect): Migration {
  const id = dialect === 'sqlite' ? 'integer' : 'bigint';
  const bytes = dialect === 'sqlite' ? 'blob' : 'bytea';
  // Grant and membership rows are their own key; SQLite stores such tables without a separate rowid b-tree.
  const keyOnly = dialect === 'sqlite' ? sql`without rowid` : sql``;

  return {
    async up(db: Kysely<any>) {
      const idColumn = (name: string) =>
        dialect === 'sqlite'
          ? db.schema.createTable(name).addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
          : db.schema.createTable(name).addColumn('id', 'bigint', (c) => c.primaryKey().generatedAlwaysAsIdentity());

      await idColumn('users')
        .addColumn('name', 'text', (c) => c.notNull().unique())
        .addColumn('is_admin', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();

      await idColumn('groups')
        .addColumn('name', 'text', (c) => c.notNull().unique())
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();

      await db.schema
        .createTable('group_members')
        .addColumn('group_id', id, (c) => c.notNull().references('groups.id').onDelete('cascade'))
        .addColumn('user_id', id, (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addPrimaryKeyConstraint('group_members_pk', ['group_id', 'user_id'])
        .modifyEnd(keyOnly)
        .execute();
      await db.schema.createIndex('group_members_by_user').on('group_members').columns(['user_id', 'group_id']).execute();

      await idColumn('plants')
        .addColumn('name', 'text', (c) => c.notNull())
        .addColumn('tag', 'text')
        .addColumn('owner_id', id, (c) => c.notNull().references('users.id').onDelete('restrict'))
        .addColumn('is_public', 'integer', (c) => c.notNull().defaultTo(0))
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .execute();
      await db.schema.createIndex('plants_by_owner').on('plants').columns(['owner_id', 'id']).execute();
      await db.schema.createIndex('plants_public').on('plants').column('id').where(sql.ref('is_public'), '=', 1).execute();

      await db.schema
        .createTable('plant_user_grants')
        .addColumn('user_id', id, (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('plant_id', id, (c) => c.notNull().references('plants.id').onDelete('cascade'))
        .addPrimaryKeyConstraint('plant_user_grants_pk', ['user_id', 'plant_id'])
        .modifyEnd(keyOnly)
        .execute();
      await db.schema.createIndex('plant_user_grants_by_plant').on('plant_user_grants').columns(['plant_id', 'user_id']).execute();

      await db.schema
        .createTable('plant_group_grants')
        .addColumn('group_id', id, (c) => c.notNull().references('groups.id').onDelete('cascade'))
        .addColumn('plant_id', id, (c) => c.notNull().references('plants.id').onDelete('cascade'))
        .addPrimaryKeyConstraint('plant_group_grants_pk', ['group_id', 'plant_id'])
        .modifyEnd(keyOnly)
        .execute();
      await db.schema.createIndex('plant_group_grants_by_plant').on('plant_group_grants').columns(['plant_id', 'group_id']).execute();

      await idColumn('tokens')
        .addColumn('user_id', id, (c) => c.notNull().references('users.id').onDelete('cascade'))
        .addColumn('token_hash', bytes, (c) => c.notNull().unique())
        .addColumn('label', 'text')
        .addColumn('created_at', 'bigint', (c) => c.notNull())
        .addColumn('expires_at', 'bigint')
        .addColumn('revoked_at', 'bigint')
        .execute();
      await db.schema.createIndex('tokens_by_user').on('tokens').columns(['user_id', 'id']).execute();
    },
  };
}
