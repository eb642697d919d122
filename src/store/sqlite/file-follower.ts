import { statSync, type Stats } from 'node:fs';
import { stat } from 'node:fs/promises';
import { sameFile } from './file-holders.js';

type FileEvent = 'gone' | 'reopened' | 'reopen_failed';

/** What the store does when the file at its path goes, or comes back. */
export interface FileEvents {
  /** Whether the store's connections are open (on the file followed). */
  isOpen(): boolean;
  /** Closes every connection at once, so that no read serves the old file. */
  closeAll(): Promise<void>;
  /**
   * Opens, migrates and serves the file now at `path`; throws when it cannot. `previous` is the file that was open
   * before, which other processes may still have open.
   */
  reopen(path: string, previous: Stats | undefined): Promise<void>;
}

/**
 * Checks every `intervalMs` that the file at a SQLite store's path is still the one open (same device, inode and birth time).
 * When it is removed or replaced, the store's connections are closed, so every read answers 503; when a file is
 * there again, it is opened and served. The server calls `follow`; CLI commands never do.
 */
export class FileFollower {
  private identity: Stats | undefined;
  private timer: NodeJS.Timeout | undefined;
  private checking: Promise<void> | undefined;
  private onEvent: ((event: FileEvent, detail: string) => void) | undefined;
  private lastReopenFailure: string | undefined;
  private stopped = false;

  constructor(
    private readonly path: string,
    private readonly events: FileEvents,
  ) {}

  follow(intervalMs: number, onEvent: (event: FileEvent, detail: string) => void): void {
    if (this.timer) return;
    this.identity = statSync(this.path);
    this.onEvent = onEvent;
    this.timer = setInterval(() => {
      this.checking ??= this.check().finally(() => (this.checking = undefined));
    }, intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.checking;
  }

  private async check(): Promise<void> {
    const { path } = this;
    let current: Stats | undefined;
    try {
      current = await stat(path);
    } catch {
      current = undefined;
    }
    if (this.stopped) return;
    const open = this.events.isOpen();
    if (current && this.identity && sameFile(current, this.identity) && open) return;
    if (open) {
      await this.events.closeAll();
      this.onEvent?.('gone', current ? `${path} was replaced by another file` : `${path} was removed`);
    }
    if (!current) return;
    try {
      await this.events.reopen(path, this.identity);
      if (this.stopped) return;
      this.identity = statSync(path);
      this.lastReopenFailure = undefined;
      this.onEvent?.('reopened', `${path} reopened`);
    } catch (err) {
      // Said once per distinct reason, not every check.
      const reason = `${path} cannot be opened: ${(err as Error).message}`;
      if (reason !== this.lastReopenFailure) this.onEvent?.('reopen_failed', reason);
      this.lastReopenFailure = reason;
    }
  }
}
