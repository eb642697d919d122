import type pg from 'pg';
import type { RequestReads } from '../seam.js';
import { firstReadIsPage, firstReadPositions, metGonePlant, pageFromColumns, scannedRows, type ScannedColumns } from '../listing-sql.js';
import {
  ALL_PLANTS_SQL,
  allRowsSqlOf,
  firstVisiblePageSql,
  tagPageSql,
  taggedRowsSql,
  visiblePlantsSql,
  visibleRowsSql,
} from './postgres-listing-sql.js';
import type {
  FirstFilteredPage,
  FirstRead,
  ListingRequest,
  PageRequest,
  PlantRow,
  ScannedRows,
  TokenCredential,
  TokenPageRequest,
  TokenWithPage,
  UserCredential,
  VisiblePage,
} from '../records.js';
import { lsnValue } from './postgres-change-feed.js';
import { CommonTags, credentialOf, PostgresTokenPages, type TokenRow } from './postgres-token-pages.js';
import { findTokenSql, findUserSql } from '../credential-sql.js';

/** Users whose latest write a replica may not show yet, at most (see rememberWriter). */
const RECENT_WRITERS = 10_000;

/** The one row of a listing query: page columns (see pageColumnsSql in postgres-listing-sql.ts), the groups the page counted and the standby's replay position. */
type PageRow = { ids: string; plants: string; groups: Array<number | string> | null; replayed: string | null };

/** A listing statement, and the one to read its page again with when it met positions of no plant (see metGonePlant). */
interface Listing {
  name: string;
  text: string;
  exact?: Listing;
}

// The listing queries, one prepared statement each (the limit is a parameter on PostgreSQL).
const VISIBLE_PLANTS: Listing = {
  name: 'visible_plants',
  text: visiblePlantsSql(false),
  exact: { name: 'visible_plants_exact', text: visiblePlantsSql(false, true) },
};
const VISIBLE_PLANTS_WITH_CLAIMS: Listing = {
  name: 'visible_plants_claims',
  text: visiblePlantsSql(true),
  exact: { name: 'visible_plants_claims_exact', text: visiblePlantsSql(true, true) },
};
const ALL_PLANTS: Listing = { name: 'all_plants', text: ALL_PLANTS_SQL };

// A filtered page's statements (see RequestReads.allRows and the others).
const ALL_ROWS = allRowsSqlOf(false);
const ALL_ROWS_TAGGED = allRowsSqlOf(true);
/** By whether the viewer has claims, and whether the page is of one tag. */
const VISIBLE_ROWS: Record<string, string> = {
  'false false': visibleRowsSql(false, false),
  'false true': visibleRowsSql(false, true),
  'true false': visibleRowsSql(true, false),
  'true true': visibleRowsSql(true, true),
};
const TAGGED_ROWS = taggedRowsSql(false);
const TAGGED_ROWS_WITH_CLAIMS = taggedRowsSql(true);
/** A named statement for each variant: by whether the viewer has claims, and the others its key says. */
const statements = (name: string, text: (...flags: boolean[]) => string, flags: number) => {
  const byKey = new Map<string, { name: string; text: string }>();
  for (let bits = 0; bits < 1 << flags; bits++) {
    const values = Array.from({ length: flags }, (_, i) => (bits & (1 << i)) !== 0);
    byKey.set(values.join(' '), { name: `${name}_${values.map(Number).join('')}`, text: text(...values) });
  }
  return (...values: boolean[]) => byKey.get(values.join(' '))!;
};
// A filtered page's first reads (see RequestReads.firstFilteredPage).
const TAG_PAGE = statements('tag_page', (claims, withIds) => tagPageSql(claims, withIds), 2);
const FIRST_VISIBLE_PAGE = statements('first_visible_page', (claims, tagged, withIds) => firstVisiblePageSql(claims, tagged, withIds), 3);

/** The row of a filtered page's first read of what the viewer sees (see firstVisiblePageSql). */
type FirstVisibleRow = PageRow & { common?: boolean; positions_read: string | null };

/**
 * The request path on PostgreSQL: each read one named prepared statement. Token checks stay on the primary's pool;
 * listings go to a pool of their own, whose sessions keep the listing's plan (postgres-connection.ts): the read replica's
 * when there is one, but for a user whose own write the replica has not replayed yet, whose listing is read again
 * on the primary so that the user sees it.
 */
