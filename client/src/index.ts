import createClient, { type Client, type ClientOptions } from 'openapi-fetch';
import type { components, paths } from './schema.js';

export type { components, operations, paths } from './schema.js';

/** A plant as the API returns it: `tag` is absent when the plant has none. */
export type Plant = components['schemas']['Plant'];
/** The contract's `Error` body, sent with every error status; `error` is a stable code from the service's catalogue. */
export type ErrorBody = components['schemas']['Error'];
/** An openapi-fetch client typed by the service's OpenAPI document. */
export type PlantStoreClient = Client<paths>;

export interface PlantStoreClientOptions extends Omit<ClientOptions, 'baseUrl'> {
  /** Where the service is, e.g. `http://127.0.0.1:8080`. */
  baseUrl: string;
  /** The bearer token, or a function giving the current one (called per request, so a JWT can be refreshed). */
  token: string | (() => string | Promise<string>);
}

/**
 * A typed client that sends `Authorization: Bearer <token>` on every request (unless the request sets its own
 * Authorization header). Calls return `{ data, error, response }`: `error` is the typed Error body.
 */
export function createPlantStoreClient({ token, ...options }: PlantStoreClientOptions): PlantStoreClient {
  const client = createClient<paths>(options);
  client.use({
    async onRequest({ request }) {
      if (!request.headers.has('authorization')) {
        request.headers.set('authorization', `Bearer ${typeof token === 'function' ? await token() : token}`);
      }
      return request;
    },
  });
  return client;
}

/** An error status from the service, carrying the typed Error body. */
export class PlantStoreError extends Error {
  override readonly name = 'PlantStoreError';
  constructor(
    readonly status: number,
    readonly body: ErrorBody,
  ) {
    super(`${status} (error ${body.error}): ${body.message}`);
  }
}

/** What `GET /plants?fields=id,name,tag` lists: each plant with its id (a `NewPlant`). */
export const WITH_IDS = 'id,name,tag';

/** The query of one page of the listing: its size, where it starts, and what it lists (see listAllPlants). */
export interface PageQuery {
  limit?: number;
  cursor?: string;
  /** Only the plants with this tag. */
  tag?: string;
  /** `id,name,tag`: each plant with its id. */
  fields?: typeof WITH_IDS;
}

/**
 * The query of the next page, from a response's `Link` header (RFC 8288), or undefined on the last page. The link
 * carries the listing's `tag` and `fields` on, so the next page lists what the first did.
 */
export function nextPageQuery(link: string | null | undefined): PageQuery | undefined {
  if (!link) return undefined;
  // Each link is `<target>` followed by `; param=value` pairs; rel may be quoted and may list several types.
  for (const [, target, params] of link.matchAll(/<([^>]*)>((?:\s*;\s*[^;,]*)*)/g)) {
    const rel = /;\s*rel\s*=\s*(?:"([^"]*)"|([^\s;,]+))/i.exec(params ?? '');
    const types = (rel?.[1] ?? rel?.[2] ?? '').toLowerCase().split(/\s+/);
    if (target === undefined || !types.includes('next')) continue;
    const url = new URL(target, 'http://link.invalid');
    if (url.pathname !== '/plants') throw new Error(`unexpected Link rel="next" target: ${target}`);
    const limit = url.searchParams.get('limit');
    const cursor = url.searchParams.get('cursor');
    const tag = url.searchParams.get('tag');
    const fields = url.searchParams.get('fields');
    if (fields !== null && fields !== WITH_IDS) throw new Error(`unexpected fields in Link rel="next" target: ${target}`);
    return {
      ...(limit === null ? {} : { limit: Number(limit) }),
      ...(cursor === null ? {} : { cursor }),
      ...(tag === null ? {} : { tag }),
      ...(fields === null ? {} : { fields }),
    };
  }
  return undefined;
}

/** What listAllPlants walks: the page size, and the listing's own filter and fields. */
export interface ListOptions {
  /** Plants per request, 1 to 1000 (default 100). */
  pageSize?: number;
  /** Only the plants with this tag (matched exactly). */
  tag?: string;
  signal?: AbortSignal;
}

/**
 * Every plant the caller may see (with `tag`, only those with that tag), fetched `pageSize` at a time (1 to 1000)
 * by following the `Link: rel="next"` continuations; access is checked again on every page. With
 * `fields: 'id,name,tag'` each plant comes with its id, as a `NewPlant`. Throws PlantStoreError on an error status.
 */
