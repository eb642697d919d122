import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { exportJWK, exportSPKI, generateKeyPair, SignJWT, type CryptoKey, type JWK, type JWTPayload } from 'jose';

export const ISSUER = 'https://idp.test/realms/plants';
export const AUDIENCE = 'plantstore';
/** 32 bytes: the shortest secret HS256 accepts. */
export const SECRET = 'test-secret-0123456789-abcdefghij';

export interface MintOptions {
  alg?: string;
  kid?: string;
  /** Claims to set (or, with `undefined`, to leave out). `iss`, `aud`, `sub` and `exp` have defaults. */
  claims?: Record<string, unknown>;
  /** Seconds from now; `null` leaves `exp` out. Default 300. */
  expiresIn?: number | null;
  /** Seconds from now for `nbf`. */
  notBefore?: number;
}

/** Signs a JWT the way a provider would: iss, aud, sub, iat, exp, unless the options say otherwise. */
export async function mintJwt(key: CryptoKey | Uint8Array, opts: MintOptions = {}): Promise<string> {
  const now = Math.floor(Date.now() / 1000);
  const claims: JWTPayload = { iss: ISSUER, aud: AUDIENCE, sub: 'alice', iat: now, ...opts.claims };
  for (const [name, value] of Object.entries(claims)) if (value === undefined) delete claims[name];
  if (opts.expiresIn !== null) claims.exp = now + (opts.expiresIn ?? 300);
  if (opts.notBefore !== undefined) claims.nbf = now + opts.notBefore;
  return new SignJWT(claims).setProtectedHeader({ alg: opts.alg ?? 'HS256', typ: 'JWT', ...(opts.kid ? { kid: opts.kid } : {}) }).sign(key);
}

export const secretKey = (secret = SECRET): Uint8Array => new TextEncoder().encode(secret);

export interface SigningKey {
  alg: string;
  kid: string;
  privateKey: CryptoKey;
  publicJwk: JWK;
  publicPem: string;
}

export async function signingKey(alg: string, kid: string): Promise<SigningKey> {
  const { privateKey, publicKey } = await generateKeyPair(alg, { extractable: true });
  const publicJwk = { ...(await exportJWK(publicKey)), kid, alg, use: 'sig' };
  return { alg, kid, privateKey, publicJwk, publicPem: await exportSPKI(publicKey) };
}

/** A local JWKS endpoint the test controls: which keys it publishes, whether it answers, how often it was asked. */
export interface JwksServer {
  url: string;
  fetches: number;
  /** The keys it answers with from now on, or a body that is not a key set (an error page answered 200). */
  publish(keys: JWK[] | string): void;
  /** Stops answering (connection refused) until `start()`. */
  stop(): Promise<void>;
  start(): Promise<void>;
}

export async function startJwksServer(keys: JWK[]): Promise<JwksServer> {
  let published: JWK[] | string = keys;
  let server: Server | undefined;
  let port = 0;
  const state: JwksServer = {
    url: '',
    fetches: 0,
    publish(next) {
      published = next;
    },
    async start() {
      server = createServer((_req, res) => {
        state.fetches++;
        res.setHeader('content-type', 'application/jwk-set+json');
        res.end(typeof published === 'string' ? published : JSON.stringify({ keys: published }));
      });
      await new Promise<void>((resolve) => server!.listen(port, '127.0.0.1', resolve));
      port = (server.address() as AddressInfo).port;
      state.url = `http://127.0.0.1:${port}/jwks.json`;
    },
    async stop() {
      const s = server;
      server = undefined;
      if (!s) return;
      s.closeAllConnections();
      await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
  await state.start();
  return state;
}