export class PostgresReads implements RequestReads {
  /** With a replica: where the primary's WAL was after each user's latest write, until the replica has replayed it. */
  private readonly recentWriters = new Map<number, bigint>();
  /** See CommonTags: a tag's page starts with the statement of the way it took last time. */
  private readonly commonTags = new CommonTags();

  /** See RequestReads.findTokenWithPage: without a replica (see PostgresTokenPages). */
  readonly findTokenWithPage?: (hash: Buffer, page: TokenPageRequest, now: number, first: FirstRead) => Promise<TokenWithPage>;

  constructor(
    private readonly pool: pg.Pool,
    /** Where listings are read: the replica's pool, or the primary's listing pool. */
    private readonly readPool: pg.Pool,
    private readonly replica: boolean,
    /** The primary's WAL position at the change feed's last read (see PostgresChangeFeed.walPosition). */
    private readonly fedThrough: () => bigint,
  ) {
    if (!replica) {
      const tokenPages = new PostgresTokenPages(readPool, this.commonTags);
      this.findTokenWithPage = (hash, page, now, first) => tokenPages.read(hash, page, now, first);
    }
  }

  async ping(): Promise<void> {
    await this.pool.query({ name: 'ping', text: 'SELECT 1' });
  }

  async findToken(hash: Buffer): Promise<TokenCredential | undefined> {
    const { rows } = await this.pool.query<TokenRow>({
      name: 'find_token',
      text: findTokenSql('$1'),
      values: [hash],
    });
    return rows[0] && credentialOf(rows[0]);
  }

  async findUser(name: string): Promise<UserCredential | undefined> {
    const { rows } = await this.pool.query<{ id: number; is_admin: number }>({
      name: 'find_user',
      text: findUserSql('$1'),
      values: [name],
    });
    const row = rows[0];
    return row && { userId: row.id, admin: row.is_admin === 1 };
  }

  visiblePlants(userId: number, { after, limit }: PageRequest, claims: readonly string[]): Promise<VisiblePage> {
    return claims.length > 0
      ? this.listing(userId, VISIBLE_PLANTS_WITH_CLAIMS, limit, [userId, after, limit + 1, claims])
      : this.listing(userId, VISIBLE_PLANTS, limit, [userId, after, limit + 1]);
  }

  allPlants({ after, limit }: PageRequest, readerId: number): Promise<VisiblePage> {
    return this.listing(readerId, ALL_PLANTS, limit, [after, limit + 1]);
  }

  // A filtered page's reads (store/listing.ts): on the primary when listings are read from a replica, so that a
  // page of several reads sees one catalogue, and its writer's own writes, without waiting for the replica.

  async allRows(after: number, limit: number, tag: string | undefined): Promise<PlantRow[]> {
    const rows =
      tag === undefined
        ? await this.rows('all_rows', ALL_ROWS, [after, limit])
        : await this.rows('all_rows_tagged', ALL_ROWS_TAGGED, [after, limit, tag]);
    return scannedRows(rows).matches;
  }

  async visibleRows(
    userId: number,
    after: number,
    limit: number,
    claims: readonly string[],
    tag: string | undefined,
  ): Promise<ScannedRows> {
    const claimed = claims.length > 0;
    const name = `visible_rows${claimed ? '_claims' : ''}${tag === undefined ? '' : '_tagged'}`;
    const values: unknown[] = [userId, after, limit, ...(claimed ? [claims] : []), ...(tag === undefined ? [] : [tag])];
    return scannedRows(await this.rows(name, VISIBLE_ROWS[`${claimed} ${tag !== undefined}`]!, values));
  }

  async taggedRows(userId: number, tag: string, after: number, limit: number, claims: readonly string[]): Promise<ScannedRows> {
    const rows =
      claims.length > 0
        ? await this.rows('tagged_rows_claims', TAGGED_ROWS_WITH_CLAIMS, [userId, after, limit, tag, claims])
        : await this.rows('tagged_rows', TAGGED_ROWS, [userId, after, limit, tag]);
    return scannedRows(rows);
  }

