import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { AUTOMATIC_IDS_LOCK, BULK_LOAD_SETTING, changeChannel, MEMBER_GRANTS, PLANT_API_ID_INDEX } from '../../src/store/schema-names.js';
import { openStore } from '../../src/store/open-store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { adminQuery } from '../helpers/postgres.js';

// Migrations carry their own copies of the names they create (they must not change after their release); running
// code names them from store/schema-names.ts. The two must agree on a freshly migrated database.

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`the schema names running code uses [${backend.name}]`, { skip: backend.skip }, () => {
    it('are the names the migrations create', async () => {
      const db = await backend.freshDb();
      await (await openStore({ db })).close();
      if (backend.name === 'sqlite') {
        const sqlite = new BetterSqlite3(db, { readonly: true });
        try {
          const index = sqlite.prepare("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?").pluck().get(PLANT_API_ID_INDEX);
          assert.match(String(index), /UNIQUE INDEX .* ON plants \(api_id\)/);
          assert.equal(
            sqlite.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?").pluck().get(MEMBER_GRANTS),
            1,
          );
        } finally {
          sqlite.close();
        }
        return;
      }
      const schema = new URL(db).searchParams.get('schema')!;
      const [index] = await adminQuery<{ def: string }>('SELECT indexdef AS def FROM pg_indexes WHERE schemaname = $1 AND indexname = $2', [
        schema,
        PLANT_API_ID_INDEX,
      ]);
      assert.match(index!.def, /UNIQUE INDEX .* \(api_id\)/);
      const [table] = await adminQuery('SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = $2', [schema, MEMBER_GRANTS]);
      assert.ok(table, `no table ${MEMBER_GRANTS}`);
      const source = async (fn: string) =>
        (
          await adminQuery<{ src: string }>('SELECT prosrc AS src FROM pg_proc WHERE proname = $1 AND pronamespace = $2::regnamespace', [
            fn,
            schema,
          ])
        )[0]!.src;
      assert.ok((await source('plantstore_plant_api_id')).includes(`current_schema() || '.${AUTOMATIC_IDS_LOCK}'`));
      assert.ok((await source('plantstore_notify_change')).includes(`'${changeChannel('')}' || TG_TABLE_SCHEMA`));
      const [trigger] = await adminQuery<{ def: string }>(
        "SELECT pg_get_triggerdef(t.oid) AS def FROM pg_trigger t WHERE t.tgname = 'plants_logged' AND t.tgrelid = $1::regclass",
        [`${schema}.plants`],
      );
      assert.ok(trigger!.def.includes(`current_setting('${BULK_LOAD_SETTING}'::text, true)`), trigger!.def);
    });
  });
}