export function listAllPlants(
  client: PlantStoreClient,
  options: ListOptions & { fields: typeof WITH_IDS },
): AsyncGenerator<NewPlant, void, undefined>;
export function listAllPlants(
  client: PlantStoreClient,
  options?: ListOptions & { fields?: undefined },
): AsyncGenerator<Plant, void, undefined>;
export async function* listAllPlants(
  client: PlantStoreClient,
  { pageSize = 100, tag, fields, signal }: ListOptions & { fields?: typeof WITH_IDS } = {},
): AsyncGenerator<Plant | NewPlant, void, undefined> {
  if (!Number.isInteger(pageSize) || pageSize < 1 || pageSize > 1000) throw new RangeError('pageSize must be an integer from 1 to 1000');
  // For callers the types do not hold to (plain JavaScript): any other fields would be a 400 on the first page.
  if (fields !== undefined && fields !== WITH_IDS) throw new RangeError('fields must be id,name,tag');
  let query: PageQuery | undefined = {
    limit: pageSize,
    ...(tag === undefined ? {} : { tag }),
    ...(fields === undefined ? {} : { fields }),
  };
  while (query !== undefined) {
    const { data, error, response } = await client.GET('/plants', { params: { query }, ...(signal ? { signal } : {}) });
    if (error !== undefined) throw new PlantStoreError(response.status, error);
    yield* data;
    query = nextPageQuery(response.headers.get('link'));
  }
}

/** What a client sends to create a plant: a `Plant` and its id, chosen by the client. */
export type NewPlant = components['schemas']['NewPlant'];

/**
 * Creates `plant`, owned by the caller, and resolves to the created `Plant`. Safe to retry: the same create
 * answers the same again. Throws PlantStoreError on an error status (409 when the id is another plant's).
 */
export async function createPlant(client: PlantStoreClient, plant: NewPlant, { signal }: { signal?: AbortSignal } = {}): Promise<Plant> {
  const { data, error, response } = await client.POST('/plants', { body: plant, ...(signal ? { signal } : {}) });
  if (error !== undefined) throw new PlantStoreError(response.status, error);
  return data;
}

/**
 * Deletes the plant with this id; with `ifMatch` (an `etag` read before) only while it is still at that version,
 * else PlantStoreError 412. Throws PlantStoreError on an error status (403 not the owner, 404 unseen or none).
 */
export async function deletePlant(
  client: PlantStoreClient,
  id: number,
  { ifMatch, signal }: { ifMatch?: string; signal?: AbortSignal } = {},
): Promise<void> {
  const { error, response } = await client.DELETE('/plants/{id}', {
    params: { path: { id }, ...(ifMatch === undefined ? {} : { header: { 'if-match': ifMatch } }) },
    ...(signal ? { signal } : {}),
  });
  if (error !== undefined) throw new PlantStoreError(response.status, error);
}

/** Who has access to a plant besides its owner and admins: what its owner reads and replaces. */
export type PlantAccess = components['schemas']['PlantAccess'];

/** A plant's access and its version (the `ETag`), to send back as `ifMatch` so that a change is made only at it. */
export interface VersionedAccess {
  access: PlantAccess;
  etag: string;
}

/** The access of the plant with this id (its owner or an admin). Throws PlantStoreError (403, 404, …). */
export async function getPlantAccess(
  client: PlantStoreClient,
  id: number,
  { signal }: { signal?: AbortSignal } = {},
): Promise<VersionedAccess> {
  const { data, error, response } = await client.GET('/plants/{id}/access', { params: { path: { id } }, ...(signal ? { signal } : {}) });
  if (error !== undefined) throw new PlantStoreError(response.status, error);
  return { access: data, etag: response.headers.get('etag') ?? '' };
}

/**
 * Replaces the whole access of the plant; with `ifMatch` (an `etag` read before) only while it is still at that
 * version, else PlantStoreError 412. Resolves to the access as changed.
 */
export async function setPlantAccess(
  client: PlantStoreClient,
  id: number,
  access: PlantAccess,
  { ifMatch, signal }: { ifMatch?: string; signal?: AbortSignal } = {},
): Promise<VersionedAccess> {
  const { data, error, response } = await client.PUT('/plants/{id}/access', {
    params: { path: { id }, ...(ifMatch === undefined ? {} : { header: { 'if-match': ifMatch } }) },
    body: access,
    ...(signal ? { signal } : {}),
  });
  if (error !== undefined) throw new PlantStoreError(response.status, error);
  return { access: data, etag: response.headers.get('etag') ?? '' };
}

