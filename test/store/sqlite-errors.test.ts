import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect, sql } from 'kysely';
import { classifySqliteError } from '../../src/store/sqlite/sqlite-errors.js';

// A request that ran on a connection the store closed when its file was replaced is answered 503, not 500, even
// when the store holds an open connection to the new file by the time the error is judged. The libraries say
// "closed" by message alone, which these tests hold them to.
describe('SQLite errors of a closed connection', () => {
  it('are unavailable, from better-sqlite3 and from Kysely', async () => {
    const closed = new BetterSqlite3(':memory:');
    closed.close();
    assert.throws(
      () => closed.prepare('SELECT 1'),
      (err) => classifySqliteError(err) === 'unavailable',
    );
    const destroyed = new Kysely<Record<string, never>>({ dialect: new SqliteDialect({ database: new BetterSqlite3(':memory:') }) });
    await sql`SELECT 1`.execute(destroyed);
    await destroyed.destroy();
    await assert.rejects(sql`SELECT 1`.execute(destroyed), (err) => classifySqliteError(err) === 'unavailable');
    assert.equal(classifySqliteError(new TypeError('something else')), undefined);
  });
});
