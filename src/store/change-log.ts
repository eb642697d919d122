/**
 * The change log: every committed change to a table that decides who sees what (or who is authenticated) adds
 * rows naming what it touched, written by triggers in the same transaction, whoever the writer is (this
 * service, the CLI, an import, another instance, plain SQL). Each process reads the rows it has not seen and
 * drops only the cached answers they can affect.
 *
 * A row records facts, never conclusions: "the grant of plant 7 to user 3 changed", not "user 3's pages are
 * stale". Which cached answers a fact affects is decided once, beside the access rule (catalogue/change-scopes.ts).
 */
import type { ChangedRow } from '../catalogue/change-scopes.js';

/** The tables whose rows the log names (migration 0003 lists them with the columns each logs). */
export type LoggedTable = 'users' | 'groups' | 'group_members' | 'plants' | 'plant_user_grants' | 'plant_group_grants' | 'tokens';

/** The table name of a row that says "anything may have changed" (an import, a TRUNCATE): every cache is emptied. */
export const EVERYTHING = '*';

/** One change-log row as read back: the table it is about and the keys it names (`plantId` is a catalogue position). */
export interface Change extends ChangedRow {
  table: LoggedTable | typeof EVERYTHING;
}

/**
 * What a process is told: the changes committed since it last heard, in commit order, or `everything` when it
 * cannot know (it fell behind the pruned end of the log, or its database file was replaced).
 */
export type ChangeBatch = readonly Change[] | 'everything';

/**
 * How rows leave the log: a pruning pass deletes the rows committed before the previous pass, which ran at least
 * `retention` ago, so every process that read the log since then has seen them. A process that has not read it
 * for that long finds that rows it never saw are gone, and empties every cache instead.
 */
export const CHANGE_LOG_RETENTION_MS = 60_000;
/** How often a serving process runs a pruning pass (each pass deletes only what is older than the retention). */
export const CHANGE_LOG_PRUNE_EVERY_MS = 30_000;

/**
 * Where committed changes reach a process. The caches subscribe to it; the request path asks it, once per
 * request, whether cached answers may be used at all.
 */
export interface ChangeFeed {
  /**
   * Brings the feed up to date where that is synchronous (SQLite: reads the log when the read snapshot is
   * renewed), and says whether cached answers may be used now: false while changes cannot be followed (a lost
   * or silent PostgreSQL connection, a closed database). Cheap: called on every request.
   */
  sync(): boolean;
  /** Counts the batches delivered so far; a read that began at an older position may have missed one. */
  readonly position: number;
  /** Calls `listener` with every batch of changes from now on, before `position` moves past it. */
  subscribe(listener: (batch: ChangeBatch, position: number) => void): void;
  /**
   * Resolves once every change committed before the call has been delivered (after this process's own writes,
   * so that its next request sees them). Resolves at once while the feed is not following changes.
   */
  catchUp(): Promise<void>;
  /**
   * Tells `listener` when the feed stops following the log (`lost`: nothing is cached until it is back) and
   * when it follows it again, with a sentence for the log. Backends whose feed cannot be lost never call it.
   */
  report?(listener: (event: 'following' | 'lost', detail: string) => void): void;
}

/** A feed's subscribers and how many batches it has given them (ChangeFeed's `position`). */
export class ChangeSubscribers {
  position = 0;
  private readonly listeners: Array<(batch: ChangeBatch, position: number) => void> = [];

  subscribe(listener: (batch: ChangeBatch, position: number) => void): void {
    this.listeners.push(listener);
  }

  deliver(batch: ChangeBatch): void {
    const position = ++this.position;
    for (const listener of this.listeners) listener(batch, position);
  }
}
