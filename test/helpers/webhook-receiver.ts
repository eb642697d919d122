import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import { Webhook } from 'standardwebhooks';

/** A delivery as a receiver got it. */
export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
}

/**
 * How the receiver answers its n-th request (1 first): a status (after `delayMs`, if given), or 'hold' to leave it
 * unanswered (in flight).
 */
export type Answer = { status: number; headers?: Record<string, string>; delayMs?: number; trickleMs?: number } | 'hold';

/** The body a trickling answer sends a byte at a time. */
const TRICKLED_BYTES = 1_000;

export interface Receiver {
  /** Where the receiver listens; `url` is `${base}/hooks`. */
  base: string;
  url: string;
  received: Received[];
  /** Drops held requests and stops listening. */
  close(): Promise<void>;
}

/** A webhook receiver on loopback that keeps every request it gets and answers as `respond` says (200 by default). */
export async function startReceiver(respond: (n: number, path: string) => Answer = () => ({ status: 200 })): Promise<Receiver> {
  const received: Received[] = [];
  const held: ServerResponse[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (chunk: Buffer) => (body += chunk.toString()));
    req.on('end', () => {
      received.push({ path: req.url ?? '', headers: req.headers, body });
      const answer = respond(received.length, req.url ?? '');
      if (answer === 'hold') held.push(res);
      else if (answer.trickleMs !== undefined) {
        // The status at once, then the body a byte every trickleMs.
        res.writeHead(answer.status, { ...answer.headers, 'content-length': String(TRICKLED_BYTES) });
        let sent = 0;
        const timer = setInterval(() => {
          if (res.destroyed || sent >= TRICKLED_BYTES) return clearInterval(timer);
          res.write('x');
          if (++sent === TRICKLED_BYTES) res.end();
        }, answer.trickleMs);
        res.on('close', () => clearInterval(timer));
      } else if (answer.delayMs === undefined) res.writeHead(answer.status, answer.headers).end();
      else setTimeout(() => res.writeHead(answer.status, answer.headers).end(), answer.delayMs);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const base = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  return {
    base,
    url: `${base}/hooks`,
    received,
    close: () => {
      for (const res of held) res.destroy();
      server.closeAllConnections();
      return new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/** Verifies a delivery as a receiver would, with the specification's own library; returns the payload. */
export function verifyDelivery(secret: string, got: Received): unknown {
  return new Webhook(secret).verify(got.body, {
    'webhook-id': String(got.headers['webhook-id']),
    'webhook-timestamp': String(got.headers['webhook-timestamp']),
    'webhook-signature': String(got.headers['webhook-signature']),
  });
}

/** Waits until `check` holds, polling; fails naming `what` after `ms`. */
export async function until(check: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}
