import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { createPool } from '../../src/store/postgres/postgres-connection.js';
import { PreparedStatements } from '../../src/store/postgres/prepared-statements.js';
import { adminQuery, PG_URL, requirePostgres } from '../helpers/postgres.js';

const skip = await requirePostgres();

// Kysely checks a connection out of the pool for every statement and transaction. Checked out, a pg client has
// none of the pool's listeners, so a connection the server ended meanwhile (a restart, pg_terminate_backend)
// raised an uncaught 'error' that ended the serving process.
describe('a connection checked out by Kysely, ended by the server', { skip }, () => {
  const { pool } = createPool(PG_URL, { url: PG_URL });
  after(() => pool.end());

  // The runner fails the test on an uncaught exception, as it did here before the client had a listener.
  it('fails its next statement, ends no process, and is not pooled again', async () => {
    const client = await new PreparedStatements().pool(pool).connect();
    const { rows } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid', []);
    const pid = rows[0]!.pid;
    await adminQuery('SELECT pg_terminate_backend($1)', [pid]);
    await sleep(200);
    await assert.rejects(client.query('SELECT 1', []));
    client.release();
    const again = await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
    assert.notEqual(again.rows[0]!.pid, pid);
  });
});
