import { Agent as HttpAgent, request as httpRequest, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';

/** What a receiver answered. */
export interface ReceiverAnswer {
  status: number;
  headers: IncomingHttpHeaders;
}

/**
 * Posts webhook bodies over kept-alive connections, one agent per receiving origin, so that a busy endpoint is not
 * paid a new connection (and TLS handshake) per delivery. Redirects are not followed: node:http never does.
 */
export class WebhookSender {
  private readonly agents = new Map<string, HttpAgent>();

  async post(url: URL, headers: OutgoingHttpHeaders, body: string, signal: AbortSignal): Promise<ReceiverAnswer> {
    try {
      return await this.once(url, headers, body, signal, false);
    } catch (err) {
      // A kept-alive connection the receiver closed just as it was reused: the request never reached it.
      if ((err as { retryOnFreshConnection?: boolean }).retryOnFreshConnection) return this.once(url, headers, body, signal, true);
      throw err;
    }
  }

  /** Closes every kept-alive connection. */
  close(): void {
    for (const agent of this.agents.values()) agent.destroy();
    this.agents.clear();
  }

  private once(url: URL, headers: OutgoingHttpHeaders, body: string, signal: AbortSignal, fresh: boolean): Promise<ReceiverAnswer> {
    const https = url.protocol === 'https:';
    return new Promise((resolve, reject) => {
      const req = (https ? httpsRequest : httpRequest)(url, {
        method: 'POST',
        headers: { ...headers, 'content-length': Buffer.byteLength(body) },
        agent: fresh ? false : this.agentFor(url.origin, https),
        signal,
      });
      req.on('response', (res) => {
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
      agent = https ? new HttpsAgent({ keepAlive: true }) : new HttpAgent({ keepAlive: true });
      this.agents.set(origin, agent);
    }
    return agent;
  }
}
