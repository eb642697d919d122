import { Readable } from 'node:stream';
import type { AnswerCaches } from '../cache/answer-caches.js';
import type { Viewer } from '../catalogue/access-rule.js';
import type { PageAhead } from '../auth/authenticate.js';
import { pageScopes, scope, viewerKey } from '../catalogue/change-scopes.js';
import { position, type Position } from '../catalogue/plant-ids.js';
import { then } from '../awaitable.js';
import type { CacheCounter, ScopedCache } from '../cache/scoped-cache.js';
import type { Listing } from '../store/store.js';
import { ApiError } from './error-codes.js';
import { FIRST_CHUNK, ListingStreams, type ListingLimits } from './listing-streams.js';

/** Limits up to this are answered from one store call (and cached); larger or absent limits stream. */
export const MAX_BUFFERED_LIMIT = 1000;
/** Cached first pages (per viewer, cursor and limit); bodies larger than this are not kept. */
const PAGE_CACHE_ENTRIES = 10_000;
const PAGE_CACHE_MAX_BODY = 64 * 1024;
/** All cached page bodies together (UTF-16 code units, about bytes): memory stays flat under many cursors. */
const PAGE_CACHE_MAX_TOTAL = 8 * 1024 * 1024;

/** An opaque continuation: the catalogue position of the last plant sent. Access is re-checked on every page. */
function encodeCursor(at: Position): string {
  return Buffer.from(`p${at}`).toString('base64url');
}

export function decodeCursor(cursor: string): Position {
  const text = Buffer.from(cursor, 'base64url').toString('latin1');
  const id = /^p([1-9][0-9]{0,15})$/.exec(text)?.[1];
  if (id === undefined || Buffer.from(text).toString('base64url') !== cursor || !Number.isSafeInteger(Number(id))) {
    throw new ApiError(
      'invalid_parameter',
      'query parameter "cursor" is not a continuation this service issued; use the Link header\'s URL as given',
    );
  }
  return position(Number(id));
}

export interface Page {
  /** The JSON array, already serialized. */
  body: string;
  /** The `Link: <…>; rel="next"` value when more plants follow, built once with the page (it is cached too). */
  link: string | undefined;
}

/** What narrows or widens a listing beyond the contract's (see ListingRequest): the same on every page of it. */
export interface ListingView {
  tag?: string;
  withIds?: boolean;
}

/** The RFC 8288 link to the page after `last` (the catalogue position of its last plant), in the same view. */
function nextLink(limit: number, last: Position, view: ListingView): string {
  const tag = view.tag === undefined ? '' : `&tag=${encodeURIComponent(view.tag)}`;
  const fields = view.withIds === true ? '&fields=id,name,tag' : '';
  return `</plants?limit=${limit}&cursor=${encodeCursor(last)}${tag}${fields}>; rel="next"`;
}

/** The part of a page's cache key that a view adds: nothing for the contract's listing. */
const viewKey = (view: ListingView): string =>
  view.tag === undefined && view.withIds !== true ? '' : `|${view.withIds === true ? 'ids' : ''}|${view.tag ?? ''}`;

/** Builds `GET /plants` answers: small pages buffered and cached, large listings streamed chunk by chunk. */
export class PlantListing {
  private readonly pages: ScopedCache<Page>;
  private readonly streams: ListingStreams;

  constructor(
    private readonly store: Listing,
    private readonly caches: AnswerCaches,
    limits: ListingLimits,
    pageCounter?: CacheCounter,
  ) {
    this.streams = new ListingStreams(limits);
    this.pages = caches.create<Page>({
      maxEntries: PAGE_CACHE_ENTRIES,
      weigh: (page) => page.body.length,
      maxWeight: PAGE_CACHE_MAX_TOTAL,
      // A public plant is in every page.
      emptiedBy: [scope.allPages],
      ...(pageCounter ? { counter: pageCounter } : {}),
    });
  }

