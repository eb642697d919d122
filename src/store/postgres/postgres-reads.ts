import type pg from 'pg';
import type { RequestReads } from '../seam.js';
import { metGonePlant, pageFromColumns, plantRows, type RowColumns } from '../listing-sql.js';
import { ALL_PLANTS_SQL, allRowsSqlOf, visiblePlantsSql } from './postgres-listing-sql.js';
import type {
  ListingRequest,
  PageRequest,
  PlantRow,
  TokenCredential,
  TokenPageRequest,
  TokenWithPage,
  UserCredential,
  VisiblePage,
} from '../records.js';
import { lsnValue } from './postgres-change-feed.js';
import { credentialOf, PostgresTokenPages, type TokenRow } from './postgres-token-pages.js';
import { findTokenSql, findUserSql, readinessSql } from '../credential-sql.js';

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

// The listing queries, one prepared statement each (the limit is a parameter on PostgreSQL): by whether the
// viewer has claims, whether the page is of one tag, and whether it shows ids.
const VISIBLE_PLANTS = new Map<string, Listing>();
for (const claims of [false, true]) {
  for (const tagged of [false, true]) {
    for (const withIds of [false, true]) {
      const name = `visible_plants${claims ? '_claims' : ''}${tagged ? '_tagged' : ''}${withIds ? '_ids' : ''}`;
      VISIBLE_PLANTS.set(`${claims} ${tagged} ${withIds}`, {
        name,
        text: visiblePlantsSql(claims, false, tagged, withIds),
        exact: { name: `${name}_exact`, text: visiblePlantsSql(claims, true, tagged, withIds) },
      });
    }
  }
}
const ALL_PLANTS: Listing = { name: 'all_plants', text: ALL_PLANTS_SQL };

// An admin's page of one tag, or with ids (see RequestReads.allRows).
const ALL_ROWS = allRowsSqlOf(false);
const ALL_ROWS_TAGGED = allRowsSqlOf(true);

/**
 * The request path on PostgreSQL: each read one named prepared statement. Token checks stay on the primary's pool;
 * listings go to a pool of their own, whose sessions keep the listing's plan (postgres-connection.ts): the read replica's
 * when there is one, but for a user whose own write the replica has not replayed yet, whose listing is read again
 * on the primary so that the user sees it.
 */
export class PostgresReads implements RequestReads {
  /** With a replica: where the primary's WAL was after each user's latest write, until the replica has replayed it. */
  private readonly recentWriters = new Map<number, bigint>();
  /** See RequestReads.findTokenWithPage: without a replica (see PostgresTokenPages). */
  readonly findTokenWithPage?: (hash: Buffer, page: TokenPageRequest, now: number) => Promise<TokenWithPage>;

  constructor(
    private readonly pool: pg.Pool,
    /** Where listings are read: the replica's pool, or the primary's listing pool. */
    private readonly readPool: pg.Pool,
    private readonly replica: boolean,
    /** The primary's WAL position at the change feed's last read (see PostgresChangeFeed.walPosition). */
    private readonly fedThrough: () => bigint,
  ) {
    if (!replica) {
      const tokenPages = new PostgresTokenPages(readPool);
      this.findTokenWithPage = (hash, page, now) => tokenPages.read(hash, page, now);
    }
  }

  async ping(): Promise<void> {
    await this.pool.query({ name: 'ping', text: readinessSql });
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

  visiblePlants(userId: number, { after, limit, tag, withIds = false }: ListingRequest, claims: readonly string[]): Promise<VisiblePage> {
    const claimed = claims.length > 0;
    const listing = VISIBLE_PLANTS.get(`${claimed} ${tag !== undefined} ${withIds}`)!;
    const values = [userId, after, limit + 1, ...(claimed ? [claims] : []), ...(tag === undefined ? [] : [tag])];
    return this.listing(userId, listing, limit, values, withIds);
  }

  allPlants({ after, limit }: PageRequest, readerId: number): Promise<VisiblePage> {
    return this.listing(readerId, ALL_PLANTS, limit, [after, limit + 1]);
  }

  async allRows(after: number, limit: number, tag: string | undefined): Promise<PlantRow[]> {
    const [name, text, values] =
      tag === undefined ? ['all_rows', ALL_ROWS, [after, limit]] : ['all_rows_tagged', ALL_ROWS_TAGGED, [after, limit, tag]];
    // On the primary when listings are read from a replica, so that the admin's own writes show at once.
    const pool = this.replica ? this.pool : this.readPool;
    const { rows } = await pool.query<RowColumns>({ name, text, values, rowMode: 'array' });
    return plantRows(rows);
  }

  async rememberWriter(userId: number): Promise<void> {
    if (!this.replica) return;
    const { rows } = await this.pool.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
    this.recentWriters.delete(userId);
    this.recentWriters.set(userId, lsnValue(rows[0]!.lsn));
    // Bounded: the oldest writer is forgotten (its replica has long caught up, or is far behind for everyone).
    if (this.recentWriters.size > RECENT_WRITERS) this.recentWriters.delete(this.recentWriters.keys().next().value!);
  }

  /** A listing page of at most `limit` plants (the query reads one more), with ids when `withIds`. */
  private async listing(readerId: number, listing: Listing, limit: number, values: unknown[], withIds = false): Promise<VisiblePage> {
    const read = async (pool: pg.Pool) => {
      // The statement aggregates: it answers exactly one row.
      const row = (await pool.query<PageRow>({ name: listing.name, text: listing.text, values })).rows[0]!;
      // A statement without an exact one reads plants themselves, sorted.
      if (listing.exact === undefined) return { row, page: this.page(row, limit, withIds)! };
      const page = metGonePlant(row.plants) ? undefined : this.page(row, limit, withIds);
      if (page !== undefined) return { row, page };
      // It met positions of plants gone, or its rows came out of order: the exact statement, which sorts them.
      const exact = (await pool.query<PageRow>({ name: listing.exact.name, text: listing.exact.text, values })).rows[0]!;
      return { row: exact, page: this.page(exact, limit, withIds)! };
    };
    const { row, page } = await read(this.readPool);
    const wrote = this.recentWriters.get(readerId);
    if (wrote !== undefined) {
      if (row.replayed !== null && lsnValue(row.replayed) < wrote) return (await read(this.pool)).page;
      this.recentWriters.delete(readerId);
    }
    return page;
  }

  /**
   * The page of a listing query's row (see postgres-listing-sql.ts), or undefined when its ids are out of order. A
   * page read from a standby that has not replayed every change the feed delivered could be older than the caches'
   * view: it is served, not cached.
   */
  private page({ ids, plants, groups, replayed }: PageRow, limit: number, withIds: boolean): VisiblePage | undefined {
    const cacheable = replayed === null || lsnValue(replayed) >= this.fedThrough();
    return pageFromColumns(ids, plants, limit, (groups ?? []).map(Number), cacheable, withIds);
  }
}
