import { tokenState } from '../../catalogue/tokens.js';
import { Batch } from '../batch.js';
import type { TokenCredential, TokenPageRequest, TokenWithPage } from '../records.js';
import type { SqliteListingReads } from './sqlite-listing-reads.js';

/** A request for a token and its page. */
interface TokenRead {
  hash: Buffer;
  page: TokenPageRequest;
  now: number;
}

/** The reads a SQLite store's token pages take, from its read connection (SqliteReadsAndChanges). */
export interface TokenPageReads {
  findToken(hash: Buffer): TokenCredential | undefined;
  listings(): SqliteListingReads;
}

/**
 * Bearer tokens the caches do not hold, each read with the page its request asks for (RequestReads.findTokenWithPage),
 * the requests of one turn of the event loop together at its end: every token first, then every viewer's groups, then
 * every page (SqliteListingReads.listPlantsVisibleToEach). Run one after another, the same statements stay in the
 * processor's caches; between two requests' HTTP work each ran cold, at several times its cost in a loop. An answer
 * waits for the rest of its turn's requests, which RepliesAfterPoll makes it do anyway.
 */
export class SqliteTokenPages {
  // A failed batch is read again request by request, so that one request's failure stays its own; the reads are
  // local and synchronous, so that costs nothing until something fails.
  private readonly batch = new Batch<TokenRead, TokenWithPage>(async (reads) => this.readAll(reads), 256, { eachAloneOnFailure: true });

  constructor(private readonly reads: () => TokenPageReads) {}

  read(hash: Buffer, page: TokenPageRequest, now: number): Promise<TokenWithPage> {
    return this.batch.add({ hash, page, now });
  }

  private readAll(asked: readonly TokenRead[]): TokenWithPage[] {
    const reads = this.reads();
    const results: TokenWithPage[] = asked.map(({ hash }) => ({ credential: reads.findToken(hash), page: undefined }));
    // An admin's page and a page for a token not active at its request's time are read after it, as without this.
    const paged = results.flatMap(({ credential }, i) =>
      credential !== undefined && !credential.admin && tokenState(credential, asked[i]!.now) === 'active' ? [i] : [],
    );
    const pages = reads
      .listings()
      .listPlantsVisibleToEach(paged.map((i) => ({ user: results[i]!.credential!.userId, page: asked[i]!.page })));
    paged.forEach((at, j) => (results[at]!.page = pages[j]));
    return results;
  }
}