  /**
   * At most `limit` (<= MAX_BUFFERED_LIMIT) plants after `after`, with a Link when more follow. A cached page,
   * and any page on SQLite, is returned synchronously: no promise on the hot path. `ahead`: the page read with the
   * viewer's token (AuthResult.pageAhead), used when it is this one.
   */
  page(viewer: Viewer, after: number, limit: number, view: ListingView = {}, ahead?: PageAhead | null): Page | Promise<Page> {
    if (limit === 0) return { body: '[]', link: undefined };
    const usable = this.caches.usable();
    const viewed = viewKey(view);
    const key = `${viewerKey(viewer)}|${after}|${limit}${viewed}`;
    const cached = usable ? this.pages.get(key) : this.pages.bypass();
    if (cached) return cached;
    const { request } = ahead ?? {};
    const readAhead =
      request !== undefined && request.after === after && request.limit === limit && request.tag === view.tag && view.withIds !== true
        ? ahead!
        : undefined;
    const readAt = readAhead?.readAt ?? this.caches.position;
    const read = readAhead?.page ?? this.store.listVisiblePlants(viewer, { after, limit, ...view });
    return then(read, ({ json, ids, more, next, groupIds, cacheable }) => {
      const page = { body: json, link: more ? nextLink(limit, ids.at(-1)!, view) : undefined };
      if (usable && cacheable && page.body.length <= PAGE_CACHE_MAX_BODY) {
        // A plant added after the next one (a new plant, most often) or deleted there changes nothing in this page.
        this.pages.set(key, page, pageScopes(viewer, groupIds), readAt, { after, through: next ?? Infinity });
      }
      return page;
    });
  }

  /**
   * Every plant after `after` (at most `limit`), as JSON text. The first chunk is read before anything is sent,
   * so a database outage is still a clean 503; a listing that ends there is sent as it is. A longer one is
   * streamed, and takes a slot of ListingStreams (refused with 503 or 429 over the process's or the user's
   * bound): each further chunk is read only when the client has taken the previous one, and a client that goes
   * away stops the reading. `cutOff` closes the client's connection (a reader below the minimum rate). Each
   * further chunk is read with `rightsNow()`, the caller's rights when it is read (undefined: none any more).
   */
  async stream(
    viewer: Viewer,
    after: number,
    limit: number | undefined,
    cutOff: () => void,
    rightsNow: () => Promise<Viewer | undefined>,
    view: ListingView = {},
  ): Promise<Readable | string> {
    let remaining = limit ?? Infinity;
    const read = async (from: number, size: number, rights: Viewer) => {
      const chunk = await this.chunk(rights, from, Math.min(remaining, size), remaining, view);
      remaining -= chunk.count;
      return chunk;
    };
    const first = await read(after, FIRST_CHUNK, viewer);
    if (first.done) return first.json;
    const handle = this.streams.admit(viewer.userId, cutOff);
    async function* json(): AsyncGenerator<string> {
      let { json: plants, last, done } = first;
      let text = plants.slice(0, -1);
      handle.sent(text.length);
      yield text;
      while (!done) {
        const size = await handle.next();
        // Each chunk with the caller's rights as they are now: a token revoked since closes the connection with the
        // listing unfinished (the client sees a broken body, never a complete one); a demoted admin's goes on as a user's.
        const rights = await rightsNow();
        if (rights === undefined) {
          cutOff();
          return;
        }
        ({ json: plants, last, done } = await read(last!, size, rights));
        if (last === undefined) break;
        text = `,${plants.slice(1, -1)}`;
        handle.sent(text.length);
        yield text;
      }
      yield ']';
    }
    const stream = Readable.from(json(), { objectMode: false });
    stream.once('close', () => handle.release());
    return stream;
  }

  /**
   * What `stream` would answer before its first byte, for HEAD: it throws the 503 or 429 that would refuse the
   * listing now. A listing is read (its first chunk) only at the bounds, where whether it fits in that chunk decides.
   */
  async refuseAsStreamWould(viewer: Viewer, after: number, limit: number | undefined, view: ListingView = {}): Promise<void> {
    const refusal = this.streams.refusal(viewer.userId);
    if (refusal === undefined) return;
    const wanted = limit ?? Infinity;
    if (!(await this.chunk(viewer, after, Math.min(wanted, FIRST_CHUNK), wanted, view)).done) throw refusal;
  }

  /** Up to `size` plants after `from`; `done` when no more follow or the `remaining` wanted are read. */
  private async chunk(viewer: Viewer, from: number, size: number, remaining: number, view: ListingView) {
    const { json, ids, more } = await this.store.listVisiblePlants(viewer, { after: from, limit: size, ...view });
    return { json, last: ids.at(-1), count: ids.length, done: !more || remaining - ids.length <= 0 };
  }

  close(): void {
    this.streams.close();
  }
}
