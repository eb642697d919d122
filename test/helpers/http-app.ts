import type { DispatcherOptions } from '../../src/webhooks/dispatcher.js';
import { request as httpRequest, type IncomingHttpHeaders, type OutgoingHttpHeaders } from 'node:http';
import { Writable } from 'node:stream';
import type { FastifyInstance } from 'fastify';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { generateToken } from '../../src/catalogue/tokens.js';
import { buildApp } from '../../src/app.js';
import { loadConfig, type ConfigInput, type LogLevel } from '../../src/config.js';
import type { Grantee, Store } from '../../src/store/store.js';
import { assertConforms, createResponseValidator, type ResponseValidator } from './openapi-responses.js';

export interface StartOptions {
  /** Collect the JSON log lines in memory (read them with `logs()`); otherwise logging is silent. */
  captureLogs?: boolean;
  /** Log level when capturing (default `info`). */
  logLevel?: LogLevel;
  /** Request log lines when capturing (default true). */
  logRequests?: boolean;
  /** More configuration (e.g. JWT settings), as flags would give it. */
  config?: Omit<ConfigInput, 'db' | 'logLevel' | 'logRequests'>;
  /** Environment the configuration is read from (e.g. PLANTSTORE_JWT_SECRET); empty by default. */
  env?: NodeJS.ProcessEnv;
  /** Webhook delivery pacing (polling, lease, timeout), shorter than the defaults for tests. */
  webhooks?: Partial<DispatcherOptions>;
}

export interface RunningApp {
  /** Base URL of the real listening socket, e.g. `http://127.0.0.1:40123`. */
  url: string;
  app: FastifyInstance;
  /** Closes the server (not the store: the caller owns it). */
  close(): Promise<void>;
  /** Everything logged so far (empty unless `captureLogs`). */
  logs(): string;
}

/**
 * Builds the real app with the one factory, from the configuration the flags and environment give as `serve` reads
 * them, and listens on 127.0.0.1, port 0: tests talk to it over TCP. The store is the caller's (opened as `serve`
 * opens it, see backends.ts).
 */
