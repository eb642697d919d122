import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import type { Change } from '../../src/store/change-log.js';
import { openStore } from '../../src/store/open-store.js';
import { changeChannel } from '../../src/store/schema-names.js';
import { generateToken } from '../../src/catalogue/tokens.js';
import type { Store } from '../../src/store/store.js';
import { eventually } from '../helpers/assertions.js';
import { dropSchema, freshSchema, requirePostgres } from '../helpers/postgres.js';

const skip = await requirePostgres();

describe('PostgreSQL change feed', { skip }, () => {
  const { schema, url } = freshSchema();
  let store: Store;
  let sql: pg.Client;

  before(async () => {
    store = await openStore({ db: url });
    sql = new pg.Client({ connectionString: url });
    await sql.connect();
    await sql.query(`SET search_path TO ${schema}`);
    await eventually('the feed follows the log', () => store.changes.sync(), { timeoutMs: 2_000 });
  });

  after(async () => {
    await sql?.end();
    await store?.close();
    await dropSchema(schema);
  });

  it('reads a burst of commits in a few reads, not one each, and still within the bound', async () => {
    const batches: Array<readonly Change[]> = [];
    store.changes.subscribe((batch) => {
      if (batch !== 'everything') batches.push(batch);
    });
    const commits = 20;
    // Each statement its own transaction and its own notification, as plain SQL from another session.
    for (let i = 0; i < commits; i++) await sql.query('INSERT INTO users (name, is_admin, created_at) VALUES ($1, 0, 0)', [`burst${i}`]);
    const users = () => batches.flat().filter((change) => change.table === 'users').length;
    await eventually('every commit is delivered within one second', users, { until: (n) => n === commits, timeoutMs: 1_000 });
    // One read per notification delivered 19 of 20 here; a notification now waits a little for those after it
    // (1 or 2 batches when the inserts are quick; the bound leaves room for a slow, loaded machine).
    assert.ok(batches.length <= commits / 2, `${batches.length} batches for ${commits} commits`);
  });

  it('announces the commits of each command, made just before its store closes', async () => {
    const notified: string[] = [];
    sql.on('notification', ({ channel }) => notified.push(channel));
    await sql.query(`LISTEN ${pg.escapeIdentifier(changeChannel(schema))}`);
    // Each write as a CLI command makes it, in a store of its own closed right after; the token's two commits are one
    // announcement each, the second held back by the interval between announcements unless the machine is slow.
    const commands: Array<[string, (store: Store) => Promise<unknown>, number]> = [
      ['users add', (store) => store.users.add('once-off', false), 1],
      ['groups add', (store) => store.groups.add('one-off'), 1],
      [
        'tokens create and revoke',
        async (store) => store.tokens.revoke((await store.tokens.add({ user: 'once-off', hash: generateToken().hash })).id),
        2,
      ],
      ['groups remove', (store) => store.groups.remove('one-off'), 1],
    ];
    try {
      for (const [what, write, announcements] of commands) {
        const expected = notified.length + announcements;
        const command = await openStore({ db: url });
        await write(command);
        await command.close();
        await eventually(`${what} is announced`, () => notified.length, { until: (n) => n === expected, timeoutMs: 2_000 });
      }
    } finally {
      await sql.query('UNLISTEN *');
    }
  });
});
