import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readdirSync, readlinkSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { otherProcessesHolding } from '../../src/store/sqlite/file-holders.js';
import { openStore } from '../../src/store/open-store.js';

// A server whose database file was replaced opens the new file only once no other process holds the old one. The
// old file's inode number is free for the next file created once the old one is gone, so a process holding that new
// file must not be taken for a holder of the old one: the check would put the reopen off for as long as it runs.

describe('the processes holding a replaced database file', { skip: process.platform !== 'linux' && 'reads /proc' }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-holders-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('are those with that very file open, not another file that has since been given its inode number', async () => {
    const file = join(dir, 'held.db');
    writeFileSync(file, 'x');
    const holder = spawn(
      process.execPath,
      ['-e', `require('fs').openSync(${JSON.stringify(file)}, 'r'); console.log('open'); setInterval(() => {}, 1000)`],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    try {
      await new Promise<void>((resolve, reject) => {
        holder.stdout.once('data', () => resolve());
        holder.once('exit', (code) => reject(new Error(`holder exited with ${code}`)));
      });
      const held = statSync(file);
      assert.deepEqual(await otherProcessesHolding(held), [holder.pid]);

      // The same device and inode born at another time: what a reused inode number looks like.
      if (held.birthtimeMs === 0) return; // a file system without birth times: nothing tells the two apart
      assert.deepEqual(await otherProcessesHolding({ dev: held.dev, ino: held.ino, birthtimeMs: held.birthtimeMs - 1000 }), []);
    } finally {
      holder.kill();
    }
  });

  it('are not this process once its store is closed, whether it migrated the file or found it up to date', async () => {
    // The primary of `serve --workers` opens and closes the store before its workers start: a descriptor it kept
    // would hold off a restored file's reopen.
    const file = join(dir, 'closed.db');
    const descriptorsOf = () =>
      readdirSync('/proc/self/fd').filter((fd) => {
        try {
          return readlinkSync(`/proc/self/fd/${fd}`).startsWith(file);
        } catch {
          return false;
        }
      });
    for (const round of ['new', 'up to date']) {
      const store = await openStore({ db: file });
      assert.ok(descriptorsOf().length > 0, round);
      await store.close();
      assert.deepEqual(descriptorsOf(), [], `${round}: descriptors left open`);
    }
  });
});
