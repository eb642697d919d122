import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config.js';
import { startServer, type RunningServer } from '../../src/server.js';
import { openStore } from '../../src/store/open-store.js';
import { hashToken } from '../../src/catalogue/tokens.js';
import type { Store, TokenPageRequest } from '../../src/store/store.js';
import { assertError, nextLink, settleChangeFeed } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends, type Backend } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, seed, type SeedSpec } from '../helpers/http-app.js';
import { analyze, plainSql } from '../helpers/plain-sql.js';
import { delta, parseSamples, type Sample } from '../helpers/prometheus.js';

// A token the caches do not hold is read with the page its request asks for (RequestReads.findTokenWithPage): on
// PostgreSQL in one round trip, on SQLite with the other requests of its turn of the event loop. Every answer must be the one the two reads apart give: an ordinary user's pages,
// an admin's, a refused token's, and the queries the route reads only once they are validated. Each request here
// presents a token never seen before, so that it is read from the database, with the caches on and off.

after(() => cleanupBackends());

/**
 * For the suite it is called in: a fresh store of `backend` seeded with `spec`, and a server on it with the caches
 * on or off, made before its tests and closed after them; its metrics, and a request with a token minted for it.
 */
function servedCatalogue(backend: Backend, cache: boolean, spec: SeedSpec) {
  const served = {} as { db: string; store: Store; server: RunningServer };
  before(async () => {
    const db = await backend.freshDb();
    served.db = db;
    served.store = await openStore({ db });
    await seed(served.store, spec);
    served.server = await startServer(loadConfig({ db, port: 0, logLevel: 'silent', metricsPort: 0, cache }), served.store);
    await settleChangeFeed(served.store);
  });
  after(async () => {
    await served.server?.stop();
    await served.store?.close();
  });
  /** A request with a token of `user` minted for it alone. */
  const asNewToken = async (user: string, path: string) =>
    rawRequest(served.server.url, path, bearer((await mintToken(served.store, user)).token));
  /** The names on the pages from `path` on (at most `most`), by their Links, each page asked with `tokenFor()`. */
  const pagesWith = async (tokenFor: () => Promise<string>, path: string, most: number) => {
    const listed: string[] = [];
    let requests = 0;
    for (let next: string | undefined = path; next !== undefined; requests++) {
      assert.ok(requests <= most, 'the pages end');
      const res = await rawRequest(served.server.url, next, bearer(await tokenFor()));
      assert.equal(res.status, 200, res.text);
      listed.push(...names(res.body));
      next = nextLink(res.headers.link);
    }
    return { listed, requests };
  };
  /** The same, each page with a new token of `user`. */
  const pagesWithNewTokens = (user: string, path: string, most: number) =>
    pagesWith(async () => (await mintToken(served.store, user)).token, path, most);
  return {
    served,
    scrape: async (): Promise<Sample[]> => parseSamples(await (await fetch(served.server.metricsUrl!)).text()),
    asNewToken,
    pagesWith,
    pagesWithNewTokens,
  };
}

/** Tokens for the store-level batch tests: a revoked one, one never issued, and a new one for each of `users`. */
async function tokensOfEveryKind(store: Store, users: readonly string[]): Promise<string[]> {
  const revoked = await mintToken(store, 'bob');
  await store.tokens.revoke(revoked.id);
  const tokens = [revoked.token, `pst_${'B'.repeat(43)}`];
  for (const user of users) tokens.push((await mintToken(store, user)).token);
  return tokens;
}

/** Each token read with its page in one turn (RequestReads.findTokenWithPage), beside its credential read apart. */
async function readInOneTurn(store: Store, asked: ReadonlyArray<{ hash: Buffer; page: TokenPageRequest }>) {
  const read = store.credentials.findTokenWithPage!;
  const found = await Promise.all(asked.map(async ({ hash, page }) => read(hash, page, Date.now())));
  return Promise.all(found.map(async (withPage, i) => ({ ...withPage, apart: await store.credentials.findToken(asked[i]!.hash) })));
}

