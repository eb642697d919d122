import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { settleChangeFeed } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, rawRequest, seed } from '../helpers/http-app.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';
import { delta, parseSamples } from '../helpers/prometheus.js';

// SQLite's `INSERT OR REPLACE` (the sqlite3 shell's way to overwrite a row) deletes the row it replaces without
// running its delete triggers, which log what a cached page must drop. The change a page depends on is the old row's
// owner, public flag and grantees, not only the new row's: a page cached with a public plant that plain SQL replaced by
// a private one must not go on showing it to everyone.

after(() => cleanupBackends());

const sqlite = BACKENDS.find((backend) => backend.name === 'sqlite');

describe('a plant replaced with INSERT OR REPLACE in the sqlite3 shell [sqlite]', { skip: sqlite ? false : 'SQLite not selected' }, () => {
  let db: string;
  let store: Store;
  let server: RunningServer;
  let tokens: Record<string, string>;

  before(async () => {
    db = await sqlite!.freshDb();
    store = await openStore({ db });
    ({ tokens } = await seed(store, {
      users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }],
      plants: [
        { name: 'Fern', owner: 'alice', public: true },
        { name: 'Ivy', owner: 'alice', sharedWith: [{ user: 'bob' }] },
      ],
    }));
    server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent', metricsPort: 0 }), store);
    await settleChangeFeed(store);
  });

  after(async () => {
    await server?.stop();
    await store?.close();
  });

  const names = async (user: string): Promise<string[]> => {
    const res = await rawRequest(server.url, '/plants?limit=10', bearer(tokens[user]!));
    assert.equal(res.status, 200, res.text);
    return (res.body as Array<{ name: string }>).map((plant) => plant.name);
  };

  /** Reads `user`'s listing twice: the second from the page cache. */
  const cachedNames = async (user: string): Promise<string[]> => {
    const first = await names(user);
    const before = parseSamples(await (await fetch(server.metricsUrl!)).text());
    assert.deepEqual(await names(user), first);
    const after = parseSamples(await (await fetch(server.metricsUrl!)).text());
    assert.equal(delta(before, after, 'plantstore_cache_hits_total', { cache: 'page' }), 1, `${user}'s page is cached`);
    return first;
  };

  /** Overwrites plant `name`'s row, keeping its position and id, as an operator in the sqlite3 shell would. */
  const replace = async (name: string, set: { name: string; owner: string; public: boolean }) => {
    const [old] = await plainQuery<{ id: number; api_id: number }>(db, `SELECT id, api_id FROM plants WHERE name = '${name}'`);
    await plainSql(
      db,
      // The shell leaves foreign keys off (better-sqlite3 turns them on).
      `PRAGMA foreign_keys = OFF; INSERT OR REPLACE INTO plants (id, api_id, name, owner_id, is_public, created_at) ` +
        `SELECT ${old!.id}, ${old!.api_id}, '${set.name}', id, ${set.public ? 1 : 0}, 0 FROM users WHERE name = '${set.owner}'`,
    );
    // A change is honoured by the first request that starts a millisecond after its writer returned.
    await new Promise((resolve) => setTimeout(resolve, 5));
  };

  it('drops the old row when the new one takes its public id at another position', async () => {
    await plainSql(
      db,
      `INSERT INTO plants (name, owner_id, is_public, created_at) SELECT 'Moss', id, 1, 0 FROM users WHERE name = 'alice'`,
    );
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(await cachedNames('carol'), ['Fern', 'Moss']);
    assert.deepEqual(await cachedNames('alice'), ['Fern', 'Ivy', 'Moss']);
    const [moss] = await plainQuery<{ api_id: number }>(db, `SELECT api_id FROM plants WHERE name = 'Moss'`);
    // No position given: the new row goes last, and the one it replaces (by its id in the API) leaves its own.
    await plainSql(
      db,
      `PRAGMA foreign_keys = OFF; INSERT OR REPLACE INTO plants (api_id, name, owner_id, is_public, created_at) ` +
        `SELECT ${moss!.api_id}, 'Moss', id, 0, 0 FROM users WHERE name = 'bob'`,
    );
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(await names('carol'), ['Fern'], 'no longer public');
    assert.deepEqual(await names('alice'), ['Fern', 'Ivy'], 'no longer hers');
    await plainSql(db, `DELETE FROM plants WHERE name = 'Moss'`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  });

  it('drops the old row from every page that showed it: a public plant made private, a shared one renamed', async () => {
    assert.deepEqual(await cachedNames('carol'), ['Fern']);
    assert.deepEqual(await cachedNames('bob'), ['Fern', 'Ivy']);
    await replace('Fern', { name: 'Fern', owner: 'bob', public: false });
    assert.deepEqual(await names('carol'), [], 'no longer public');
    assert.deepEqual(await names('bob'), ['Fern', 'Ivy'], 'now his own');
    assert.deepEqual(await names('alice'), ['Ivy'], 'no longer hers');

    await replace('Ivy', { name: 'English ivy', owner: 'alice', public: false });
    // Her grant to bob names the plant by its position, which the new row keeps (the shell runs without foreign keys).
    assert.deepEqual(await names('bob'), ['Fern', 'English ivy']);
    assert.deepEqual(await names('alice'), ['English ivy']);
  });

  it('drops the old row that UPDATE OR REPLACE deletes to give its public id to another plant', async () => {
    await plainSql(
      db,
      `INSERT INTO plants (name, owner_id, is_public, created_at) SELECT 'Sedge', id, 1, 0 FROM users WHERE name = 'alice'; ` +
        `INSERT INTO plants (name, owner_id, is_public, created_at) SELECT 'Rush', id, 0, 0 FROM users WHERE name = 'bob'`,
    );
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(await cachedNames('carol'), ['Sedge']);
    await plainSql(
      db,
      `PRAGMA foreign_keys = OFF; UPDATE OR REPLACE plants SET api_id = (SELECT api_id FROM plants WHERE name = 'Sedge') WHERE name = 'Rush'`,
    );
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.deepEqual(await names('carol'), [], 'Sedge is gone');
  });

  it('ends the cached tokens of a user replaced by name, whose new row is another user', async () => {
    const res = async () => (await rawRequest(server.url, '/plants?limit=10', bearer(tokens.carol!))).status;
    assert.equal(await res(), 200);
    assert.equal(await res(), 200);
    await plainSql(db, `PRAGMA foreign_keys = OFF; INSERT OR REPLACE INTO users (name, created_at) VALUES ('carol', 0)`);
    await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(await res(), 401);
  });
});
