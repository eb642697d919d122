import { createConnection, createServer, type Server, type Socket } from 'node:net';

interface Connection {
  client: Socket;
  upstream: Socket;
  /** What the client sent first (a PostgreSQL startup message names the application). */
  opening: Buffer | undefined;
  /** Traffic is discarded both ways and the sockets stay open: a silent drop, as a NAT or firewall does. */
  blackholed: boolean;
}

/**
 * A loopback TCP proxy in front of a real server, which a test can cut (every connection dropped, new ones
 * refused) and restore on the same port: the database "goes away" and "comes back" without touching it. It
 * can also black-hole chosen connections: they stay open, but nothing they send arrives and nothing comes back.
 */
export class TcpProxy {
  private server: Server | undefined;
  private readonly connections = new Set<Connection>();
  port = 0;

  constructor(
    private readonly targetHost: string,
    private readonly targetPort: number,
  ) {}

  async start(): Promise<void> {
    const server = createServer((client) => {
      const upstream = createConnection({ host: this.targetHost, port: this.targetPort });
      const connection: Connection = { client, upstream, opening: undefined, blackholed: false };
      this.connections.add(connection);
      const forward = (from: Socket, to: Socket) =>
        from.on('data', (chunk: Buffer) => {
          if (from === client && connection.opening === undefined) connection.opening = chunk;
          if (!connection.blackholed) to.write(chunk);
        });
      forward(client, upstream);
      forward(upstream, client);
      for (const s of [client, upstream]) {
        s.on('close', () => {
          this.connections.delete(connection);
          client.destroy();
          upstream.destroy();
        });
        s.on('error', () => {
          client.destroy();
          upstream.destroy();
        });
      }
    });
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.port, '127.0.0.1', () => resolve());
    });
    const address = server.address();
    if (address && typeof address === 'object') this.port = address.port;
    this.server = server;
  }

  /**
   * Silently drops the open connections whose first message contains `marker` (all of them without one) and
   * returns how many it dropped. New connections are forwarded as before.
   */
  blackhole(marker?: string): number {
    let count = 0;
    for (const connection of this.connections) {
      if (marker === undefined || connection.opening?.includes(marker)) {
        connection.blackholed = true;
        count++;
      }
    }
    return count;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    for (const { client, upstream } of this.connections) {
      client.destroy();
      upstream.destroy();
    }
    this.connections.clear();
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
