import type pg from 'pg';
import { Batch, ONE_RUN_AT_A_TIME, type BatchOptions } from '../batch.js';
import { firstReadIsPage, firstReadPositions, metGonePlant, pageFromColumns } from '../listing-sql.js';
import type { FirstRead, TokenCredential, TokenPageRequest, TokenWithPage } from '../records.js';
import { tokenPagesSql, tokenTagPagesSql } from './postgres-listing-sql.js';

/** The columns of a stored token (findTokenSql). */
export type TokenRow = { token_id: number; user_id: number; is_admin: number; expires_at: number | null; revoked_at: number | null };

export const credentialOf = (row: TokenRow): TokenCredential => ({
  tokenId: row.token_id,
  userId: row.user_id,
  admin: row.is_admin === 1,
  expiresAt: row.expires_at,
  revokedAt: row.revoked_at,
});

/** Tags whose pages were last read as common ones, at most (see CommonTags). */
const REMEMBERED_TAGS = 10_000;

/**
 * Tags whose last page was read as a common tag's (postgres-reads.ts, firstFilteredPage): a tag's page starts the
 * way it took last time. The oldest is forgotten past REMEMBERED_TAGS; a wrong start costs a round trip, never a
 * wrong page.
 */
export class CommonTags {
  private readonly tags = new Set<string>();

  has(tag: string): boolean {
    return this.tags.has(tag);
  }

  remember(tag: string): void {
    if (this.tags.has(tag)) return;
    this.tags.add(tag);
    if (this.tags.size > REMEMBERED_TAGS) this.tags.delete(this.tags.values().next().value!);
  }

  forget(tag: string): void {
    this.tags.delete(tag);
  }
}

const TOKEN_PAGES = { name: 'find_tokens_with_pages', text: tokenPagesSql() };
const TOKEN_TAG_PAGES = { name: 'find_tokens_with_tag_pages', text: tokenTagPagesSql() };
/** The most tokens one statement reads with their pages. */
const TOKEN_READS_AT_ONCE = 100;
/**
 * One statement of each kind at a time, the requests that come meanwhile read together by the next (see Batch). A
 * failed statement fails all its requests, as one read would: their failure is the database's, not a request's,
 * since a request's values are ones the route's schema accepts (a tag without NUL, which PostgreSQL's text cannot
 * carry).
 */
const STATEMENTS: BatchOptions = { eachAloneOnFailure: false, ...ONE_RUN_AT_A_TIME };

/**
 * A row of tokenPagesSql or tokenTagPagesSql: the token asked for in place `asked` (from 1), and its page when
 * `reads_page` (page columns and the groups it counted); of a tag's, which way it was read (`common`) and, the
 * common way, how many positions it read.
 */
type TokenPageRow = TokenRow & {
  asked: number;
  reads_page: boolean;
  ids: string;
  plants: string;
  groups: Array<number | string> | null;
  common?: boolean | null;
  positions_read?: string | null;
};

/** A request for a token and its page. */
interface TokenRead {
  hash: Buffer;
  page: TokenPageRequest;
  now: number;
  /** A tag's page's: how its first read goes (see RequestReads.firstFilteredPage). */
  first?: FirstRead;
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
    private readonly commonTags: CommonTags,
  ) {}

  read(hash: Buffer, page: TokenPageRequest, now: number, first: FirstRead): Promise<TokenWithPage> {
    return page.tag === undefined ? this.untagged.add({ hash, page, now }) : this.tagged.add({ hash, page, now, first });
  }

  private async readUntagged(reads: readonly TokenRead[]): Promise<TokenWithPage[]> {
    const values = [reads.map((read) => read.hash), reads.map((read) => read.page.after), reads.map((read) => read.page.limit + 1)];
    const rows = await this.rows(TOKEN_PAGES, reads, values);
    return rows.map((row, i) => {
      if (row === undefined) return { credential: undefined, page: undefined };
      // A page that met positions of plants gone is read again apart, as visiblePlants reads it.
      if (!row.reads_page || metGonePlant(row.plants)) return { credential: credentialOf(row), page: undefined };
      return { credential: credentialOf(row), page: this.pageOf(row, reads[i]!.page.limit) };
    });
  }

  /** Tokens with a tag's first page each (tokenTagPagesSql), as firstFilteredPage reads it, both ways at once. */
  private async readTagged(reads: readonly TokenRead[]): Promise<TokenWithPage[]> {
    // The store has one way of first reads (store/listing.ts): every request's is the same.
    const first = reads[0]!.first!;
    const values = [
      reads.map((read) => read.hash),
      reads.map((read) => read.page.after),
      reads.map((read) => read.page.limit + 1),
      reads.map((read) => read.page.tag),
      // A tag common last time is read the common way without counting it first. Rare by now, the page read that
      // way is still the page when it fills it or reads all the user sees; when neither, it is read again apart.
      reads.map((read) => this.commonTags.has(read.page.tag!)),
    ];
    const rows = await this.rows(TOKEN_TAG_PAGES, reads, values, [first.positions, first.rareBelow]);
    return rows.map((row, i) => {
      if (row === undefined) return { credential: undefined, page: undefined };
      const credential = credentialOf(row);
      if (!row.reads_page) return { credential, page: undefined };
      const { limit, tag } = reads[i]!.page;
      if (row.common) this.commonTags.remember(tag!);
      const found = this.pageOf(row, limit);
      // A rare tag's page is read whole; the common way's is read from the user's first positions.
      const whole = !row.common || firstReadIsPage(found, Number(row.positions_read), firstReadPositions(first, limit + 1, true));
      return { credential, page: whole ? found : undefined };
    });
  }

  /** A page read with its token: from the primary, so always one the caches may keep. */
  private pageOf(row: TokenPageRow, limit: number) {
    // PostgreSQL's aggregates sort the rows themselves: the ids are in order.
    return pageFromColumns(row.ids, row.plants, limit, (row.groups ?? []).map(Number), true)!;
  }

  /**
   * The rows of a statement of tokens and their pages, one a request in the order of `reads` (undefined for an
   * unknown token): the arrays `values` first, then the time tokens are judged at, then `more`.
   */
  private async rows(
    statement: { name: string; text: string },
    reads: readonly TokenRead[],
    values: unknown[],
    more: unknown[] = [],
  ): Promise<Array<TokenPageRow | undefined>> {
    // Active at the latest of their times: a token that expired while its request waited is not.
    const now = reads.reduce((latest, read) => Math.max(latest, read.now), 0);
    const { rows } = await this.pool.query<TokenPageRow>({ ...statement, values: [...values, now, ...more] });
    const found = new Array<TokenPageRow | undefined>(reads.length).fill(undefined);
    for (const row of rows) found[row.asked - 1] = row;
    return found;
  }
}
