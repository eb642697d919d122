import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { generateToken } from '../../src/catalogue/tokens.js';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import { dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';
import { addPlant } from '../helpers/http-app.js';

const skip = await requirePostgres();

/**
 * A real streaming replica cannot be started here, so the "replica" is a second schema holding different
 * plants: what the listing returns shows which database it read, and the token (present only on the
 * primary) shows where credentials were checked.
 */
describe('--read-db sends listings to the replica and token checks to the primary', { skip }, () => {
  const primary = freshSchema();
  const replica = freshSchema();
  let server: RunningServer;
  let token: string;

  before(async () => {
    const minted = generateToken();
    token = minted.token;
    const p = await openStore({ db: primary.url });
    await p.users.add('alice', false);
    await addPlant(p, { name: 'On the primary', owner: 'alice', public: true });
    await p.tokens.add({ user: 'alice', hash: minted.hash });
    await p.close();
    const r = await openStore({ db: replica.url });
    await r.users.add('alice', false);
    await addPlant(r, { name: 'On the replica', owner: 'alice', public: true });
    await r.close();
    server = await startServer(loadConfig({ db: primary.url, readDb: replica.url, port: 0, logLevel: 'silent' }));
  });

  after(async () => {
    await server?.stop();
    await dropSchema(primary.schema);
    await dropSchema(replica.schema);
  });

  it('authenticates on the primary and lists from the replica', async () => {
    const res = await fetch(`${server.url}/plants`, { headers: { authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), [{ name: 'On the replica' }]);
  });

  it('refuses --read-db without a PostgreSQL primary', () => {
    assert.throws(() => loadConfig({ db: './x.db', readDb: replica.url }), /needs a PostgreSQL primary/);
    assert.throws(() => loadConfig({ db: primary.url, readDb: './x.db' }), /must be a postgres:\/\/ URL/);
  });
});