const names = (body: unknown) => (body as Array<{ name: string }>).map((plant) => plant.name);

const PLANTS = [
  { name: 'alice-1', owner: 'alice' },
  { name: 'public-1', owner: 'alice', public: true },
  { name: 'bob-1', owner: 'bob', tag: 'herb' },
  { name: 'alice-2', owner: 'alice', tag: 'herb' },
  { name: 'shared-bob', owner: 'alice', sharedWith: [{ user: 'bob' }] },
  { name: 'shared-group', owner: 'alice', tag: 'herb', sharedWith: [{ group: 'gardeners' }] },
  { name: 'alice-3', owner: 'alice' },
  { name: 'bob-2', owner: 'bob' },
];
const BOB_SEES = ['public-1', 'bob-1', 'shared-bob', 'shared-group', 'bob-2'];
const CAROL_SEES = ['public-1'];

for (const backend of BACKENDS) {
  for (const cache of [true, false]) {
    describe(
      `a page read with the token that asks for it [${backend.name}, caches ${cache ? 'on' : 'off'}]`,
      { skip: backend.skip },
      () => {
        const { served, scrape, asNewToken, pagesWithNewTokens } = servedCatalogue(backend, cache, {
          users: [{ name: 'alice' }, { name: 'bob' }, { name: 'carol' }, { name: 'root', admin: true }],
          groups: [{ name: 'gardeners', members: ['bob'] }],
          plants: PLANTS,
        });
        /** Which hot-path queries `run` made, by name. */
        const queriesOf = async (run: () => Promise<void>) => {
          const before = await scrape();
          await run();
          const after = await scrape();
          const count = (query: string) => delta(before, after, 'plantstore_db_query_duration_seconds_count', { query });
          return {
            withPage: count('find_token_with_page'),
            token: count('find_token'),
            page: count('visible_plants'),
            all: count('all_plants'),
          };
        };

        it("pages of a new token, each followed with another, are the user's listing", async () => {
          for (const [user, sees] of [
            ['bob', BOB_SEES],
            ['carol', CAROL_SEES],
          ] as const) {
            let paged = { listed: [] as string[], requests: 0 };
            const queries = await queriesOf(async () => {
              paged = await pagesWithNewTokens(user, '/plants?limit=2', sees.length);
            });
            const { listed, requests } = paged;
            assert.deepEqual(listed, sees, user);
            assert.deepEqual(queries, { withPage: requests, token: 0, page: 0, all: 0 }, 'one read a page');
            // The same as a full listing, which the route reads after the token.
            assert.deepEqual(names((await asNewToken(user, '/plants')).body), sees);
          }
        });

        it("an admin's new token lists every plant, read apart from the token", async () => {
          let res: Awaited<ReturnType<typeof asNewToken>> | undefined;
          const queries = await queriesOf(async () => {
            res = await asNewToken('root', '/plants?limit=20');
          });
          assert.equal(res!.status, 200, res!.text);
          assert.deepEqual(
            names(res!.body),
            PLANTS.map((plant) => plant.name),
          );
          assert.equal(queries.all, 1, 'the page of every plant');
          assert.equal(queries.page, 0);
        });

        it('a revoked, expired or unknown token is refused, its page never sent', async () => {
          const revoked = await mintToken(served.store, 'bob');
          await served.store.tokens.revoke(revoked.id);
          const expired = await mintToken(served.store, 'bob', { expiresAt: new Date(Date.now() - 1_000) });
          await settleChangeFeed(served.store);
          for (const path of ['/plants?limit=2', '/plants?limit=20']) {
            assert.doesNotMatch(
              assertError(await rawRequest(served.server.url, path, bearer(revoked.token)), 401, 40104).message,
              /public-1/,
            );
            assertError(await rawRequest(served.server.url, path, bearer(expired.token)), 401, 40103);
            assertError(await rawRequest(served.server.url, path, bearer(`pst_${'A'.repeat(43)}`)), 401, 40102);
          }
        });

        it('queries the route reads after validation answer as they did', async () => {
          const herbs = await asNewToken('bob', '/plants?limit=5&tag=herb');
          assert.deepEqual(names(herbs.body), ['bob-1', 'shared-group']);
          // With `fields` the page is read after the token: the same plants (shared-group through a small group).
          assert.deepEqual(names((await asNewToken('bob', '/plants?limit=5&tag=herb&fields=name,tag')).body), ['bob-1', 'shared-group']);
          const withIds = await asNewToken('bob', '/plants?limit=1&fields=id,name,tag');
          assert.equal(withIds.status, 200, withIds.text);
          assert.deepEqual(Object.keys((withIds.body as object[])[0]!), ['id', 'name']);
          assert.deepEqual((await asNewToken('bob', '/plants?limit=0')).body, []);
          assert.deepEqual(names((await asNewToken('bob', '/plants?limit=02')).body), BOB_SEES.slice(0, 2));
          assertError(await asNewToken('bob', '/plants?limit=-1'), 400, 40001);
          assertError(await asNewToken('bob', '/plants?limit=2&cursor=bogus'), 400, 40001);
          assertError(await asNewToken('bob', '/plants?limit=2&limit=3'), 400, 40002);
          assertError(await asNewToken('bob', '/plants?limit=2&color=red'), 400, 40004);
        });

        it('requests of many new tokens at once each get their own answer', async () => {
          // On PostgreSQL the tokens that arrive together are read in one statement: each answer must be its own.
          const revoked = await mintToken(served.store, 'bob');
          await served.store.tokens.revoke(revoked.id);
          await settleChangeFeed(served.store);
          const asked: Array<{ token: string; path: string; expect: (res: Awaited<ReturnType<typeof rawRequest>>) => void }> = [];
          for (let i = 0; i < 8; i++) {
            for (const [user, sees] of [
              ['bob', BOB_SEES],
              ['carol', CAROL_SEES],
              ['alice', PLANTS.filter((plant) => plant.owner === 'alice' || plant.public).map((plant) => plant.name)],
              ['root', PLANTS.map((plant) => plant.name)],
            ] as const) {
              const limit = 1 + ((i * 3) % 6);
              asked.push({
                token: (await mintToken(served.store, user)).token,
                path: `/plants?limit=${limit}`,
                expect: (res) => assert.deepEqual(names(res.body), sees.slice(0, limit), `${user}, limit ${limit}: ${res.text}`),
              });
            }
            asked.push({ token: revoked.token, path: '/plants?limit=3', expect: (res) => assertError(res, 401, 40104) });
            asked.push({ token: `pst_${String(i).repeat(43)}`, path: '/plants?limit=3', expect: (res) => assertError(res, 401, 40102) });
          }
          const answers = await Promise.all(asked.map(({ token, path }) => rawRequest(served.server.url, path, bearer(token))));
          for (const [i, { expect }] of asked.entries()) expect(answers[i]!);
        });

        it('tokens asked for in one turn of the event loop each come with their own page', async () => {
          // Read together (in one statement on PostgreSQL): each answer is compared with the two reads apart.
          const tokens = await tokensOfEveryKind(served.store, ['bob', 'carol', 'alice', 'root', 'bob', 'carol']);
          const asked = tokens.map((token, i) => ({ hash: hashToken(token), page: { after: i % 3, limit: 1 + (i % 4) } }));
          const found = await readInOneTurn(served.store, asked);
          for (const [i, { page }] of asked.entries()) {
            const credential = found[i]!.apart;
            assert.deepEqual(found[i]!.credential, credential, `token ${i}`);
            const active = credential !== undefined && credential.revokedAt === null && !credential.admin;
            if (!active) assert.equal(found[i]!.page, undefined, `token ${i} reads no page`);
            else
              assert.deepEqual(
                found[i]!.page,
                await served.store.listing.listVisiblePlants({ userId: credential.userId, admin: false }, page),
                `token ${i}`,
              );
          }
        });

        it('HEAD answers the headers of the page GET reads with a new token', async () => {
          const res = await rawRequest(served.server.url, '/plants?limit=2', bearer((await mintToken(served.store, 'bob')).token), 'HEAD');
          assert.equal(res.status, 200);
          assert.equal(res.text, '');
          assert.match(String(res.headers.link), /^<\/plants\?limit=2&cursor=/);
        });
      },
    );
  }
}