/**
 * Shares the plant with one user or group (`share: true`), or stops sharing it (`false`); idempotent. Throws
 * PlantStoreError: 404 also for a name of no user or group (codes 40403, 40404). Throws RangeError, sending
 * nothing, for the name `.` or `..`, which no URL path can carry: the service gives them to no new user or group,
 * and one named so before is shared with by setPlantAccess, whose body carries names.
 */
export async function sharePlant(
  client: PlantStoreClient,
  id: number,
  grantee: { user: string } | { group: string },
  share: boolean,
  { signal }: { signal?: AbortSignal } = {},
): Promise<void> {
  const [kind, name] = 'user' in grantee ? ['user', grantee.user] : ['group', grantee.group];
  // fetch's URL parser removes a `.` or `..` segment (escaped or not): the request would go to another path.
  if (name === '.' || name === '..') {
    throw new RangeError(`a ${kind} named "${name}" cannot be in a URL path: change the access with setPlantAccess instead`);
  }
  const init = { ...(signal ? { signal } : {}) };
  const user = 'user' in grantee ? { params: { path: { id, name: grantee.user } }, ...init } : undefined;
  const group = 'group' in grantee ? { params: { path: { id, name: grantee.group } }, ...init } : undefined;
  const { error, response } = user
    ? share
      ? await client.PUT('/plants/{id}/access/users/{name}', user)
      : await client.DELETE('/plants/{id}/access/users/{name}', user)
    : share
      ? await client.PUT('/plants/{id}/access/groups/{name}', group!)
      : await client.DELETE('/plants/{id}/access/groups/{name}', group!);
  if (error !== undefined) throw new PlantStoreError(response.status, error);
}

/** A plant and its version (the `ETag`): send it back as `ifNoneMatch` to read it again, or `ifMatch` to change it. */
export interface VersionedPlant {
  /** The plant with its id. */
  plant: NewPlant;
  etag: string;
}

/** A change of a plant as JSON Merge Patch: a field left out is kept, `tag: null` removes the tag. */
export type PlantPatch = components['schemas']['PlantPatch'];

/**
 * The plant with this id and its version. With `ifNoneMatch` (an `etag` read before), undefined while the plant is
 * still at that version (304): the copy the caller has is current. Throws PlantStoreError on an error status (404
 * for a plant the caller cannot see, or none).
 */
export function getPlant(
  client: PlantStoreClient,
  id: number,
  options: { ifNoneMatch: string; signal?: AbortSignal },
): Promise<VersionedPlant | undefined>;
export function getPlant(
  client: PlantStoreClient,
  id: number,
  options?: { ifNoneMatch?: undefined; signal?: AbortSignal },
): Promise<VersionedPlant>;
// An etag the caller may or may not have (a cache's): undefined on a 304, as with one.
export function getPlant(
  client: PlantStoreClient,
  id: number,
  options?: { ifNoneMatch?: string | undefined; signal?: AbortSignal },
): Promise<VersionedPlant | undefined>;
export async function getPlant(
  client: PlantStoreClient,
  id: number,
  { ifNoneMatch, signal }: { ifNoneMatch?: string | undefined; signal?: AbortSignal } = {},
): Promise<VersionedPlant | undefined> {
  const { data, error, response } = await client.GET('/plants/{id}', {
    params: { path: { id }, ...(ifNoneMatch === undefined ? {} : { header: { 'if-none-match': ifNoneMatch } }) },
    ...(signal ? { signal } : {}),
  });
  // A 304 has no body: openapi-fetch hands it over as an error status with an empty one.
  if (response.status === 304) return undefined;
  if (error !== undefined) throw new PlantStoreError(response.status, error);
  return { plant: data, etag: response.headers.get('etag') ?? '' };
}

/**
 * Changes the name or tag of the plant (its owner or an admin); with `ifMatch` (an `etag` read before) only while it
 * is still at that version, else PlantStoreError 412 and nothing changes. Resolves to the plant as changed. Throws
 * PlantStoreError on an error status (403 not the owner, 404 unseen or none, 400 a name or tag the rules refuse).
 */
export async function updatePlant(
  client: PlantStoreClient,
  id: number,
  change: PlantPatch,
  { ifMatch, signal }: { ifMatch?: string; signal?: AbortSignal } = {},
): Promise<VersionedPlant> {
  const { data, error, response } = await client.PATCH('/plants/{id}', {
    params: { path: { id }, ...(ifMatch === undefined ? {} : { header: { 'if-match': ifMatch } }) },
    body: change,
    ...(signal ? { signal } : {}),
  });
  if (error !== undefined) throw new PlantStoreError(response.status, error);
  return { plant: data, etag: response.headers.get('etag') ?? '' };
}
