import assert from 'node:assert/strict';
import { after, before, beforeEach, describe, it } from 'node:test';
import { EVENT_TYPES } from '../../src/catalogue/plant-events.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends, type Backend } from '../helpers/backends.js';
import { seed } from '../helpers/http-app.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';

// A receiver mirroring the catalogue from its events (per plant id, the event of the largest sequence) must end with
// the catalogue whatever plain SQL does to a plant's row. SQLite's `INSERT OR REPLACE` and `UPDATE OR REPLACE` delete
// the row they make room for without running its delete triggers: a plant whose public id leaves with the replaced
// row is deleted for the receiver, a plant whose public id the new row keeps is not. A plant whose public id an
// update changes is, to the receiver, one plant deleted and another created.

after(() => cleanupBackends());

interface Event {
  id: number;
  type: string;
  plant_id: number;
  name: string;
  tag: string | null;
}

/** A store on a fresh database of `backend`, with alice and bob and an endpoint taking every event type. */
async function catalogueWithEndpoint(backend: Backend): Promise<{ db: string; store: Store }> {
  const db = await backend.freshDb();
  const store = await openStore({ db });
  await seed(store, { users: [{ name: 'alice' }, { name: 'bob' }] });
  // Nothing listens here and no server runs: the events and their deliveries are only written.
  await store.webhooks.addEndpoint('http://127.0.0.1:9/hooks', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', [...EVENT_TYPES]);
  return { db, store };
}

const isSqlite = (db: string) => !db.startsWith('postgres');

/** Plants Fern (public id 1), Ivy (2) and Moss (3) of alice at positions 11–13, and no events yet. */
const SEEDED = ['1 Fern shade', '2 Ivy', '3 Moss'];
function reseed(db: string): Promise<void> {
  const plant = (id: number, apiId: number, name: string, tag: string | null) =>
    `INSERT INTO plants (id, api_id, name, tag, owner_id, is_public, created_at) ${isSqlite(db) ? '' : 'OVERRIDING SYSTEM VALUE '}` +
    `SELECT ${id}, ${apiId}, '${name}', ${tag === null ? 'NULL' : `'${tag}'`}, id, 0, 0 FROM users WHERE name = 'alice'`;
  return plainSql(
    db,
    `${isSqlite(db) ? 'PRAGMA foreign_keys = OFF; ' : ''}DELETE FROM plants; UPDATE plant_id_watermark SET largest_deleted = 0; ` +
      `${plant(11, 1, 'Fern', 'shade')}; ${plant(12, 2, 'Ivy', null)}; ${plant(13, 3, 'Moss', null)}; ` +
      'DELETE FROM webhook_deliveries; DELETE FROM webhook_events',
  );
}

const events = (db: string) => plainQuery<Event>(db, 'SELECT id, type, plant_id, name, tag FROM webhook_events ORDER BY id');

/** What a receiver replaying every event holds: per plant id, the event of the largest sequence, unless a delete. */
async function mirrored(db: string): Promise<string[]> {
  const held = new Map(SEEDED.map((line) => [Number(line.split(' ')[0]), line]));
  const latest = new Map<number, Event>();
  for (const event of await events(db)) latest.set(Number(event.plant_id), event);
  for (const [id, event] of latest) {
    if (event.type === 'plant.deleted') held.delete(id);
    else held.set(id, [id, event.name, event.tag].filter((part) => part !== null).join(' '));
  }
  return [...held.entries()].sort(([a], [b]) => a - b).map(([, line]) => line);
}

async function catalogue(db: string): Promise<string[]> {
  const rows = await plainQuery<{ line: string }>(
    db,
    "SELECT api_id || ' ' || name || coalesce(' ' || tag, '') AS line FROM plants ORDER BY api_id",
  );
  return rows.map((row) => row.line);
}

/** Runs `statement` as the sqlite3 shell (foreign keys off) or psql would; checks the mirror and gives the events. */
async function afterStatement(db: string, statement: string): Promise<string[]> {
  await plainSql(db, `${isSqlite(db) ? 'PRAGMA foreign_keys = OFF; ' : ''}${statement}`);
  assert.deepEqual(await mirrored(db), await catalogue(db));
  return (await events(db)).map((event) => `${event.type} ${event.plant_id}`);
}

for (const backend of BACKENDS) {
  describe(`events of a plant whose public id plain SQL changes [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    before(async () => ({ db, store } = await catalogueWithEndpoint(backend)));
    after(() => store?.close());
    beforeEach(() => reseed(db));

    it('deletes the old id and creates the new one', async () => {
      const sent = await afterStatement(db, 'UPDATE plants SET api_id = 20 WHERE api_id = 1');
      assert.deepEqual(sent.sort(), ['plant.created 20', 'plant.deleted 1']);
    });

    it('sends nothing for an update that leaves every id as it was', async () => {
      assert.deepEqual(await afterStatement(db, 'UPDATE plants SET api_id = api_id, is_public = 1'), []);
    });
  });
}

const sqlite = BACKENDS.find((backend) => backend.name === 'sqlite');

describe('events of plants replaced by plain SQL [sqlite]', { skip: sqlite ? false : 'SQLite not selected' }, () => {
  let db: string;
  let store: Store;
  before(async () => ({ db, store } = await catalogueWithEndpoint(sqlite!)));
  after(() => store?.close());
  beforeEach(() => reseed(db));

  const bob = "(SELECT id FROM users WHERE name = 'bob')";

  it('deletes the public id of a plant replaced at its position by a plant with another', async () => {
    const sent = await afterStatement(
      db,
      `INSERT OR REPLACE INTO plants (id, api_id, name, owner_id, is_public, created_at) VALUES (11, 7, 'Rose', ${bob}, 0, 0)`,
    );
    assert.deepEqual(sent.sort(), ['plant.created 7', 'plant.deleted 1']);
  });

  it('deletes it when the new plant is numbered by the store', async () => {
    const sent = await afterStatement(
      db,
      `REPLACE INTO plants (id, name, owner_id, is_public, created_at) VALUES (12, 'Rose', ${bob}, 0, 0)`,
    );
    assert.deepEqual(sent.sort(), ['plant.created 4', 'plant.deleted 2']);
  });

  it('sends no delete for a public id the new plant keeps', async () => {
    const sent = await afterStatement(
      db,
      `INSERT OR REPLACE INTO plants (api_id, name, tag, owner_id, is_public, created_at) VALUES (1, 'Rose', 'sun', ${bob}, 0, 0)`,
    );
    assert.deepEqual(sent, ['plant.created 1']);
  });

  it('deletes one and not the other when the new plant takes one row’s position and another’s public id', async () => {
    const sent = await afterStatement(
      db,
      `INSERT OR REPLACE INTO plants (id, api_id, name, owner_id, is_public, created_at) VALUES (11, 2, 'Rose', ${bob}, 0, 0)`,
    );
    assert.deepEqual(sent.sort(), ['plant.created 2', 'plant.deleted 1']);
  });

  it('deletes the public id of a plant whose position an update takes', async () => {
    const sent = await afterStatement(db, 'UPDATE OR REPLACE plants SET id = 11 WHERE id = 13');
    assert.deepEqual(sent, ['plant.deleted 1']);
  });

  it('deletes the old id of a plant an update gives another plant’s id, and creates it again', async () => {
    const sent = await afterStatement(db, 'UPDATE OR REPLACE plants SET api_id = 2 WHERE api_id = 1');
    assert.deepEqual(sent.sort(), ['plant.created 2', 'plant.deleted 1']);
  });

  it('sends nothing for a replacement skipped, and nothing stale later at its position', async () => {
    assert.deepEqual(
      await afterStatement(
        db,
        `INSERT OR IGNORE INTO plants (id, api_id, name, owner_id, is_public, created_at) VALUES (11, 8, 'Rose', ${bob}, 0, 0); ` +
          `INSERT INTO plants (id, api_id, name, owner_id, is_public, created_at) VALUES (11, 8, 'Rose', ${bob}, 0, 0) ON CONFLICT DO NOTHING`,
      ),
      [],
    );
    const sent = await afterStatement(
      db,
      `DELETE FROM plants WHERE id = 11; INSERT INTO plants (id, api_id, name, owner_id, is_public, created_at) VALUES (11, 9, 'Sage', ${bob}, 0, 0)`,
    );
    assert.deepEqual(sent, ['plant.deleted 1', 'plant.created 9']);
  });

  it('replaces many rows in one statement', async () => {
    const sent = await afterStatement(
      db,
      `INSERT OR REPLACE INTO plants (id, api_id, name, owner_id, is_public, created_at) ` +
        `SELECT id, api_id + 10, name || ' again', owner_id, is_public, 0 FROM plants WHERE id IN (11, 13)`,
    );
    assert.deepEqual(sent.sort(), ['plant.created 11', 'plant.created 13', 'plant.deleted 1', 'plant.deleted 3']);
  });
});