// A tag's first page comes with the token too, read either way its first read goes (store/listing.ts): by the
// index of plants by tag when the tag is rare from the page on, else from the first of the user's positions, which
// is the page only when it fills it or those positions were all. Enough plants here that `leaf` is common, and
// rare again towards the end of its listing.
const MANY = 600;
const TAGGED = Array.from({ length: MANY }, (_, i) => ({
  name: `p${i}`,
  owner: i % 50 === 9 ? 'bob' : 'alice',
  ...(i % 2 === 0 ? { tag: 'leaf' } : i % 97 === 3 ? { tag: 'rare' } : {}),
  public: i % 40 === 5,
  sharedWith: [...(i % 3 === 0 ? [{ group: 'gardeners' }] : []), ...(i % 10 === 1 || i % 100 === 0 ? [{ user: 'dave' }] : [])],
}));
/** The access rule, written out for this catalogue: what `user` sees of it, with tag `tag` when given, in catalogue order. */
const taggedSeenBy = (user: string, tag?: string) =>
  TAGGED.filter(
    (plant) =>
      (tag === undefined || plant.tag === tag) &&
      (plant.owner === user ||
        plant.public ||
        plant.sharedWith.some((grantee) => ('user' in grantee ? grantee.user === user : user === 'bob'))),
  ).map((plant) => plant.name);

