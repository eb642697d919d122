import pg from 'pg';
import { ChangeSubscribers, EVERYTHING, type Change, type ChangeBatch, type ChangeFeed, type LoggedTable } from '../change-log.js';
import { changeChannel } from '../schema-names.js';

/** The log is read this often even without a notification: notifications only make it sooner. */
const POLL_MS = 250;
/**
 * Cached answers are used only while a read of the log that began less than this long ago has come back. A
 * change committed at any moment is therefore applied, or caching has stopped, within this bound plus one
 * read: well inside the one second Plant Store promises, whatever happens to the connection.
 */
const FRESH_MS = 750;
/**
 * A notification is acted on this long after it arrives, so that the commits of a burst are read in one go
 * rather than one read each. It is a twentieth of the one-second bound; this process's own writes do not wait
 * for it (see catchUp).
 */
const NOTIFIED_READ_DELAY_MS = 50;

/**
 * One statement, so that everything comes from one snapshot: the changes of transactions at or above
 * `horizon` not read yet ($2), the snapshot's xmin (every transaction below it is finished: its rows are
 * visible now or never will be), and how far the log has been pruned. Always at least one row.
 */
const READ_SQL = `
  SELECT x.xmin::text AS xmin, s.pruned_below::text AS pruned_below, pg_current_wal_lsn()::text AS lsn, c.seq, c.tx::text AS tx, c.table_name,
         c.user_id, c.group_id, c.plant_id, c.token_id, c.name, c.is_public
  FROM change_log_state s
  CROSS JOIN (SELECT pg_snapshot_xmin(pg_current_snapshot()) AS xmin) x
  LEFT JOIN change_log c ON c.tx >= coalesce($1::xid8, x.xmin) AND c.seq <> ALL($2::bigint[])
  ORDER BY c.seq`;

interface ReadRow {
  xmin: string;
  pruned_below: string;
  lsn: string;
  seq: number | null;
  tx: string | null;
  table_name: string | null;
  user_id: number | null;
  group_id: number | null;
  plant_id: number | null;
  token_id: number | null;
  name: string | null;
  is_public: number | null;
}

/** A pg_lsn (`16/B374D848`) as a number that orders like it. */
export function lsnValue(lsn: string): bigint {
  const [high = '0', low = '0'] = lsn.split('/');
  return (BigInt(`0x${high}`) << 32n) + BigInt(`0x${low}`);
}

/**
 * A pruning pass (see CHANGE_LOG_RETENTION_MS), in one statement: when the previous pass is at least
 * `retentionMs` old, the rows of transactions finished before it are deleted and this pass is marked. Several
 * instances may run it at once; the row lock on the state lets one of them through.
 */
export const PRUNE_SQL = `
  WITH mark AS (
    UPDATE change_log_state SET pruned_below = mark_xmin, mark_xmin = pg_snapshot_xmin(pg_current_snapshot()), mark_at = now()
    WHERE mark_at <= now() - make_interval(secs => $1::double precision / 1000) RETURNING pruned_below
  )
  DELETE FROM change_log WHERE tx < (SELECT pruned_below FROM mark)`;

/**
 * Where a process stands in the log. Sequence numbers are not commit order here (a transaction can take seq 10
 * and commit after one that took 11), so positions are kept in transactions: each row carries its writer's xid8,
 * and after each read every transaction below the snapshot's xmin is known finished and read. Rows of
 * transactions at or above it that were already read are remembered by seq until the horizon passes them. A
 * burst, a lost connection or a restart of the connection therefore skips nothing; only a process that stopped
 * reading for longer than the log is kept misses rows, finds the log pruned past its horizon, and is told
 * `everything`.
 */
class LogCursor {
  /** Every transaction below this xid8 is finished and its rows were read; undefined before the first read. */
  private horizon: bigint | undefined;
  /** Rows read whose transactions are at or above the horizon: seq -> tx. */
  private readonly consumed = new Map<number, bigint>();
  /**
   * This process's own transactions at or above the horizon, with the rows of each that were delivered already
   * (see takeOwn), counted by content: those are skipped when read. Other rows of the same transaction (a deleted
   * plant's grants, logged by triggers) are delivered when read, like any other writer's.
   */
  private readonly own = new Map<bigint, Map<string, number>>();
  /**
   * The primary's WAL position at the last read: every change delivered so far was written at or below it, so a
   * replica that has replayed this far shows them all.
   */
  walPosition = 0n;

  /** `skipsOwn`: own transactions' rows already delivered are skipped when read (see PostgresChangeFeed's constructor). */
  constructor(private readonly skipsOwn: boolean) {}

