import type { Stats } from 'node:fs';
import { readdir, stat } from 'node:fs/promises';

export type FileIdentity = Pick<Stats, 'dev' | 'ino' | 'birthtimeMs'>;

/**
 * Whether two stats are of one file. A device and inode alone are not enough: once the last name and descriptor
 * of a file are gone, the file system gives its inode number to the next file created, so the birth time is
 * compared too where the file system keeps one (0 where it does not).
 */
export function sameFile(a: FileIdentity, b: FileIdentity): boolean {
  return a.dev === b.dev && a.ino === b.ino && (a.birthtimeMs === 0 || b.birthtimeMs === 0 || a.birthtimeMs === b.birthtimeMs);
}

/** Where Linux lists each process's open files, as links that `stat` follows to the file even once it is unlinked. */
const PROCESSES = '/proc';

/**
 * The other processes that have `file` (a file by its device and inode, which may no longer have a name) open, as
 * far as this process can see: on Linux, those of its own user (every process, for root); elsewhere none is seen.
 *
 * SQLite finds a database's `-wal` and `-shm` by the database's path, not by its file. A process that opened the
 * file that was at a path before another was moved there goes on using the path's `-wal` and `-shm` with it, so a
 * connection to the new file beside it would share them, and each would write the other's pages (SQLite's "How To
 * Corrupt", §2.4). Such a process need not hold any lock while idle: only its open descriptor tells.
 */
export async function otherProcessesHolding(file: FileIdentity): Promise<number[]> {
  let pids: string[];
  try {
    pids = (await readdir(PROCESSES)).filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid);
  } catch {
    return [];
  }
  const holders = await Promise.all(pids.map(async (pid) => ((await holds(pid, file)) ? Number(pid) : undefined)));
  return holders.filter((pid) => pid !== undefined);
}

async function holds(pid: string, file: FileIdentity): Promise<boolean> {
  let descriptors: string[];
  try {
    descriptors = await readdir(`${PROCESSES}/${pid}/fd`);
  } catch {
    // Another user's process, or one that has ended.
    return false;
  }
  for (const fd of descriptors) {
    const target = await stat(`${PROCESSES}/${pid}/fd/${fd}`).catch(() => undefined);
    if (target !== undefined && sameFile(target, file)) return true;
  }
  return false;
}
