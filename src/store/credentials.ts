import type { Awaitable } from '../awaitable.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { TokenCredential, TokenPageRequest, TokenWithPage, UserCredential } from './records.js';
import { provisionUser } from './repositories/users.js';

/** Who a presented token or a JWT's user claim names: the authenticator's whole view of the store. */
export function credentialLookup(d: DatabaseSeam, hot: HotQueries) {
  return {
    // SQLite answers synchronously, PostgreSQL with a promise.
    findToken: (hash: Buffer): Awaitable<TokenCredential | undefined> => hot.run('find_token', () => d.reads.findToken(hash)),
    /**
     * The token and, in the same round trip, the page its user would read (RequestReads.findTokenWithPage); absent
     * where the backend reads them apart.
     */
    findTokenWithPage:
      d.reads.findTokenWithPage &&
      ((hash: Buffer, page: TokenPageRequest, now: number): Awaitable<TokenWithPage> =>
        hot.run('find_token_with_page', () => d.reads.findTokenWithPage!(hash, page, now))),
    /** The user a JWT names, by user name. */
    findUser: (name: string): Awaitable<UserCredential | undefined> => hot.run('find_user', () => d.reads.findUser(name)),
    /** Finds the user or creates it as an ordinary user (concurrent calls for one name create one user). */
    provisionUser: (name: string): Promise<UserCredential> => provisionUser(d, name),
  };
}

export type Credentials = ReturnType<typeof credentialLookup>;