  get started(): boolean {
    return this.horizon !== undefined;
  }

  /** The parameters of the next read (READ_SQL). */
  readParameters(): unknown[] {
    return [this.horizon === undefined ? null : this.horizon.toString(), [...this.consumed.keys()]];
  }

  /**
   * Remembers a transaction of this process whose changes were delivered when it committed, so that reading its rows
   * does not drop what was cached since. One the log was already read past stays delivered twice (harmless).
   */
  ownTransaction(tx: bigint, delivered: readonly Change[]): void {
    if (!this.skipsOwn || this.horizon === undefined || tx < this.horizon) return;
    // Bounded while the log cannot be read: past it, own rows are delivered twice again.
    if (this.own.size >= MAX_OWN_TRANSACTIONS) this.own.clear();
    let rows = this.own.get(tx);
    if (rows === undefined) this.own.set(tx, (rows = new Map<string, number>()));
    for (const change of delivered) rows.set(changeKey(change), (rows.get(changeKey(change)) ?? 0) + 1);
  }

  /** Whether `change`, read from the log in transaction `tx`, was delivered already; counts it off if so. */
  private deliveredAlready(tx: bigint, change: Change): boolean {
    const rows = this.own.get(tx);
    const key = rows === undefined ? undefined : changeKey(change);
    const left = key === undefined ? 0 : (rows!.get(key) ?? 0);
    if (left === 0) return false;
    rows!.set(key!, left - 1);
    return true;
  }

  /** Takes in a read's rows: what to deliver, if anything (the first read only finds the position). */
  advance(rows: ReadRow[]): ChangeBatch | undefined {
    const first = this.horizon === undefined;
    const { xmin, pruned_below: prunedBelow } = rows[0]!;
    const fellBehind = this.horizon !== undefined && this.horizon < BigInt(prunedBelow);
    const changes: Change[] = [];
    for (const row of rows) {
      if (row.seq === null) continue;
      const tx = BigInt(row.tx!);
      this.consumed.set(row.seq, tx);
      const change: Change = {
        table: (row.table_name ?? EVERYTHING) as LoggedTable | typeof EVERYTHING,
        userId: row.user_id,
        groupId: row.group_id,
        plantId: row.plant_id,
        tokenId: row.token_id,
        name: row.name,
        isPublic: row.is_public === 1,
      };
      if (!this.deliveredAlready(tx, change)) changes.push(change);
    }
    this.horizon = BigInt(xmin);
    this.walPosition = lsnValue(rows[0]!.lsn);
    for (const [seq, tx] of this.consumed) if (tx < this.horizon) this.consumed.delete(seq);
    for (const tx of this.own.keys()) if (tx < this.horizon) this.own.delete(tx);
    if (first) return undefined;
    if (fellBehind) {
      this.consumed.clear();
      return 'everything';
    }
    return changes.length > 0 ? changes : undefined;
  }
}

/** A change-log row's content, as one string. */
const changeKey = (c: Change): string => `${c.table}|${c.userId}|${c.groupId}|${c.plantId}|${c.tokenId}|${c.name}|${c.isPublic}`;

/** Own transactions remembered at most (see LogCursor.ownTransaction). */
const MAX_OWN_TRANSACTIONS = 10_000;

/** A read that takes longer means the connection is gone, whether or not the socket says so: it is replaced. */
const READ_TIMEOUT_MS = 2_000;
const RECONNECT_MS = 1_000;

/** What the feed hears from its connection. */
interface ConnectionEvents {
  /** A connection is ready (again): read from where the cursor stands. */
  connected(): void;
  /** The connection is gone; a new one is tried in a moment. */
  lost(): void;
  notified(): void;
}

/**
 * The feed's own connection, LISTENing on the schema's channel and replaced a second after it is lost (an error, an
 * end, or a read that does not come back). Each change of state (following, lost) is reported once.
 */
class ListeningConnection {
  client: pg.Client | undefined;
  private reconnectTimer: NodeJS.Timeout | undefined;
  private closed = false;
  private following = false;
  reporter: ((event: 'following' | 'lost', detail: string) => void) | undefined;

  constructor(
    private readonly config: pg.ClientConfig,
    private readonly events: ConnectionEvents,
  ) {}

  /** Says, once per change, that reads succeed again. */
  readSucceeded(): void {
    if (this.following) return;
    this.following = true;
    this.reporter?.('following', 'following the change log');
  }