for (const backend of BACKENDS) {
  for (const cache of [true, false]) {
    describe(
      `a tag's page read with the token that asks for it [${backend.name}, caches ${cache ? 'on' : 'off'}]`,
      { skip: backend.skip },
      () => {
        const { served, scrape, asNewToken, pagesWith, pagesWithNewTokens } = servedCatalogue(backend, cache, {
          users: ['alice', 'bob', 'carol', 'dave'].map((name) => ({ name })),
          groups: [{ name: 'gardeners', members: ['bob'] }],
          plants: TAGGED,
        });

        it("a tag's pages of new tokens, each followed with another, are the user's listing of the tag", async () => {
          // Dave sees few `leaf` plants among many others, the others many: every page comes with its token all the
          // same, read from the user's ranges of the tag.
          const readAgain = new Map<string, number>();
          for (const user of ['alice', 'bob', 'carol', 'dave']) {
            for (const tag of ['leaf', 'rare', 'none']) {
              for (const limit of tag === 'leaf' ? [20] : [2, 20]) {
                const sees = taggedSeenBy(user, tag);
                const before = await scrape();
                const { listed, requests } = await pagesWithNewTokens(user, `/plants?limit=${limit}&tag=${tag}`, sees.length);
                const after = await scrape();
                const count = (query: string) => delta(before, after, 'plantstore_db_query_duration_seconds_count', { query });
                const label = `${user}, tag ${tag}, limit ${limit}`;
                assert.deepEqual(listed, sees, label);
                assert.equal(count('find_token_with_page'), requests, label);
                assert.equal(count('find_token'), 0, label);
                readAgain.set(`${user} ${tag} ${limit}`, count('filtered_plants'));
                // The same as the tag's full listing, which the route reads after the token.
                assert.deepEqual(names((await asNewToken(user, `/plants?tag=${tag}`)).body), sees, label);
              }
            }
          }
          for (const [key, reads] of readAgain) assert.equal(reads, 0, `${key}: read with the token`);
        });

        it('requests of many new tokens at once, of tags and not, each get their own answer', async () => {
          const asked: Array<{ user: string; path: string; sees: string[] }> = [];
          for (const user of ['alice', 'bob', 'carol', 'dave']) {
            for (const [i, tag] of ['leaf', 'rare', 'none', undefined].entries()) {
              const limit = 1 + ((i * 5) % 21);
              const path = `/plants?limit=${limit}${tag === undefined ? '' : `&tag=${tag}`}`;
              asked.push({ user, path, sees: taggedSeenBy(user, tag).slice(0, limit) });
            }
          }
          const tokens = await Promise.all(asked.map(async ({ user }) => (await mintToken(served.store, user)).token));
          // Refused among them, each alone: a token never issued or revoked, and a tag no plant can have (PostgreSQL's
          // text cannot carry NUL: read with the others, it would fail their statement).
          const revoked = await mintToken(served.store, 'bob');
          await served.store.tokens.revoke(revoked.id);
          await settleChangeFeed(served.store);
          const refused = [
            { token: `pst_${'D'.repeat(43)}`, path: '/plants?limit=3&tag=%00', status: 401, code: 40102 },
            { token: (await mintToken(served.store, 'bob')).token, path: '/plants?limit=3&tag=%00', status: 400, code: 40001 },
            { token: revoked.token, path: '/plants?limit=3&tag=leaf', status: 401, code: 40104 },
          ];
          const [answers, refusals] = await Promise.all([
            Promise.all(asked.map(({ path }, i) => rawRequest(served.server.url, path, bearer(tokens[i]!)))),
            Promise.all(refused.map(({ token, path }) => rawRequest(served.server.url, path, bearer(token)))),
          ]);
          for (const [i, { user, path, sees }] of asked.entries()) {
            assert.equal(answers[i]!.status, 200, answers[i]!.text);
            assert.deepEqual(names(answers[i]!.body), sees, `${user} ${path}`);
          }
          for (const [i, { status, code }] of refused.entries()) assertError(refusals[i]!, status, code);
        });

        it("tokens asked for in one turn with a tag's page each come with the page the listing reads", async () => {
          const tokens = await tokensOfEveryKind(served.store, ['bob', 'carol', 'alice', 'dave', 'bob', 'alice']);
          const asked = tokens.map((token, i) => ({
            hash: hashToken(token),
            page: { after: [0, 7, 431][i % 3]!, limit: 1 + (i % 5) * 4, tag: ['leaf', 'rare'][i % 2]! },
          }));
          const found = await readInOneTurn(served.store, asked);
          let withPage = 0;
          for (const [i, { page }] of asked.entries()) {
            const credential = found[i]!.apart;
            assert.deepEqual(found[i]!.credential, credential, `token ${i}`);
            if (found[i]!.page === undefined) continue;
            withPage++;
            assert.ok(credential !== undefined && credential.revokedAt === null, `token ${i} is active`);
            assert.deepEqual(
              found[i]!.page,
              await served.store.listing.listVisiblePlants({ userId: credential.userId, admin: false }, page),
              `token ${i}`,
            );
          }
          assert.ok(withPage >= 5, `${withPage} pages came with their tokens`);
        });

        it("a tag's pages keep catalogue order when plain SQL has rewritten plants' rows and gathered statistics", async () => {
          // Small tables with statistics lead PostgreSQL to join a first read's positions to plants by hashing them,
          // which yields plants in the order of their rows on disk (rewritten ones last), not the positions': only
          // the read's own ORDER BY keeps its LIMIT to the first plants.
          await plainSql(served.db, 'UPDATE plants SET name = name WHERE id % 3 = 0');
          await analyze(served.db);
          await settleChangeFeed(served.store);
          for (const user of ['alice', 'bob', 'dave']) {
            // Without a tag, a listing with ids has the same first read.
            for (const tag of ['leaf', 'rare', undefined]) {
              const sees = taggedSeenBy(user, tag);
              const label = `${user}, tag ${tag}`;
              const path = `/plants?limit=20&${tag === undefined ? 'fields=id,name,tag' : `tag=${tag}`}`;
              assert.deepEqual((await pagesWithNewTokens(user, path, sees.length)).listed, sees, label);
              // One token for every page: with the caches on, its later pages are read apart from it.
              const { token } = await mintToken(served.store, user);
              assert.deepEqual((await pagesWith(async () => token, path, sees.length)).listed, sees, `${label}, one token`);
            }
          }
        });
      },
    );
  }
}