  async firstFilteredPage(userId: number, page: ListingRequest, claims: readonly string[], first: FirstRead): Promise<FirstFilteredPage> {
    const { after, limit, tag } = page;
    const withIds = page.withIds === true;
    const wanted = limit + 1;
    const claimed = claims.length > 0;
    const claimValues = claimed ? [claims] : [];
    if (tag !== undefined && !this.commonTags.has(tag)) {
      const rare = await this.rareTagPage(userId, page, claims, first);
      if (rare !== undefined) return rare;
    }
    const positions = firstReadPositions(first, wanted, tag !== undefined);
    const { rows } = await this.filteredPool.query<FirstVisibleRow>({
      ...FIRST_VISIBLE_PAGE(claimed, tag !== undefined, withIds),
      values: [userId, after, positions, ...claimValues, wanted, ...(tag === undefined ? [] : [tag, first.rareBelow])],
    });
    const row = rows[0]!;
    const groupIds = (row.groups ?? []).map(Number);
    if (tag !== undefined && row.common === false) {
      this.commonTags.forget(tag);
      // Common again by the time of the second read (plants tagged meanwhile): the page's search finds it.
      return (await this.rareTagPage(userId, page, claims, first)) ?? { page: undefined, groupIds };
    }
    const found = pageFromColumns(row.ids, row.plants, limit, groupIds, true, withIds)!;
    return { page: firstReadIsPage(found, Number(row.positions_read), positions) ? found : undefined, groupIds };
  }

  /** A rare tag's page (tagPageSql), or undefined when the tag turns out common, which is then remembered. */
  private async rareTagPage(
    userId: number,
    { after, limit, tag, withIds }: ListingRequest,
    claims: readonly string[],
    first: FirstRead,
  ): Promise<FirstFilteredPage | undefined> {
    const claimed = claims.length > 0;
    const { rows } = await this.filteredPool.query<PageRow & { common: boolean }>({
      ...TAG_PAGE(claimed, withIds === true),
      values: [userId, after, tag, limit + 1, first.rareBelow, ...(claimed ? [claims] : [])],
    });
    const row = rows[0]!;
    if (row.common) {
      this.commonTags.remember(tag!);
      return undefined;
    }
    const groupIds = (row.groups ?? []).map(Number);
    return { page: pageFromColumns(row.ids, row.plants, limit, groupIds, true, withIds === true)!, groupIds };
  }

  private get filteredPool(): pg.Pool {
    return this.replica ? this.pool : this.readPool;
  }

  private async rows(name: string, text: string, values: unknown[]): Promise<ScannedColumns[]> {
    const { rows } = await this.filteredPool.query<ScannedColumns>({ name, text, values, rowMode: 'array' });
    return rows;
  }

  async rememberWriter(userId: number): Promise<void> {
    if (!this.replica) return;
    const { rows } = await this.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    this.recentWriters.delete(userId);
    this.recentWriters.set(userId, lsnValue(rows[0]!.lsn));
    // Bounded: the oldest writer is forgotten (its replica has long caught up, or is far behind for everyone).
    if (this.recentWriters.size > RECENT_WRITERS) this.recentWriters.delete(this.recentWriters.keys().next().value!);
  }

  /** A listing page of at most `limit` plants (the query reads one more). */
  private async listing(readerId: number, listing: Listing, limit: number, values: unknown[]): Promise<VisiblePage> {
    const read = async (pool: pg.Pool) => {
      // The statement aggregates: it answers exactly one row.
      const row = (await pool.query<PageRow>({ name: listing.name, text: listing.text, values })).rows[0]!;
      if (listing.exact === undefined || !metGonePlant(row.plants)) return row;
      const { name, text } = listing.exact;
      return (await pool.query<PageRow>({ name, text, values })).rows[0]!;
    };
    const row = await read(this.readPool);
    const wrote = this.recentWriters.get(readerId);
    if (wrote !== undefined) {
      if (row.replayed !== null && lsnValue(row.replayed) < wrote) return this.page(await read(this.pool), limit);
      this.recentWriters.delete(readerId);
    }
    return this.page(row, limit);
  }

  /**
   * The row of a listing query (see postgres-listing-sql.ts). A page read from a standby that has not replayed every change
   * the feed delivered could be older than the caches' view: it is served, not cached.
   */
  private page({ ids, plants, groups, replayed }: PageRow, limit: number): VisiblePage {
    const cacheable = replayed === null || lsnValue(replayed) >= this.fedThrough();
    // PostgreSQL's aggregates sort the rows themselves: the ids are in order.
    return pageFromColumns(ids, plants, limit, (groups ?? []).map(Number), cacheable)!;
  }
}