export async function startApp(store: Store, opts: StartOptions = {}): Promise<RunningApp> {
  const chunks: string[] = [];
  const logStream = opts.captureLogs
    ? new Writable({
        write(chunk: Buffer | string, _encoding, callback) {
          chunks.push(chunk.toString());
          callback();
        },
      })
    : undefined;
  const { app: config } = loadConfig(
    {
      ...opts.config,
      logLevel: opts.captureLogs ? (opts.logLevel ?? 'info') : 'silent',
      logRequests: opts.captureLogs ? (opts.logRequests ?? true) : false,
    },
    opts.env ?? {},
  );
  const app = await buildApp({ config, store, ...(logStream ? { logStream } : {}), ...(opts.webhooks ? { webhooks: opts.webhooks } : {}) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  const address = app.server.address();
  if (address === null || typeof address === 'string') throw new Error('server has no TCP address');
  const url = `http://127.0.0.1:${address.port}`;
  // Read the served document now, while the server is sound: later a test may close its store or stop it.
  await servedDocumentValidator(url);
  let closing: Promise<void> | undefined;
  return {
    url,
    app,
    close: () =>
      (closing ??= app.close().then(() => {
        // The port may be given to another server later.
        validatorsByOrigin.delete(url);
      })),
    logs: () => chunks.join(''),
  };
}

export interface RawResponse {
  status: number;
  headers: IncomingHttpHeaders;
  /** The body as received, decoded as UTF-8. */
  text: string;
  /** The body parsed as JSON, or undefined when it is empty or not JSON. */
  body: unknown;
}

/** Served on purpose but left out of the document: the document itself and its HTML rendering. */
const UNDESCRIBED_PATHS = /^\/(openapi\.json|docs(\/.*)?)$/;

/** One compiled validator per distinct document (all apps serve the same one), one lookup per server. */
const validatorsByDocument = new Map<string, ResponseValidator>();
const validatorsByOrigin = new Map<string, Promise<ResponseValidator>>();

/** The validator for the OpenAPI document that the server at `baseUrl` serves at /openapi.json. */
export function servedDocumentValidator(baseUrl: string): Promise<ResponseValidator> {
  const origin = new URL(baseUrl).origin;
  let validator = validatorsByOrigin.get(origin);
  if (validator === undefined) {
    validator = sendRequest(origin, '/openapi.json', {}, 'GET').then((res) => {
      if (res.status !== 200) throw new Error(`GET ${origin}/openapi.json answered ${res.status}: ${res.text.slice(0, 200)}`);
      let compiled = validatorsByDocument.get(res.text);
      if (compiled === undefined) {
        compiled = createResponseValidator(JSON.parse(res.text), {
          undescribedPaths: UNDESCRIBED_PATHS,
          errorSchema: '#/components/schemas/Error',
        });
        validatorsByDocument.set(res.text, compiled);
      }
      return compiled;
    });
    validatorsByOrigin.set(origin, validator);
    validator.catch(() => validatorsByOrigin.delete(origin));
  }
  return validator;
}

/**
 * One HTTP/1.1 request with `rawPathAndQuery` sent byte-exact as the request target (fetch would
 * normalise it). A fresh connection per request, so no keep-alive socket outlives a test.
 *
 * Every response is checked against the OpenAPI document the server itself serves (status, content
 * type, body schema, described headers); one that does not conform rejects with the violations listed,
 * whatever the test then meant to assert.
 */
export async function rawRequest(
  baseUrl: string,
  rawPathAndQuery: string,
  headers: OutgoingHttpHeaders = {},
  method = 'GET',
  body?: string | Buffer,
): Promise<RawResponse> {
  const validate = await servedDocumentValidator(baseUrl);
  const res = await sendRequest(baseUrl, rawPathAndQuery, headers, method, body);
  // A CORS preflight (when an allow-list is configured) is answered by the CORS layer, outside the API document.
  const preflight = method === 'OPTIONS' && headers['access-control-request-method'] !== undefined && res.status === 204;
  if (!preflight) assertConforms(validate, { method, target: rawPathAndQuery, status: res.status, headers: res.headers, text: res.text });
  return res;
}

/** The same request, unchecked: for listeners that serve no API document (the metrics admin port). */
export function uncheckedRequest(
  baseUrl: string,
  rawPathAndQuery: string,
  headers: OutgoingHttpHeaders = {},
  method = 'GET',
): Promise<RawResponse> {
  return sendRequest(baseUrl, rawPathAndQuery, headers, method);
}

function sendRequest(
  baseUrl: string,
  rawPathAndQuery: string,
  headers: OutgoingHttpHeaders,
  method: string,
  body?: string | Buffer,
): Promise<RawResponse> {
  const { hostname, port } = new URL(baseUrl);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ hostname, port, path: rawPathAndQuery, method, headers, agent: false }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (part: Buffer) => parts.push(part));
      res.on('error', reject);
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let body: unknown;
        try {
          body = text === '' ? undefined : JSON.parse(text);
        } catch {
          body = undefined;
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

/** `Authorization: Bearer <token>` as a header object. */
export const bearer = (token: string): OutgoingHttpHeaders => ({ authorization: `Bearer ${token}` });

export interface MintedToken {
  token: string;
  id: number;
}

/** Mints an opaque token the way the CLI does: generateToken, then only the hash goes to the store. */
export async function mintToken(store: Store, user: string, opts: { expiresAt?: Date; label?: string } = {}): Promise<MintedToken> {
  const { token, hash } = generateToken();
  const info = await store.tokens.add({ user, hash, ...opts });
  return { token, id: info.id };
}

/** A plant as the operator adds it (`plants add`), and what the tests read back of it. */
export interface AddedPlant {
  id: PlantId;
  name: string;
  tag?: string;
  owner: string;
  public: boolean;
}

/** Adds a plant as the operator does (`plants add`): with the next automatic id unless `id` is given. */
export async function addPlant(
  store: Pick<Store, 'plants'>,
  plant: { id?: number; name: string; tag?: string; owner: string; public: boolean },
): Promise<AddedPlant> {
  const { id } = await store.plants.create(OPERATOR, plant);
  return { ...plant, id };
}

/** Removes a plant as the operator does (`plants remove`); fails when there is none. */
export async function removePlant(store: Pick<Store, 'plants'>, id: number): Promise<void> {
  if ((await store.plants.delete(OPERATOR, id as PlantId)) !== 'deleted') throw new Error(`no plant with id ${id}`);
}

export interface SeedSpec {
  users?: Array<{ name: string; admin?: boolean }>;
  groups?: Array<{ name: string; members?: string[] }>;
  /** Added in this order, which is catalogue order. */
  plants?: Array<{ name: string; tag?: string; owner: string; public?: boolean; sharedWith?: Grantee[] }>;
}

export interface Seeded {
  plants: AddedPlant[];
  /** One fresh token per seeded user, by user name. */
  tokens: Record<string, string>;
}

/** Writes users, groups, memberships, plants and grants through the Store interface, and mints a token per user. */
export async function seed(store: Store, spec: SeedSpec): Promise<Seeded> {
  const tokens: Record<string, string> = {};
  for (const user of spec.users ?? []) {
    await store.users.add(user.name, user.admin ?? false);
    tokens[user.name] = (await mintToken(store, user.name)).token;
  }
  for (const group of spec.groups ?? []) {
    await store.groups.add(group.name);
    for (const member of group.members ?? []) await store.groups.addMember(group.name, member);
  }
  const plants: AddedPlant[] = [];
  for (const plant of spec.plants ?? []) {
    const info = await addPlant(store, {
      name: plant.name,
      ...(plant.tag === undefined ? {} : { tag: plant.tag }),
      owner: plant.owner,
      public: plant.public ?? false,
    });
    for (const grantee of plant.sharedWith ?? []) await store.grants.add(info.id, grantee);
    plants.push(info);
  }
  return { plants, tokens };
}
