import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { CatalogueRecord } from '../../src/import-format/records.js';
import { recordBatch } from '../../src/import-format/records.js';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import type { Store } from '../../src/store/store.js';
import { openStore } from '../../src/store/open-store.js';
import { assertError, nextLink } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, startApp, type RunningApp } from '../helpers/http-app.js';
import { AUDIENCE, ISSUER, mintJwt, SECRET, secretKey } from '../helpers/jwt.js';
import { plainSql } from '../helpers/plain-sql.js';

// GET /plants?tag=T and ?fields=id,name,tag: the same plants as the contract's listing, narrowed to a tag or with
// ids, in the same order, page by page; the contract's listing unchanged.

const PLANTS = 1_500;

interface Listed {
  id: number;
  name: string;
  tag?: string;
}

/**
 * Tags: `rare` on every 300th plant, `common` on half, others on some. alice sees every third plant (owned, shared
 * with her, with her group) and every tenth (public); carol sees only her own two plants.
 */
function catalogue(): { records: CatalogueRecord[]; visible: Record<string, (id: number) => boolean> } {
  const records: CatalogueRecord[] = [
    { type: 'user', name: 'alice' },
    { type: 'user', name: 'bob' },
    { type: 'user', name: 'carol' },
    { type: 'user', name: 'root', admin: true },
    { type: 'group', name: 'gardeners', members: ['alice'] },
  ];
  const alice = new Set<number>();
  const carol = new Set<number>();
  /** carol with a JWT whose groups claim names gardeners (and a group that is not stored). */
  const carolClaiming = new Set<number>();
  for (let i = 1; i <= PLANTS; i++) {
    const tag = i % 300 === 0 ? 'rare' : i % 2 === 0 ? 'common' : i % 5 === 0 ? undefined : `tag ${i % 7}`;
    const kind = i % 3 === 0 ? ['owned', 'shared', 'group'][(i / 3) % 3]! : undefined;
    const isPublic = i % 10 === 0;
    const owner = i === 7 || i === 600 ? 'carol' : kind === 'owned' ? 'alice' : 'bob';
    records.push({
      type: 'plant',
      id: i,
      name: `plant ${i}`,
      ...(tag === undefined ? {} : { tag }),
      owner,
      public: isPublic,
      sharedWith: kind === 'shared' ? ['alice'] : kind === 'group' ? ['group:gardeners'] : [],
    });
    if (owner === 'alice' || kind !== undefined || isPublic) alice.add(i);
    if (owner === 'carol' || isPublic) carol.add(i);
    if (owner === 'carol' || isPublic || kind === 'group') carolClaiming.add(i);
  }
  return {
    records,
    visible: { alice: (id) => alice.has(id), carol: (id) => carol.has(id), carolClaiming: (id) => carolClaiming.has(id), root: () => true },
  };
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`listing by tag and with ids [${backend.name}]`, { skip: backend.skip }, () => {
    let db: string;
    let store: Store;
    let server: RunningApp;
    let uncached: RunningApp;
    let withJwts: RunningApp;
    let all: Listed[];
    let visible: Record<string, (id: number) => boolean>;
    const tokens: Record<string, string> = {};
    const get = (path: string, user: string, target = server) => rawRequest(target.url, path, bearer(tokens[user]!));
    /** Every page of `path`, followed by its Link, as one list. */
    const walk = async (path: string, user: string, target = server): Promise<Listed[]> => {
      const seen: Listed[] = [];
      for (let next: string | undefined = path; next !== undefined;) {
        const res = await get(next, user, target);
        assert.equal(res.status, 200, res.text);
        seen.push(...(res.body as Listed[]));
        next = nextLink(res.headers.link);
      }
      return seen;
    };
    const expected = (user: string, tag?: string, withIds = false) =>
      all
        .filter((p) => visible[user]!(p.id) && (tag === undefined || p.tag === tag))
        .map((p) => (withIds ? p : { name: p.name, ...(p.tag === undefined ? {} : { tag: p.tag }) }));

    before(async () => {
      db = await backend.freshDb();
      store = await openStore({ db });
      const built = catalogue();
      visible = built.visible;
      await store.bulk.importRecords(recordBatch(built.records));
      all = (await store.plants.list({})).map((p) => ({ id: p.id, name: p.name, ...(p.tag === undefined ? {} : { tag: p.tag }) }));
      for (const user of ['alice', 'bob', 'carol', 'root']) tokens[user] = (await mintToken(store, user)).token;
      server = await startApp(store);
      uncached = await startApp(store, { config: { cache: false } });
      withJwts = await startApp(store, {
        config: { cache: false, jwtIssuer: ISSUER, jwtAudience: AUDIENCE, jwtGroupsClaim: 'groups' },
        env: { PLANTSTORE_JWT_SECRET: SECRET },
      });
      tokens.carolClaiming = await mintJwt(secretKey(), { claims: { sub: 'carol', groups: ['gardeners', 'no such group'] } });
    });
    after(async () => {
      await server?.close();
      await uncached?.close();
      await withJwts?.close();
      await store?.close();
    });

    it('lists the plants of one tag the caller sees, in catalogue order, page by page and whole', async () => {
      for (const user of ['alice', 'carol', 'root']) {
        for (const tag of ['rare', 'common', 'tag 3', 'no such tag']) {
          const want = expected(user, tag);
          for (const limit of [1, 7, 100]) {
            assert.deepEqual(await walk(`/plants?limit=${limit}&tag=${encodeURIComponent(tag)}`, user), want, `${user} ${tag} ${limit}`);
          }
          assert.deepEqual((await get(`/plants?tag=${encodeURIComponent(tag)}`, user)).body, want, `${user} ${tag} whole`);
          assert.deepEqual((await get(`/plants?tag=${encodeURIComponent(tag)}&limit=5000`, user, uncached)).body, want);
        }
      }
    });

    it("counts the groups a JWT's claim names in tag pages and pages with ids, as stored memberships", async () => {
      // carol sees few plants of her own; with the claim, every ninth plant more: the common tag is then read from
      // what she sees, the rare ones by their index, each probed through the claimed group.
      for (const tag of ['rare', 'common', 'tag 3', undefined]) {
        const want = expected('carolClaiming', tag, true);
        const query = `fields=id,name,tag${tag === undefined ? '' : `&tag=${encodeURIComponent(tag)}`}`;
        for (const limit of [1, 7, 100]) {
          assert.deepEqual(await walk(`/plants?limit=${limit}&${query}`, 'carolClaiming', withJwts), want, `${tag} ${limit}`);
        }
      }
    });

    it('lists ids with fields=id,name,tag, alone or with a tag; the Link keeps both', async () => {
      for (const user of ['alice', 'carol', 'root']) {
        assert.deepEqual(await walk('/plants?limit=50&fields=id,name,tag', user), expected(user, undefined, true), user);
        assert.deepEqual(await walk('/plants?limit=3&tag=rare&fields=id,name,tag', user), expected(user, 'rare', true), user);
        assert.deepEqual((await get('/plants?fields=id,name,tag', user, uncached)).body, expected(user, undefined, true));
      }
      const first = await get('/plants?limit=2&tag=tag%203&fields=id,name,tag', 'alice');
      assert.match(String(first.headers.link), /^<\/plants\?limit=2&cursor=[A-Za-z0-9_-]+&tag=tag%203&fields=id,name,tag>; rel="next"$/);
      // `name,tag` is the contract's listing.
      assert.equal((await get('/plants?limit=30&fields=name,tag', 'alice')).text, (await get('/plants?limit=30', 'alice')).text);
    });

    it("leaves the contract's listing as it was, and refuses bad values and unknown parameters", async () => {
      const contract = await get('/plants?limit=40', 'alice');
      assert.equal(contract.text, JSON.stringify(expected('alice').slice(0, 40)));
      assert.match(String(contract.headers.link), /^<\/plants\?limit=40&cursor=[A-Za-z0-9_-]+>; rel="next"$/);
      for (const bad of ['tag=', 'tag=a%00b', 'fields=id', 'fields=id,name', 'fields=tag,name,id', 'fields=', `tag=${'x'.repeat(1025)}`]) {
        assertError(await get(`/plants?${bad}`, 'alice'), 400, 40001);
      }
      assert.equal(
        assertError(await get('/plants?fields=id', 'alice'), 400, 40001).message,
        'query parameter "fields" must be "id,name,tag" or "name,tag"',
      );
      assertError(await get('/plants?tag=a&tag=b', 'alice'), 400, 40002);
      assertError(await get('/plants?tags=herb', 'alice'), 400, 40004);
    });

    it('a change of a tag moves the plant into and out of tag pages at once, cached or not', async () => {
      const id = all.find((p) => visible.alice!(p.id) && p.tag === 'tag 1')!.id as PlantId;
      const rare = () => get('/plants?limit=100&tag=rare', 'alice');
      const before = (await rare()).body as Listed[];
      assert.equal((await store.plants.update(OPERATOR, id, { tag: 'rare' })).outcome, 'changed');
      const withIt = (await rare()).body as Listed[];
      assert.equal(withIt.length, before.length + 1);
      assert.ok(withIt.some((p) => p.name === `plant ${id}`));
      assert.equal((await store.plants.update(OPERATOR, id, { tag: null })).outcome, 'changed');
      assert.deepEqual((await rare()).body, before);
      assert.ok(
        ((await get('/plants?limit=1000&fields=id,name,tag', 'alice')).body as Listed[]).some((p) => p.id === id && p.tag === undefined),
      );
    });

    it('skips grants whose plant plain SQL deleted without foreign keys, in pages with ids and of one tag', async () => {
      // Plants alice sees through a grant to her and through her group, deleted the way a tool without foreign keys
      // would: their grants stay, positions of no plant, which a page must pass over without a hole or a stray.
      const gone = all.filter((p) => p.id % 9 === 3 || p.id % 9 === 6).slice(0, 6);
      assert.ok(gone.some((p) => p.tag === 'common'));
      const ids = gone.map((p) => p.id).join(', ');
      await plainSql(
        db,
        backend.name === 'sqlite'
          ? `PRAGMA foreign_keys = OFF; DELETE FROM plants WHERE api_id IN (${ids})`
          : `SET session_replication_role = replica; DELETE FROM plants WHERE api_id IN (${ids})`,
      );
      // As the store lists them now: the earlier tests changed some tags.
      all = (await store.plants.list({})).map((p) => ({ id: p.id, name: p.name, ...(p.tag === undefined ? {} : { tag: p.tag }) }));
      assert.ok(gone.every((p) => !all.some((q) => q.id === p.id)));
      for (const limit of [1, 7, 100]) {
        assert.deepEqual(await walk(`/plants?limit=${limit}&fields=id,name,tag`, 'alice', uncached), expected('alice', undefined, true));
        assert.deepEqual(
          await walk(`/plants?limit=${limit}&tag=common&fields=id,name,tag`, 'alice', uncached),
          expected('alice', 'common', true),
        );
        assert.deepEqual(await walk(`/plants?limit=${limit}&tag=common`, 'alice', uncached), expected('alice', 'common'));
      }
    });
  });
}
