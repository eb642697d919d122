import type pg from 'pg';
import { Batch, ONE_RUN_AT_A_TIME, type BatchOptions } from '../batch.js';
import { metGonePlant, pageFromColumns } from '../listing-sql.js';
import type { TokenCredential, TokenPageRequest, TokenWithPage } from '../records.js';
import { tokenPagesSql } from './postgres-listing-sql.js';

/** The columns of a stored token (findTokenSql). */
export type TokenRow = { token_id: number; user_id: number; is_admin: number; expires_at: number | null; revoked_at: number | null };

export const credentialOf = (row: TokenRow): TokenCredential => ({
  tokenId: row.token_id,
  userId: row.user_id,
  admin: row.is_admin === 1,
  expiresAt: row.expires_at,
  revokedAt: row.revoked_at,
});

const TOKEN_PAGES = { name: 'find_tokens_with_pages', text: tokenPagesSql() };
const TOKEN_TAG_PAGES = { name: 'find_tokens_with_tag_pages', text: tokenPagesSql(true) };
/** The most tokens one statement reads with their pages. */
const TOKEN_READS_AT_ONCE = 100;
/**
 * One statement of each kind at a time, the requests that come meanwhile read together by the next (see Batch). A
 * failed statement fails all its requests, as one read would: their failure is the database's, not a request's,
 * since a request's values are ones the route's schema accepts (a tag without NUL, which PostgreSQL's text cannot
 * carry).
 */
const STATEMENTS: BatchOptions = { eachAloneOnFailure: false, ...ONE_RUN_AT_A_TIME };

/** A row of tokenPagesSql: the token asked for in place `asked` (from 1), and its page when `reads_page` (page columns and the groups it counted). */
type TokenPageRow = TokenRow & {
  asked: number;
  reads_page: boolean;
  ids: string;
  plants: string;
  groups: Array<number | string> | null;
};

/** A request for a token and its page. */
interface TokenRead {
  hash: Buffer;
  page: TokenPageRequest;
  now: number;
}

/**
 * Bearer tokens the caches do not hold, each read with the page its request asks for (RequestReads.findTokenWithPage),
 * without a replica only: tokens are checked on the primary, so that a revocation holds at once, and the page read
 * with one is read there too, on the listings' pool, whose sessions keep its plan. The requests that ask while the
 * last statement is in flight are read in one statement, sent once they are all in (STATEMENTS): a round trip costs
 * both processes more than a page's read. Untagged pages and tags' pages each have a statement of their own.
 */
export class PostgresTokenPages {
  private readonly untagged = new Batch<TokenRead, TokenWithPage>((reads) => this.readUntagged(reads), TOKEN_READS_AT_ONCE, STATEMENTS);
  private readonly tagged = new Batch<TokenRead, TokenWithPage>((reads) => this.readTagged(reads), TOKEN_READS_AT_ONCE, STATEMENTS);

  constructor(
    /** The primary's listing pool. */
    private readonly pool: pg.Pool,
  ) {}

  read(hash: Buffer, page: TokenPageRequest, now: number): Promise<TokenWithPage> {
    return page.tag === undefined ? this.untagged.add({ hash, page, now }) : this.tagged.add({ hash, page, now });
  }

  private readUntagged(reads: readonly TokenRead[]): Promise<TokenWithPage[]> {
    return this.pages(TOKEN_PAGES, reads, []);
  }

  /** Tokens with a page of one tag each: the same ranges, each of the tag's plants (see viewerRanges). */
  private readTagged(reads: readonly TokenRead[]): Promise<TokenWithPage[]> {
    return this.pages(TOKEN_TAG_PAGES, reads, [reads.map((read) => read.page.tag)]);
  }

  private async pages(statement: { name: string; text: string }, reads: readonly TokenRead[], more: unknown[]): Promise<TokenWithPage[]> {
    const values = [
      reads.map((read) => read.hash),
      reads.map((read) => read.page.after),
      reads.map((read) => read.page.limit + 1),
      ...more,
    ];
    const rows = await this.rows(statement, reads, values);
    return rows.map((row, i) => {
      if (row === undefined) return { credential: undefined, page: undefined };
      // A page that met positions of plants gone, or came out of order, is read again apart, as visiblePlants reads it.
      if (!row.reads_page || metGonePlant(row.plants)) return { credential: credentialOf(row), page: undefined };
      return { credential: credentialOf(row), page: this.pageOf(row, reads[i]!.page.limit) };
    });
  }

  /** A page read with its token: from the primary, so always one the caches may keep. */
  private pageOf(row: TokenPageRow, limit: number) {
    return pageFromColumns(row.ids, row.plants, limit, (row.groups ?? []).map(Number), true);
  }

  /**
   * The rows of a statement of tokens and their pages, one a request in the order of `reads` (undefined for an
   * unknown token): the arrays `values` first, then the time tokens are judged at.
   */
  private async rows(
    statement: { name: string; text: string },
    reads: readonly TokenRead[],
    values: unknown[],
  ): Promise<Array<TokenPageRow | undefined>> {
    // Active at the latest of their times: a token that expired while its request waited is not.
    const now = reads.reduce((latest, read) => Math.max(latest, read.now), 0);
    const { rows } = await this.pool.query<TokenPageRow>({ ...statement, values: [...values, now] });
    const found = new Array<TokenPageRow | undefined>(reads.length).fill(undefined);
    for (const row of rows) found[row.asked - 1] = row;
    return found;
  }
}