  /** Gives up on `client` (a read failed or did not come back). */
  fail(client: pg.Client, err: Error): void {
    if (this.client === client) client.emit('error', err);
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.reconnectTimer);
    const client = this.client;
    this.client = undefined;
    await client?.end().catch(() => {});
  }

  async connect(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client({ ...this.config, query_timeout: READ_TIMEOUT_MS, keepAlive: true });
    const lost = (err?: Error) => {
      if (this.client === client) this.client = undefined;
      // An orderly close ends the connection too: no loss to warn of.
      if (this.following && !this.closed) {
        this.following = false;
        this.reporter?.('lost', `change log connection lost (${err?.message ?? 'closed'}); caching nothing until it is back`);
      }
      client.removeAllListeners();
      client.on('error', () => {});
      // end() would wait for a socket that may never answer; destroying it does not.
      (client as unknown as { connection?: { stream?: { destroy(): void } } }).connection?.stream?.destroy();
      this.events.lost();
      if (!this.closed && this.reconnectTimer === undefined) {
        this.reconnectTimer = setTimeout(() => {
          this.reconnectTimer = undefined;
          void this.connect();
        }, RECONNECT_MS).unref();
      }
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', () => this.events.notified());
    try {
      await client.connect();
      // The planner overestimates READ_SQL (the one-row state table is rarely analyzed) past jit_above_cost, and
      // compiling it costs far more than the read; each notification would pay it.
      await client.query('SET jit = off');
      const { rows } = await client.query<{ schema: string }>('SELECT current_schema() AS schema');
      await client.query(`LISTEN ${pg.escapeIdentifier(changeChannel(rows[0]!.schema))}`);
      if (this.closed) return void client.end().catch(() => {});
      this.client = client;
      this.events.connected();
    } catch {
      lost();
    }
  }
}

/**
 * The change log of a PostgreSQL database as it reaches one process (see LogCursor for where it stands).
 *
 * Reads run on a connection of their own (LISTENing on it): soon after a notification, and every POLL_MS in any
 * case, so that a connection that is silently dropped (a proxy or firewall that discards its traffic without
 * closing it) is noticed by a read that does not come back. Until a read succeeds again, `sync()` says no:
 * the process caches nothing and reads the database on every request.
 */
export class PostgresChangeFeed implements ChangeFeed {
  private readonly subscribers = new ChangeSubscribers();
  private readonly cursor: LogCursor;
  private readonly connection: ListeningConnection;
  private started = false;
  /** When the last read that came back was sent (performance.now()). */
  private freshSince = -Infinity;
  private reading = false;
  private readAgain = false;
  /** When the last read was sent, and when the last notification came (performance.now()). */
  private lastSentAt = -Infinity;
  private notifiedAt = -Infinity;
  private notifiedTimer: NodeJS.Timeout | undefined;
  private readonly waiters: Array<{ since: number; resolve: () => void }> = [];
  private pollTimer: NodeJS.Timeout | undefined;

  /**
   * `readsLag`: listings are read from a replica. A page it serves right after this process's commit may lack the
   * commit and still be cached (see PostgresReads.page): the commit's rows are then delivered again when the log is
   * read, with the position a replica must have replayed to be cached, so that such a page is dropped. `onStart`
   * runs when a request first asks the feed: only serving processes follow the log.
   */
  constructor(
    config: pg.ClientConfig,
    readsLag: boolean,
    private readonly onStart?: () => void,
  ) {
    this.cursor = new LogCursor(!readsLag);
    this.connection = new ListeningConnection(config, {
      // From the horizon kept across connections: what was committed while nobody listened is read now.
      connected: () => this.read(),
      // Writers waiting for this connection go on: nothing is cached until a read succeeds again.
      lost: () => this.releaseWaiters(() => true),
      notified: () => this.readNotified(),
    });
  }

  get position(): number {
    return this.subscribers.position;
  }

  /** See LogCursor.walPosition. */
  get walPosition(): bigint {
    return this.cursor.walPosition;
  }

  sync(): boolean {
    if (!this.started) this.start();
    return this.connection.client !== undefined && performance.now() - this.freshSince < FRESH_MS;
  }

  subscribe(listener: (batch: ChangeBatch, position: number) => void): void {
    this.subscribers.subscribe(listener);
  }

  report(listener: (event: 'following' | 'lost', detail: string) => void): void {
    this.connection.reporter = listener;
  }

  /**
   * This process's own commit, as the log will record it: delivered at once, so that its next request sees it
   * without a read of the log. The read that meets the rows of `transaction` skips them: delivered again, they
   * would drop what was cached since for nothing, unless listings are read from a replica (see the constructor).
   */
  takeOwn(changes: readonly Change[], transaction: string | undefined): void {
    if (!this.started || changes.length === 0) return;
    this.subscribers.deliver(changes);
    if (transaction !== undefined) this.cursor.ownTransaction(BigInt(transaction), changes);
  }

