import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import {
  createPlant,
  createPlantStoreClient,
  deletePlant,
  getPlant,
  getPlantAccess,
  listAllPlants,
  nextPageQuery,
  PlantStoreError,
  setPlantAccess,
  sharePlant,
  updatePlant,
  type ErrorBody,
  type NewPlant,
  type Plant,
  type PlantStoreClient,
  type VersionedPlant,
} from '@plantstore/client';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { CAROL_SEES, seedDemo, type DemoUser } from '../helpers/demo.js';
import { mintToken, seed, startApp, type RunningApp } from '../helpers/http-app.js';
import { plainSql } from '../helpers/plain-sql.js';

// The published client package, used as a consumer would: over a real socket against the real app. The client
// does not depend on the backend, so one is enough.

const backend = BACKENDS[0]!;

/** A fetch that records every URL it is asked for, to see which pages the client walked. */
function recordingFetch(urls: string[]): (input: Request) => Promise<Response> {
  return (input) => {
    urls.push(input.url);
    return fetch(input);
  };
}

describe(`typed client [${backend.name}]`, () => {
  let db: string;
  let store: Store;
  let server: RunningApp;
  let tokens: Record<DemoUser, string>;
  const client = (token: string, fetchImpl?: (input: Request) => Promise<Response>): PlantStoreClient =>
    createPlantStoreClient({ baseUrl: server.url, token, ...(fetchImpl ? { fetch: fetchImpl } : {}) });

  before(async () => {
    db = await backend.freshDb();
    store = await openStore({ db });
    tokens = await seedDemo(store);
    server = await startApp(store);
  });
  after(async () => {
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('lists the plants the token holder may see, typed as Plant[]', async () => {
    const { data, error, response } = await client(tokens.carol).GET('/plants');
    assert.equal(response.status, 200);
    assert.equal(error, undefined);
    const plants: Plant[] | undefined = data;
    assert.deepEqual(plants, CAROL_SEES);
  });

  it('passes limit as a typed query parameter', async () => {
    for (const limit of [0, 1, 3, 8, 50]) {
      const { data } = await client(tokens.carol).GET('/plants', { params: { query: { limit } } });
      assert.deepEqual(data, CAROL_SEES.slice(0, limit), `limit=${limit}`);
    }
  });

  it('gives the typed Error body on 401, for an unknown token and for another scheme', async () => {
    const unknown = await client('pst_not-a-real-token').GET('/plants');
    assert.equal(unknown.response.status, 401);
    assert.equal(unknown.data, undefined);
    const body: ErrorBody | undefined = unknown.error;
    assert.equal(body?.error, 40102);
    assert.equal(typeof body?.message, 'string');
    assert.match(unknown.response.headers.get('www-authenticate') ?? '', /^Bearer /);

    // A request's own Authorization header wins over the client's token.
    const basic = await client(tokens.carol).GET('/plants', { headers: { authorization: 'Basic Y2Fyb2w6eA==' } });
    assert.equal(basic.response.status, 401);
    assert.equal(basic.error?.error, 40101);
  });

  it('gives the typed Error body on 400 for a limit the contract rejects', async () => {
    const { data, error, response } = await client(tokens.carol).GET('/plants', { params: { query: { limit: -1 } } });
    assert.equal(response.status, 400);
    assert.equal(data, undefined);
    assert.equal(Math.floor((error?.error ?? 0) / 100), 400);
  });

  it('takes the token from a function, asked again on every request', async () => {
    let calls = 0;
    const rotating = createPlantStoreClient({
      baseUrl: server.url,
      token: async () => (++calls === 1 ? tokens.dave : tokens.ada),
    });
    const first = await rotating.GET('/plants');
    const second = await rotating.GET('/plants');
    assert.deepEqual(
      first.data?.map((p) => p.name),
      ['Aloe vera', 'Sansevieria trifasciata', 'Lavandula angustifolia'],
    );
    assert.equal(second.data?.length, 10, 'ada is an admin and sees the whole demo catalogue');
    assert.equal(calls, 2);
  });

  it('listAllPlants follows Link rel="next" page by page to the same listing as one request', async () => {
    for (const pageSize of [1, 3, 7, 8, 100]) {
      const urls: string[] = [];
      const plants: Plant[] = [];
      for await (const plant of listAllPlants(client(tokens.carol, recordingFetch(urls)), { pageSize })) plants.push(plant);
      assert.deepEqual(plants, CAROL_SEES, `pageSize=${pageSize}`);
      // A full last page still carries a link when the server cannot tell it is the last; at most one more request.
      const pages = Math.ceil(CAROL_SEES.length / pageSize);
      assert.ok(urls.length === pages || urls.length === pages + 1, `pageSize=${pageSize}: ${urls.length} requests`);
      assert.equal(new URL(urls[0]!).searchParams.get('cursor'), null, 'the first page has no cursor');
      for (const url of urls.slice(1)) assert.match(new URL(url).searchParams.get('cursor') ?? '', /^[A-Za-z0-9_-]+$/);
    }
  });

  it('listAllPlants lists one tag, and with fields each plant with its id, page after page', async () => {
    const herbs = CAROL_SEES.filter((p) => p.tag === 'herb');
    for (const pageSize of [1, 2, 100]) {
      const urls: string[] = [];
      const tagged: Plant[] = [];
      for await (const plant of listAllPlants(client(tokens.carol, recordingFetch(urls)), { pageSize, tag: 'herb' })) tagged.push(plant);
      assert.deepEqual(tagged, herbs, `pageSize=${pageSize}`);
      for (const url of urls) assert.equal(new URL(url).searchParams.get('tag'), 'herb', 'every page asks for the tag');

      const idUrls: string[] = [];
      const withIds: NewPlant[] = [];
      const carol = client(tokens.carol, recordingFetch(idUrls));
      for await (const plant of listAllPlants(carol, { pageSize, tag: 'herb', fields: 'id,name,tag' })) withIds.push(plant);
      assert.deepEqual(
        withIds.map(({ id: _, ...plant }) => plant),
        herbs,
      );
      for (const { id } of withIds) assert.ok(Number.isSafeInteger(id) && id >= 1, String(id));
      for (const url of idUrls) assert.equal(new URL(url).searchParams.get('fields'), 'id,name,tag');
      // The ids are those of the plants: each reads back as listed.
      const read = await getPlant(client(tokens.carol), withIds[0]!.id);
      assert.deepEqual(read.plant, withIds[0]);
      // An etag a cache may or may not hold types as one that may be undefined, and is then a 304's undefined.
      const cache = new Map([[withIds[0]!.id, read.etag]]);
      const cached = cache.get(withIds[0]!.id);
      const again: VersionedPlant | undefined = await getPlant(client(tokens.carol), withIds[0]!.id, { ifNoneMatch: cached });
      assert.equal(again, undefined);
    }
    const all: NewPlant[] = [];
    for await (const plant of listAllPlants(client(tokens.carol), { pageSize: 3, fields: 'id,name,tag' })) all.push(plant);
    assert.deepEqual(
      all.map(({ id: _, ...plant }) => plant),
      CAROL_SEES,
    );
  });

  it('createPlant and deletePlant create, retry safely, refuse with typed errors and delete', async () => {
    const dave = client(tokens.dave);
    const names = async () => (await dave.GET('/plants')).data!.map((p) => p.name);
    assert.deepEqual(await createPlant(dave, { id: 70_001, name: 'Client fern', tag: 'fern' }), { name: 'Client fern', tag: 'fern' });
    assert.deepEqual(await createPlant(dave, { id: 70_001, name: 'Client fern', tag: 'fern' }), { name: 'Client fern', tag: 'fern' });
    assert.ok((await names()).includes('Client fern'));
    const taken = await createPlant(client(tokens.carol), { id: 70_001, name: 'Other' }).catch((e: unknown) => e);
    assert.ok(taken instanceof PlantStoreError && taken.status === 409 && taken.body.error === 40901, String(taken));
    const notOwner = await deletePlant(client(tokens.carol), 70_001).catch((e: unknown) => e);
    assert.ok(notOwner instanceof PlantStoreError && notOwner.status === 404, String(notOwner));
    await deletePlant(dave, 70_001);
    assert.ok(!(await names()).includes('Client fern'));
  });

  it('getPlantAccess, setPlantAccess and sharePlant share a plant, with the version and typed errors', async () => {
    const dave = client(tokens.dave);
    const carolSees = async () => (await client(tokens.carol).GET('/plants')).data!.some((p) => p.name === 'Shared fern');
    await createPlant(dave, { id: 70_002, name: 'Shared fern' });
    await sharePlant(dave, 70_002, { user: 'carol' }, true);
    assert.ok(await carolSees());
    const read = await getPlantAccess(dave, 70_002);
    assert.deepEqual(read.access, { public: false, users: ['carol'], groups: [] });
    await sharePlant(dave, 70_002, { group: 'herbalists' }, true);
    const stale = await setPlantAccess(dave, 70_002, { public: true, users: [], groups: [] }, { ifMatch: read.etag }).catch(
      (e: unknown) => e,
    );
    assert.ok(stale instanceof PlantStoreError && stale.status === 412 && stale.body.error === 41201, String(stale));
    const current = await getPlantAccess(dave, 70_002);
    const set = await setPlantAccess(dave, 70_002, { public: false, users: [], groups: ['herbalists'] }, { ifMatch: current.etag });
    assert.deepEqual(set.access, { public: false, users: [], groups: ['herbalists'] });
    await sharePlant(dave, 70_002, { group: 'herbalists' }, false);
    assert.ok(!(await carolSees()));
    const unknown = await sharePlant(dave, 70_002, { user: 'nobody' }, true).catch((e: unknown) => e);
    assert.ok(unknown instanceof PlantStoreError && unknown.status === 404 && unknown.body.error === 40403, String(unknown));
    await sharePlant(dave, 70_002, { user: 'carol' }, true);
    const notOwner = await getPlantAccess(client(tokens.carol), 70_002).catch((e: unknown) => e);
    assert.ok(notOwner instanceof PlantStoreError && notOwner.status === 403, String(notOwner));
    await deletePlant(dave, 70_002);
  });

  it('sharePlant refuses the names "." and "..", which fetch drops from a path, sending nothing; setPlantAccess takes them', async () => {
    // Stored before such names were refused: the service still knows them, in a body and over a raw request.
    await plainSql(db, `INSERT INTO users (name, is_admin, created_at, name_key) VALUES ('..', 0, 0, '..')`);
    await plainSql(db, `INSERT INTO groups (name, created_at) VALUES ('.', 0)`);
    await createPlant(client(tokens.dave), { id: 70_004, name: 'Dotted fern' });
    const urls: string[] = [];
    const dave = client(tokens.dave, recordingFetch(urls));
    for (const grantee of [{ user: '..' }, { user: '.' }, { group: '..' }, { group: '.' }]) {
      for (const share of [true, false]) {
        const refused = await sharePlant(dave, 70_004, grantee, share).catch((e: unknown) => e);
        assert.ok(refused instanceof RangeError, `${JSON.stringify(grantee)}: ${String(refused)}`);
        assert.match(refused.message, /^a (user|group) named "\.\.?" cannot be in a URL path: change the access with setPlantAccess/);
      }
    }
    assert.deepEqual(urls, [], 'nothing was sent');
    const set = await setPlantAccess(dave, 70_004, { public: false, users: ['..'], groups: ['.'] });
    assert.deepEqual(set.access, { public: false, users: ['..'], groups: ['.'] });
    assert.deepEqual((await getPlantAccess(dave, 70_004)).access, set.access);
    await deletePlant(dave, 70_004);
  });

  it('getPlant and updatePlant read and change a plant with its version: 304 while unchanged, 412 once stale', async () => {
    const dave = client(tokens.dave);
    await createPlant(dave, { id: 70_003, name: 'Client ivy', tag: 'climber' });
    const read = await getPlant(dave, 70_003);
    assert.deepEqual(read.plant, { id: 70_003, name: 'Client ivy', tag: 'climber' });
    assert.match(read.etag, /^"[A-Za-z0-9_-]+"$/);
    assert.equal(await getPlant(dave, 70_003, { ifNoneMatch: read.etag }), undefined, 'unchanged: 304, nothing to read');

    const changed = await updatePlant(dave, 70_003, { name: 'English ivy', tag: null }, { ifMatch: read.etag });
    assert.deepEqual(changed.plant, { id: 70_003, name: 'English ivy' });
    assert.notEqual(changed.etag, read.etag);
    // The copy read before is stale now: a read with its version gets the plant again, a change with it is refused.
    assert.deepEqual(await getPlant(dave, 70_003, { ifNoneMatch: read.etag }), changed);
    const stale = await updatePlant(dave, 70_003, { tag: 'climber' }, { ifMatch: read.etag }).catch((e: unknown) => e);
    assert.ok(stale instanceof PlantStoreError && stale.status === 412 && stale.body.error === 41202, String(stale));
    assert.deepEqual((await getPlant(dave, 70_003)).plant, changed.plant, 'a refused change changes nothing');
    // Without ifMatch the last writer wins; the same change again answers the plant as it is.
    assert.deepEqual((await updatePlant(dave, 70_003, { tag: 'climber' })).plant, { id: 70_003, name: 'English ivy', tag: 'climber' });
    assert.deepEqual((await updatePlant(dave, 70_003, { tag: 'climber' })).plant, { id: 70_003, name: 'English ivy', tag: 'climber' });

    const carol = client(tokens.carol);
    const unseen = await getPlant(carol, 70_003).catch((e: unknown) => e);
    assert.ok(unseen instanceof PlantStoreError && unseen.status === 404, String(unseen));
    await sharePlant(dave, 70_003, { user: 'carol' }, true);
    assert.equal((await getPlant(carol, 70_003)).plant.name, 'English ivy', 'a grantee reads it');
    const notOwner = await updatePlant(carol, 70_003, { name: 'Mine now' }).catch((e: unknown) => e);
    assert.ok(notOwner instanceof PlantStoreError && notOwner.status === 403 && notOwner.body.error === 40301, String(notOwner));
    const refused = await updatePlant(dave, 70_003, { name: '' }).catch((e: unknown) => e);
    assert.ok(refused instanceof PlantStoreError && refused.status === 400, String(refused));
    // A delete at a stale version is refused as a change is, and one at the current version deletes.
    const staleDelete = await deletePlant(dave, 70_003, { ifMatch: read.etag }).catch((e: unknown) => e);
    assert.ok(
      staleDelete instanceof PlantStoreError && staleDelete.status === 412 && staleDelete.body.error === 41202,
      String(staleDelete),
    );
    await deletePlant(dave, 70_003, { ifMatch: (await getPlant(dave, 70_003)).etag });
    const gone = await getPlant(dave, 70_003).catch((e: unknown) => e);
    assert.ok(gone instanceof PlantStoreError && gone.status === 404, String(gone));
  });

  it('listAllPlants walks a larger catalogue without gap or repeat', async () => {
    const big = await backend.open();
    const names = Array.from({ length: 250 }, (_, i) => `plant ${String(i).padStart(3, '0')}`);
    const { tokens: own } = await seed(big, {
      users: [{ name: 'erin' }, { name: 'frank' }],
      plants: names.map((name, i) => ({ name, owner: i % 3 === 0 ? 'erin' : 'frank', public: i % 5 === 0 })),
    });
    const bigServer = await startApp(big);
    try {
      const urls: string[] = [];
      const seen: string[] = [];
      const erin = createPlantStoreClient({ baseUrl: bigServer.url, token: own.erin!, fetch: recordingFetch(urls) });
      for await (const plant of listAllPlants(erin, { pageSize: 16 })) seen.push(plant.name);
      assert.deepEqual(
        seen,
        names.filter((_, i) => i % 3 === 0 || i % 5 === 0),
      );
      assert.ok(urls.length >= Math.ceil(seen.length / 16), `${urls.length} pages`);
    } finally {
      await bigServer.close();
      await big.close();
    }
  });

  it('listAllPlants throws PlantStoreError with the typed body when a later page is refused', async () => {
    const { token, id } = await mintToken(store, 'carol');
    const pages = listAllPlants(client(token), { pageSize: 2 });
    assert.deepEqual((await pages.next()).value, CAROL_SEES[0]);
    assert.deepEqual((await pages.next()).value, CAROL_SEES[1]);
    // Access is checked again on every page: revoking the token stops the walk.
    await store.tokens.revoke(id);
    await assert.rejects(pages.next(), (err: unknown) => {
      assert.ok(err instanceof PlantStoreError);
      assert.equal(err.status, 401);
      assert.equal(err.body.error, 40104);
      return true;
    });
  });

  it('listAllPlants refuses a page size the paging cannot serve', async () => {
    for (const pageSize of [0, -1, 1.5, 1001]) {
      await assert.rejects(listAllPlants(client(tokens.carol), { pageSize }).next(), RangeError, `pageSize=${pageSize}`);
    }
  });
});

describe('nextPageQuery', () => {
  it('reads the rel="next" target of an RFC 8288 Link header', () => {
    assert.deepEqual(nextPageQuery('</plants?limit=7&cursor=abc_-9>; rel="next"'), { limit: 7, cursor: 'abc_-9' });
    assert.deepEqual(nextPageQuery('</plants?limit=7&cursor=x>;rel=next'), { limit: 7, cursor: 'x' });
    assert.deepEqual(nextPageQuery('</plants?limit=1>; rel="prev", </plants?limit=2&cursor=y>; title="more"; rel="item next"'), {
      limit: 2,
      cursor: 'y',
    });
  });

  it("carries the listing's tag and fields on to the next page", () => {
    assert.deepEqual(nextPageQuery('</plants?limit=2&cursor=c1&tag=house%20plant&fields=id,name,tag>; rel="next"'), {
      limit: 2,
      cursor: 'c1',
      tag: 'house plant',
      fields: 'id,name,tag',
    });
    assert.deepEqual(nextPageQuery('</plants?fields=id%2Cname%2Ctag&tag=herb&cursor=c2&limit=3>; rel="next"'), {
      limit: 3,
      cursor: 'c2',
      tag: 'herb',
      fields: 'id,name,tag',
    });
    assert.throws(() => nextPageQuery('</plants?limit=2&cursor=c&fields=name>; rel="next"'), /unexpected fields/);
  });

  it('is undefined on the last page', () => {
    assert.equal(nextPageQuery(null), undefined);
    assert.equal(nextPageQuery(''), undefined);
    assert.equal(nextPageQuery('</plants?limit=1>; rel="prev"'), undefined);
  });

  it('refuses a next link that leaves the plants collection', () => {
    assert.throws(() => nextPageQuery('</users?cursor=a>; rel="next"'), /unexpected Link/);
  });
});
