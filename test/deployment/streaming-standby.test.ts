import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { startStreamingPair, streamingPairUnavailable, type StreamingPair } from '../helpers/streaming-standby.js';

const skip = streamingPairUnavailable();

async function query<R extends pg.QueryResultRow>(url: string, text: string): Promise<R[]> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    return (await client.query<R>(text)).rows;
  } finally {
    await client.end();
  }
}

const countRows = async (url: string) => (await query<{ n: number }>(url, 'SELECT count(*)::int AS n FROM replicated'))[0]!.n;

describe('the streaming-standby helper: a real primary and hot standby', { skip }, () => {
  let pair: StreamingPair;

  before(async () => {
    pair = await startStreamingPair();
  });

  after(async () => {
    await pair?.stop();
  });

  it('replays a write from the primary on the standby', async () => {
    await query(pair.primaryUrl, 'CREATE TABLE replicated (id int PRIMARY KEY)');
    await query(pair.primaryUrl, 'INSERT INTO replicated VALUES (1)');
    await pair.waitForReplay();
    assert.equal(await countRows(pair.standbyUrl), 1);
  });

  it('holds a write back while replay is paused, and replays it once resumed', async () => {
    await pair.pauseReplay();
    await query(pair.primaryUrl, 'INSERT INTO replicated VALUES (2)');
    assert.equal(await countRows(pair.primaryUrl), 2);
    assert.equal(await countRows(pair.standbyUrl), 1, 'the standby must not see a write made while replay is paused');
    await pair.resumeReplay();
    await pair.waitForReplay();
    assert.equal(await countRows(pair.standbyUrl), 2);
  });

  it('stops twice without error', async () => {
    await pair.stop();
    await pair.stop();
  });
});
