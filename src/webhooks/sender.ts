import {
  Agent as HttpAgent,
  request as httpRequest,
  type ClientRequest,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { checkedLookup, urlRefusal } from './endpoint-address.js';

/** What a receiver answered. */
export interface ReceiverAnswer {
  status: number;
  headers: IncomingHttpHeaders;
}

/**
 * Posts webhook bodies over kept-alive connections, one agent per receiving origin, so that a busy endpoint is not
 * paid a new connection (and TLS handshake) per delivery. Redirects are not followed: node:http never does. Only
 * addresses `addressRefusal` allows are connected to, judged after DNS resolution on every new connection.
 */
export class WebhookSender {
  private readonly agents = new Map<string, HttpAgent>();
  /** Requests in flight, so that abortAll can cut them off (a timer each, not an AbortSignal: cheaper per delivery). */
  private readonly live = new Set<ClientRequest>();
  private readonly lookup: ReturnType<typeof checkedLookup>;

  constructor(private readonly allowPrivate: boolean) {
    this.lookup = checkedLookup(allowPrivate);
  }

  /** Posts `body`; fails with ETIMEDOUT if the receiver has not answered with a status within `timeoutMs`. */
  async post(url: URL, headers: OutgoingHttpHeaders, body: string, timeoutMs: number): Promise<ReceiverAnswer> {
    // A literal address is connected to without a lookup: judged here.
    const refused = urlRefusal(url, this.allowPrivate);
    if (refused !== undefined) throw Object.assign(new Error(`refused: ${refused}`), { code: 'EWEBHOOKADDRESS' });
    try {
      return await this.once(url, headers, body, timeoutMs, false);
    } catch (err) {
      // A kept-alive connection the receiver closed just as it was reused: the request never reached it.
      if ((err as { retryOnFreshConnection?: boolean }).retryOnFreshConnection) return this.once(url, headers, body, timeoutMs, true);
      throw err;
    }
  }

  /** Cuts off every request in flight (the process is stopping). */
  abortAll(): void {
    for (const req of this.live) req.destroy(Object.assign(new Error('cut off: the process is stopping'), { code: 'ECANCELED' }));
  }

  /** Closes every kept-alive connection. */
  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }

  private once(url: URL, headers: OutgoingHttpHeaders, body: string, timeoutMs: number, fresh: boolean): Promise<ReceiverAnswer> {
    const https = url.protocol === 'https:';
    return new Promise<ReceiverAnswer>((resolve, reject) => {
      const req = (https ? httpsRequest : httpRequest)(url, {
        method: 'POST',
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        agent: fresh ? false : this.agentFor(url.origin, https),
        lookup: this.lookup,
      });
      this.live.add(req);
      const timer = setTimeout(
        () => req.destroy(Object.assign(new Error(`no answer within ${timeoutMs} ms`), { code: 'ETIMEDOUT' })),
        timeoutMs,
      );
      req.once('close', () => {
        clearTimeout(timer);
        this.live.delete(req);
      });
      req.on('response', (res) => {
        clearTimeout(timer);
        // Read to the end, so that the connection can carry the next delivery.
        res.resume();
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers }));
        res.on('error', reject);
      });
      req.on('error', (err: NodeJS.ErrnoException) => {
        if (!fresh && req.reusedSocket && err.code === 'ECONNRESET') Object.assign(err, { retryOnFreshConnection: true });
        reject(err);
      });
      req.end(body);
    });
  }

  private agentFor(origin: string, https: boolean): HttpAgent {
    let agent = this.agents.get(origin);
    if (agent === undefined) {
      const options = { keepAlive: true, lookup: this.lookup };
      agent = https ? new HttpsAgent(options) : new HttpAgent(options);
      this.agents.set(origin, agent);
    }
    return agent;
  }
}