  catchUp(): Promise<void> {
    if (!this.started || this.connection.client === undefined || !this.cursor.started) return Promise.resolve();
    const since = performance.now();
    return new Promise((resolve) => {
      this.waiters.push({ since, resolve });
      this.read();
    });
  }

  async close(): Promise<void> {
    clearInterval(this.pollTimer);
    clearTimeout(this.notifiedTimer);
    this.releaseWaiters(() => true);
    await this.connection.close();
  }

  private start(): void {
    this.started = true;
    this.onStart?.();
    void this.connection.connect();
    this.pollTimer = setInterval(() => this.read(), POLL_MS).unref();
  }

  /**
   * A commit was notified: its rows are read by the first read sent from now on, which is this one, at most
   * NOTIFIED_READ_DELAY_MS from now, unless another (a poll, a write's catchUp) is sent first.
   */
  private readNotified(): void {
    this.notifiedAt = performance.now();
    if (this.notifiedTimer !== undefined) return;
    this.notifiedTimer = setTimeout(() => {
      this.notifiedTimer = undefined;
      if (this.lastSentAt < this.notifiedAt) this.read();
    }, NOTIFIED_READ_DELAY_MS).unref();
  }

  /** Reads the log now, or once more after the read under way (whose snapshot may predate the call). */
  private read(): void {
    if (this.reading) {
      this.readAgain = true;
      return;
    }
    const client = this.connection.client;
    if (client === undefined) return;
    this.reading = true;
    this.readAgain = false;
    const sentAt = performance.now();
    this.lastSentAt = sentAt;
    client
      // Named, so the connection parses and plans it once, not at every notification.
      .query<ReadRow>({ name: 'plantstore_read_change_log', text: READ_SQL, values: this.cursor.readParameters() })
      .then(
        ({ rows }) => {
          if (this.connection.client !== client) return;
          const batch = this.cursor.advance(rows);
          if (batch !== undefined) this.subscribers.deliver(batch);
          this.freshSince = sentAt;
          this.connection.readSucceeded();
          this.releaseWaiters((waiter) => waiter.since <= sentAt);
        },
        // A read that fails or does not come back: this connection cannot be trusted any more.
        (err: Error) => this.connection.fail(client, new Error(`a read of the change log failed: ${err.message}`)),
      )
      .finally(() => {
        this.reading = false;
        if (this.readAgain || this.waiters.length > 0) this.read();
      });
  }

  private releaseWaiters(which: (waiter: { since: number }) => boolean): void {
    for (let i = this.waiters.length - 1; i >= 0; i--) {
      if (which(this.waiters[i]!)) this.waiters.splice(i, 1)[0]!.resolve();
    }
  }
}

/** Announcements are this far apart at least: the commits of a burst share one. */
const ANNOUNCE_EVERY_MS = 20;

/**
 * Tells the other processes on the database that this one committed, so that they read the log sooner than their
 * next poll: a NOTIFY of its own, after the commit. Inside the writing transaction, a NOTIFY would hold the
 * notification queue's global lock through the commit, and every write of every instance would commit one at a
 * time. At most one is sent every ANNOUNCE_EVERY_MS; one that fails is only a later read.
 */
export class ChangeAnnouncer {
  private waiting = false;
  private again = false;
  private sending: Promise<void> | undefined;

  constructor(private readonly pool: pg.Pool) {}

  announce(): void {
    if (this.waiting) {
      this.again = true;
      return;
    }
    this.waiting = true;
    this.sending = this.send();
    void this.sending.finally(() =>
      setTimeout(() => {
        this.waiting = false;
        if (this.again) {
          this.again = false;
          this.announce();
        }
      }, ANNOUNCE_EVERY_MS).unref(),
    );
  }

  /**
   * Sends what is owed before the pool closes: the announcement in flight, and one held back for the interval. A
   * CLI command closes its store right after its commit, and its announcement would otherwise be dropped with the
   * pool, leaving the instances to find its change at their next poll.
   */
  async flush(): Promise<void> {
    await this.sending;
    if (!this.again) return;
    this.again = false;
    await this.send();
  }

  private send(): Promise<void> {
    return this.pool
      .query({ name: 'plantstore_announce', text: 'SELECT pg_notify($1 || current_schema(), $2)', values: [changeChannel(''), 'changes'] })
      .then(
        () => {},
        () => {},
      );
  }
}
