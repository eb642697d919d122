import { connect } from 'node:net';

export interface WireResponse {
  status: number;
  /** Header names lower-cased; repeated headers joined with ", ". */
  headers: Record<string, string>;
  /** The body bytes after undoing chunked transfer coding, as UTF-8. */
  text: string;
}

function dechunk(raw: Buffer): Buffer {
  const parts: Buffer[] = [];
  let at = 0;
  for (;;) {
    const eol = raw.indexOf('\r\n', at);
    if (eol < 0) throw new Error('truncated chunked body');
    const size = Number.parseInt(raw.subarray(at, eol).toString('latin1'), 16);
    if (!Number.isInteger(size)) throw new Error('bad chunk size');
    if (size === 0) return Buffer.concat(parts);
    parts.push(raw.subarray(eol + 2, eol + 2 + size));
    at = eol + 2 + size + 2;
  }
}

/** Parses one complete HTTP/1.x response (the server closed the connection after it). */
export function parseResponse(raw: Buffer, head: boolean): WireResponse {
  // Interim answers (100 Continue) come before the final one.
  while (/^HTTP\/1\.[01] 1\d\d /.test(raw.subarray(0, 16).toString('latin1'))) raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4);
  const end = raw.indexOf('\r\n\r\n');
  if (end < 0) throw new Error(`no complete response head in ${JSON.stringify(raw.subarray(0, 200).toString('latin1'))}`);
  const [statusLine, ...lines] = raw.subarray(0, end).toString('latin1').split('\r\n');
  const status = /^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '')?.[1];
  if (status === undefined) throw new Error(`bad status line ${JSON.stringify(statusLine)}`);
  const headers: Record<string, string> = {};
  for (const line of lines) {
    const colon = line.indexOf(':');
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    headers[name] = headers[name] === undefined ? value : `${headers[name]}, ${value}`;
  }
  let body = raw.subarray(end + 4);
  if (head) body = Buffer.alloc(0);
  else if (/chunked/i.test(headers['transfer-encoding'] ?? '')) body = dechunk(body);
  else if (headers['content-length'] !== undefined) body = body.subarray(0, Number(headers['content-length']));
  return { status: Number(status), headers, text: body.toString('utf8') };
}

/**
 * Writes `request` to a fresh TCP connection byte for byte (nothing normalises it, unlike an HTTP client)
 * and resolves with the response once the server closes the connection. Send `Connection: close`.
 */
export async function sendRaw(
  port: number,
  request: Buffer | string,
  opts: { head?: boolean; timeoutMs?: number } = {},
): Promise<WireResponse> {
  return parseResponse(await exchangeRaw(port, request, opts.timeoutMs), opts.head ?? false);
}

/**
 * The answers to pipelined requests (written together by `exchangeRaw`), in order; each must carry
 * Content-Length, as a page does, or be a 204, which has no body.
 */
export function parseResponses(raw: Buffer): WireResponse[] {
  const responses: WireResponse[] = [];
  while (raw.length > 0) {
    const response = parseResponse(raw, false);
    const length = response.status === 204 ? 0 : Number(response.headers['content-length']);
    if (!Number.isInteger(length)) throw new Error('a pipelined answer without Content-Length');
    responses.push(response);
    raw = raw.subarray(raw.indexOf('\r\n\r\n') + 4 + length);
  }
  return responses;
}

/** Writes `request` to a fresh TCP connection and resolves with every byte the server sent until it closed. */
export function exchangeRaw(port: number, request: Buffer | string, timeoutMs = 15_000): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const socket = connect(port, '127.0.0.1');
    const chunks: Buffer[] = [];
    socket.setTimeout(timeoutMs, () => {
      socket.destroy();
      reject(
        new Error(
          `no complete answer within the timeout; got ${JSON.stringify(Buffer.concat(chunks).subarray(0, 300).toString('latin1'))}`,
        ),
      );
    });
    socket.on('data', (chunk: Buffer) => chunks.push(chunk));
    // A reset after the answer was written (the server closes on a request it refused) still leaves the answer.
    socket.on('error', () => undefined);
    socket.on('close', () => resolve(Buffer.concat(chunks)));
    socket.write(typeof request === 'string' ? Buffer.from(request, 'latin1') : request);
  });
}
