import pg from 'pg';
import { changeChannel } from '../migrations/0002-change-notifications.js';

const RECONNECT_MS = 1_000;

/**
 * LISTENs on one dedicated connection for the change notifications the triggers of migration 0002 send.
 * `version()` changes on every notification; it is undefined until the first LISTEN succeeds and whenever
 * the connection is lost (notifications could be missed), so callers cache nothing until it is back. Started
 * on first use, so CLI commands never open it.
 */
export class ChangeListener {
  private client: pg.Client | undefined;
  private listening = false;
  private counter = 0;
  private started = false;
  private closed = false;
  private timer: NodeJS.Timeout | undefined;

  constructor(private readonly config: pg.ClientConfig) {}

  version(): number | undefined {
    if (!this.started) {
      this.started = true;
      void this.connect();
    }
    return this.listening ? this.counter : undefined;
  }

  private async connect(): Promise<void> {
    if (this.closed) return;
    const client = new pg.Client(this.config);
    this.client = client;
    const lost = () => {
      if (this.client !== client) return;
      this.listening = false;
      this.client = undefined;
      client.removeAllListeners();
      client.on('error', () => {});
      void client.end().catch(() => {});
      if (!this.closed) this.timer = setTimeout(() => void this.connect(), RECONNECT_MS).unref();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', () => this.counter++);
    try {
      await client.connect();
      const { rows } = await client.query<{ schema: string }>('SELECT current_schema() AS schema');
      await client.query(`LISTEN ${pg.escapeIdentifier(changeChannel(rows[0]!.schema))}`);
      // Whatever happened while nobody listened is unknown: a new version drops every cache.
      this.counter++;
      this.listening = this.client === client;
    } catch {
      lost();
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    const client = this.client;
    this.client = undefined;
    this.listening = false;
    await client?.end().catch(() => {});
  }
}
