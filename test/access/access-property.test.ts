import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import fc from 'fast-check';
import { CONTROL_CHARACTERS } from '../../src/catalogue/names.js';
import type { Plant } from '../../src/http/schemas.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { analyze, lowerGroupBounds, plainSql } from '../helpers/plain-sql.js';
import { assertError, settleChangeFeed } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends, type Backend } from '../helpers/backends.js';
import { bearer, rawRequest, seed, startApp } from '../helpers/http-app.js';
import { AUDIENCE, ISSUER, mintJwt, SECRET, secretKey } from '../helpers/jwt.js';

// Property: for random users, groups, memberships, plants and grants, GET /plants over a real socket
// returns exactly what a plain in-test oracle of the access rule says, in catalogue order, each plant once,
// and `limit=k` returns exactly the first k plants of that listing. With JWTs, the groups claim adds
// memberships for the request, and the oracle counts them exactly like stored ones. Writes over HTTP by random
// users on random plants (or a missing id) answer what the rule says: creates; deletes; and sharing, as the whole
// access replaced (public or private, a random set of users and groups) and one user or group shared or unshared;
// and changes of a plant's name, tag or both (PATCH, with or without If-Match). The owner or an admin may delete,
// share or change, one who only sees the plant gets 403, anyone else 404, and the plant is refused before any name
// or version is looked at; then unknown names in a path get 404, in a body 422, and change nothing, and an If-Match
// of a version the plant is no longer at gets 412 with the current ETag. Reads of one plant (GET /plants/{id}, with
// or without If-None-Match) answer exactly the oracle's id, name and tag to one who sees it, 404 to anyone else.
// After each write every user's listing, streamed and as a cached page, still equals the oracle (a changed plant
// with its new name and tag at its old place, to exactly those who see it), every user reads a changed plant as
// the oracle has it, and the owner reads the access of the plant it named (names sorted, at the version the change
// answered) as the oracle's world has it; at the end, of every plant.

const MAX_USERS = 4;
const MAX_GROUPS = 3;
const INT32_MAX = 2_147_483_647;
const NUM_RUNS = 100;

interface Scenario {
  /** Users u0, u1, …; `groups` are indexes of the groups they belong to (those >= groupCount are dropped). */
  users: Array<{ admin: boolean; groups: number[] }>;
  /** Groups g0, g1, … */
  groupCount: number;
  /** In catalogue order. `owner` is taken modulo the user count; grantee indexes out of range are dropped. */
  plants: Array<{ name: string; tag: string | null; owner: number; public: boolean; users: number[]; groups: number[] }>;
  /** Per user: two limits, each a percentage of (visible count + 1), or -1 for the int32 maximum. */
  limits: Array<[number, number]>;
  /** Per user, the groups a JWT's groups claim names; index MAX_GROUPS (or >= groupCount) is a group not stored. */
  claims: number[][];
  /** Groups ranged past 3 plants or 2 members (see lowerGroupBounds), so that both ways of reading them are checked. */
  lowGroupBounds: boolean;
  /**
   * Plain SQL rewrites every other plant's row unchanged and gathers statistics before the reads: plants' rows then
   * lie out of catalogue order, and the planner weighs the tables as they are.
   */
  rewrittenAndAnalyzed: boolean;
}

/** Plain SQL on `db`: every other plant's row written again unchanged, then the tables' statistics gathered. */
async function rewriteAndAnalyze(db: string, store: Store): Promise<void> {
  await plainSql(db, 'UPDATE plants SET name = name WHERE id % 2 = 0');
  await analyze(db);
  await settleChangeFeed(store);
}

/** A fresh database of `backend` for scenario `s`. */
async function openFor(backend: Backend, s: Scenario): Promise<{ store: Store; db: string }> {
  const db = await backend.freshDb();
  const store = await openStore({ db });
  if (s.lowGroupBounds) await lowerGroupBounds(db);
  return { store, db };
}

// Short text with odd characters mixed in; never empty, never NUL, never a lone surrogate (the store refuses those).
const text = fc
  .string({
    minLength: 1,
    maxLength: 6,
    unit: fc.oneof(
      fc.constantFrom('a', 'b', ' ', '"', '<', '🌱', '\u0001', 'é'),
      fc.string({ minLength: 1, maxLength: 1, unit: 'binary' }),
    ),
  })
  .filter((s) => !s.includes('\u0000') && s.isWellFormed());

/** The same, as a client may send it over HTTP: without control characters, which POST /plants refuses. */
const clientText = text.filter((s) => !CONTROL_CHARACTERS.test(s));

const weighted = (trueWeight: number, falseWeight: number) =>
  fc.oneof({ arbitrary: fc.constant(true), weight: trueWeight }, { arbitrary: fc.constant(false), weight: falseWeight });

const subsetOf = (n: number) => fc.subarray(Array.from({ length: n }, (_, i) => i));

const percent = fc.oneof({ arbitrary: fc.nat({ max: 100 }), weight: 9 }, { arbitrary: fc.constant(-1), weight: 1 });

const scenario: fc.Arbitrary<Scenario> = fc.record({
  users: fc.array(fc.record({ admin: weighted(1, 4), groups: subsetOf(MAX_GROUPS) }), { minLength: 1, maxLength: MAX_USERS }),
  groupCount: fc.oneof(fc.nat({ max: MAX_GROUPS }), fc.constant(MAX_GROUPS)),
  plants: fc.array(
    fc.record({
      name: text,
      tag: fc.option(text, { nil: null }),
      owner: fc.nat({ max: MAX_USERS - 1 }),
      // Public plants are visible to everyone and would mask the other branches, so keep them rarer.
      public: weighted(1, 4),
      users: fc.oneof(fc.constant<number[]>([]), subsetOf(MAX_USERS)),
      groups: subsetOf(MAX_GROUPS),
    }),
    { maxLength: 10 },
  ),
  limits: fc.array(fc.tuple(percent, percent), { minLength: MAX_USERS, maxLength: MAX_USERS }),
  claims: fc.array(subsetOf(MAX_GROUPS + 1), { minLength: MAX_USERS, maxLength: MAX_USERS }),
  lowGroupBounds: fc.boolean(),
  rewrittenAndAnalyzed: fc.boolean(),
});

/** A limit from a percentage of `visible + 1`, so 0, the exact count and one more all occur; -1 means int32 max. */
const limitFor = (pct: number, visible: number): number => (pct < 0 ? INT32_MAX : Math.round((pct / 100) * (visible + 1)));

/** The scenario with out-of-range indexes resolved, as names; `claims` are what each user's JWT would carry. */
function normalise(s: Scenario) {
  const userName = (u: number) => `u${u}`;
  const groupName = (g: number) => `g${g}`;
  const users = s.users.map((user, u) => ({
    name: userName(u),
    admin: user.admin,
    groups: user.groups.filter((g) => g < s.groupCount).map(groupName),
    claims: (s.claims[u] ?? []).map(groupName),
  }));
  const plants = s.plants.map((plant) => ({
    name: plant.name,
    tag: plant.tag,
    owner: userName(plant.owner % users.length),
    public: plant.public,
    users: plant.users.filter((u) => u < users.length).map(userName),
    groups: plant.groups.filter((g) => g < s.groupCount).map(groupName),
  }));
  const groups = Array.from({ length: s.groupCount }, (_, g) => ({
    name: groupName(g),
    members: users.filter((user) => user.groups.includes(groupName(g))).map((user) => user.name),
  }));
  return { users, groups, plants };
}

/**
 * The access rule, written plainly: an admin sees all; others see what they own, public, or shared with them
 * or a group of theirs; with a JWT, the groups its claim names are theirs too, and an admin is an ordinary user
 * (JWTs act as admins only with --jwt-admins allow).
 */
function oracle(world: ReturnType<typeof normalise>, user: string, viaJwt: boolean): Plant[] {
  const found = world.users.find((u) => u.name === user)!;
  const me = viaJwt ? { ...found, admin: false, groups: [...found.groups, ...found.claims] } : found;
  return world.plants.filter((plant) => sees(me, plant)).map(plantOf);
}

/** Whether `me` sees `plant` by the access rule. */
const sees = (me: { name: string; admin: boolean; groups: string[] }, plant: WorldPlant): boolean =>
  me.admin || plant.owner === me.name || plant.public || plant.users.includes(me.name) || plant.groups.some((g) => me.groups.includes(g));

/** A plant as the listing answers it: its tag left out when it has none. */
const plantOf = (plant: WorldPlant): Plant => (plant.tag === null ? { name: plant.name } : { name: plant.name, tag: plant.tag });

/** Writes the world's users, groups and plants through the Store interface, in catalogue order. */
function seedWorld(store: Store, world: ReturnType<typeof normalise>) {
  return seed(store, {
    users: world.users.map(({ name, admin }) => ({ name, admin })),
    groups: world.groups,
    plants: world.plants.map((plant) => ({
      name: plant.name,
      ...(plant.tag === null ? {} : { tag: plant.tag }),
      owner: plant.owner,
      public: plant.public,
      sharedWith: [...plant.users.map((user) => ({ user })), ...plant.groups.map((group) => ({ group }))],
    })),
  });
}

/**
 * Builds the scenario on a fresh database of `backend` through the Store interface, starts the real server
 * once, and for every user compares GET /plants (and, with `withLimits`, two limited listings) to the oracle.
 */
async function checkScenario(backend: Backend, s: Scenario, withLimits: boolean, viaJwt = false): Promise<void> {
  const world = normalise(s);
  const { store, db } = await openFor(backend, s);
  try {
    const { tokens } = await seedWorld(store, world);
    if (s.rewrittenAndAnalyzed) await rewriteAndAnalyze(db, store);
    const server = await startApp(
      store,
      viaJwt
        ? { config: { jwtIssuer: ISSUER, jwtAudience: AUDIENCE, jwtGroupsClaim: 'groups' }, env: { PLANTSTORE_JWT_SECRET: SECRET } }
        : {},
    );
    try {
      for (const [u, user] of world.users.entries()) {
        const expected = oracle(world, user.name, viaJwt);
        const token = viaJwt ? await mintJwt(secretKey(), { claims: { sub: user.name, groups: user.claims } }) : tokens[user.name]!;
        const full = await rawRequest(server.url, '/plants', bearer(token));
        assert.equal(full.status, 200, full.text);
        for (const plant of full.body as Array<Record<string, unknown>>) {
          if (Object.hasOwn(plant, 'tag')) assert.equal(typeof plant.tag, 'string', 'tag is absent or a string, never null');
        }
        assert.deepEqual(full.body, expected, `${user.name} (admin: ${user.admin})`);
        if (!withLimits) continue;
        for (const pct of s.limits[u]!) {
          const limit = limitFor(pct, expected.length);
          const limited = await rawRequest(server.url, `/plants?limit=${limit}`, bearer(token));
          assert.equal(limited.status, 200, limited.text);
          assert.deepEqual(limited.body, expected.slice(0, limit), `${user.name} (admin: ${user.admin}), limit ${limit}`);
          // The same limit of one tag's listing: the tag of a plant the user sees, or one nobody's plant has.
          const tag = expected.find((plant) => plant.tag !== undefined)?.tag ?? 'no such tag';
          const tagged = await rawRequest(server.url, `/plants?limit=${limit}&tag=${encodeURIComponent(tag)}`, bearer(token));
          assert.equal(tagged.status, 200, tagged.text);
          const expectedTagged = expected.filter((plant) => plant.tag === tag).slice(0, limit);
          assert.deepEqual(tagged.body, expectedTagged, `${user.name} (admin: ${user.admin}), tag ${JSON.stringify(tag)}, limit ${limit}`);
        }
      }
    } finally {
      await server.close();
    }
  } finally {
    await store.close();
  }
}

/**
 * A write over HTTP by user `by` (modulo the user count). `target` is a plant's index (modulo the plant count), or
 * a missing id when it is -1 or there is no plant. `replace` sends the whole access: the plant's current grants
 * (only the flag set) or the given users and groups (indexes out of range are dropped), plus, with `stray`, a name
 * of no user or group. `share` and `unshare` name the `name`-th user or group (modulo their count), or one that
 * does not exist when `name` is -1.
 */
type WriteOp =
  | { kind: 'create'; by: number; name: string; tag: string | null }
  | { kind: 'delete'; by: number; target: number }
  | {
      kind: 'replace';
      by: number;
      target: number;
      public: boolean;
      grants: 'kept' | { users: number[]; groups: number[] };
      stray: 'user' | 'group' | null;
    }
  | { kind: 'share' | 'unshare'; by: number; target: number; grantee: 'user' | 'group'; name: number }
  | {
      kind: 'change';
      by: number;
      target: number;
      /** The new name, or undefined to keep it. */
      name: string | undefined;
      /** The new tag, null to remove it, or undefined to keep it. */
      tag: string | null | undefined;
      /** If-Match: none, `*`, or an ETag this run was answered (see someEtag). */
      ifMatch: 'none' | 'any' | EtagChoice;
    }
  | { kind: 'read'; by: number; target: number; ifNoneMatch: 'none' | EtagChoice };

/**
 * An ETag this run was answered: the first or the last of the plant's (none when there was none), or the last of
 * another plant's.
 */
type EtagChoice = 'first' | 'last' | 'other';
const etagChoice = fc.constantFrom('first' as const, 'last' as const, 'other' as const);

const by = fc.nat({ max: MAX_USERS - 1 });
/** An existing plant or user or group mostly (modulo their count), -1 for one that does not exist. */
const someOrNone = fc.oneof({ arbitrary: fc.nat({ max: 99 }), weight: 4 }, { arbitrary: fc.constant(-1), weight: 1 });

const writeOps: fc.Arbitrary<WriteOp[]> = fc.array(
  fc.oneof(
    fc.record({ kind: fc.constant('create' as const), by, name: clientText, tag: fc.option(clientText, { nil: null }) }),
    fc.record({ kind: fc.constant('delete' as const), by, target: someOrNone }),
    fc.record({
      kind: fc.constant('replace' as const),
      by,
      target: someOrNone,
      public: fc.boolean(),
      // Shuffled, so that the answer's sorting is checked too.
      grants: fc.oneof(
        fc.constant('kept' as const),
        fc.record({
          users: fc.shuffledSubarray(Array.from({ length: MAX_USERS }, (_, i) => i)),
          groups: fc.shuffledSubarray(Array.from({ length: MAX_GROUPS }, (_, i) => i)),
        }),
      ),
      stray: fc.oneof(
        { arbitrary: fc.constant(null), weight: 3 },
        { arbitrary: fc.constantFrom('user' as const, 'group' as const), weight: 1 },
      ),
    }),
    fc.record({
      kind: fc.constantFrom('share' as const, 'unshare' as const),
      by,
      target: someOrNone,
      grantee: fc.constantFrom('user' as const, 'group' as const),
      name: someOrNone,
    }),
    {
      arbitrary: fc.record({
        kind: fc.constant('change' as const),
        by,
        target: someOrNone,
        name: fc.option(clientText, { nil: undefined }),
        tag: fc.option(fc.option(clientText, { nil: null }), { nil: undefined }),
        ifMatch: fc.oneof(fc.constantFrom('none' as const, 'any' as const), etagChoice),
      }),
      weight: 2,
    },
    fc.record({
      kind: fc.constant('read' as const),
      by,
      target: someOrNone,
      ifNoneMatch: fc.oneof(fc.constant('none' as const), etagChoice),
    }),
  ),
  { minLength: 4, maxLength: 12 },
);

type World = ReturnType<typeof normalise>;
type WorldPlant = World['plants'][number];

/**
 * Why the rule refuses `user` a change of `plant` (delete or sharing): 403 for one who sees it but neither owns it
 * nor is an admin, 404 for one who does not see it or no plant; undefined when the change is allowed.
 */
function refusal(world: World, user: string, plant: WorldPlant | undefined): { status: 403 | 404; code: number } | undefined {
  if (plant === undefined) return { status: 404, code: 40402 };
  const me = world.users.find((u) => u.name === user)!;
  if (me.admin || plant.owner === user) return undefined;
  return sees(me, plant) ? { status: 403, code: 40301 } : { status: 404, code: 40402 };
}

const byName = (names: readonly string[]): string[] => [...names].sort();

/** The access of `plant` as GET /plants/{id}/access answers it: names sorted. */
const accessOf = (plant: WorldPlant) => ({ public: plant.public, users: byName(plant.users), groups: byName(plant.groups) });

/** A name of no user, and of no group, in `world` (the next ones that would be made). */
const strayName = (world: World, what: 'user' | 'group') => (what === 'user' ? `u${world.users.length}` : `g${world.groups.length}`);

const JSON_BODY = { 'content-type': 'application/json' };
const MERGE_PATCH = { 'content-type': 'application/merge-patch+json' };

/**
 * Builds the scenario, then applies `ops` over HTTP one by one; after each, the status is what the rule says,
 * every user's GET /plants, streamed and as a cached page of 1000, equals the oracle of the world with the op
 * applied (created plants are the caller's, private, last in catalogue order; deleted ones are gone for everyone;
 * sharing changes who sees the plant; a changed plant keeps its place and its viewers), every user reads a plant
 * a change named as the oracle has it, and the owner of the plant it named reads its access as the world has it,
 * at the version the last change of it answered (at the end, every plant's). Each state of a plant (its id, name
 * and tag) is answered with one ETag, and no ETag with two states.
 */
async function checkWrites(backend: Backend, s: Scenario, ops: WriteOp[]): Promise<void> {
  const world = normalise(s);
  const { store, db } = await openFor(backend, s);
  try {
    const seeded = await seedWorld(store, world);
    if (s.rewrittenAndAnalyzed) await rewriteAndAnalyze(db, store);
    const ids: number[] = seeded.plants.map((p) => p.id);
    // The ETag the last change of a plant's access answered, by id: its owner's next read has the same one.
    const versions = new Map<number, string>();
    // Every state of a plant answered so far (its id, name and tag, as a key) with its ETag, both ways; and the
    // ETags answered for each plant id, in order, for an If-Match or If-None-Match to send.
    const etagOfState = new Map<string, string>();
    const stateOfEtag = new Map<string, string>();
    const etagsOf = new Map<number, string[]>();
    const stateKey = (id: number, plant: WorldPlant) => JSON.stringify([id, plant.name, plant.tag]);
    const answered = (id: number, plant: WorldPlant, etag: string | undefined, when: string) => {
      assert.match(String(etag), /^"[A-Za-z0-9_-]+"$/, `${when}: the ETag of plant ${id}`);
      const key = stateKey(id, plant);
      assert.equal(etagOfState.get(key) ?? etag, etag, `${when}: plant ${id} as ${key} was answered with another ETag before`);
      assert.equal(stateOfEtag.get(etag!) ?? key, key, `${when}: the ETag ${etag} was answered for ${stateOfEtag.get(etag!)} before`);
      etagOfState.set(key, etag!);
      stateOfEtag.set(etag!, key);
      const seen = etagsOf.get(id) ?? [];
      if (!seen.includes(etag!)) etagsOf.set(id, [...seen, etag!]);
    };
    const someEtag = (id: number, which: 'none' | EtagChoice): string | undefined => {
      if (which === 'other')
        return [...etagsOf]
          .filter(([of]) => of !== id)
          .at(-1)?.[1]
          .at(-1);
      return which === 'first' ? etagsOf.get(id)?.[0] : which === 'last' ? etagsOf.get(id)?.at(-1) : undefined;
    };
    const server = await startApp(store);
    /**
     * `reader` reads the plant with `id` (`plant` in the world, or none): exactly its id, name and tag when the
     * reader sees it, 304 instead when `ifNoneMatch` names its current version; 404 otherwise.
     */
    const checkRead = async (reader: string, id: number, plant: WorldPlant | undefined, when: string, ifNoneMatch?: string) => {
      const me = world.users.find((u) => u.name === reader)!;
      const headers = { ...bearer(seeded.tokens[reader]!), ...(ifNoneMatch === undefined ? {} : { 'if-none-match': ifNoneMatch }) };
      const res = await rawRequest(server.url, `/plants/${id}`, headers);
      const what = `${when}, plant ${id} read by ${reader}${ifNoneMatch === undefined ? '' : ` if none match ${ifNoneMatch}`}`;
      if (plant === undefined || !sees(me, plant)) {
        assertError(res, 404, 40402);
      } else if (ifNoneMatch !== undefined && stateOfEtag.get(ifNoneMatch) === stateKey(id, plant)) {
        assert.equal(res.status, 304, `${what}: ${res.status} ${res.text}`);
        assert.equal(res.headers.etag, ifNoneMatch, what);
      } else {
        assert.equal(res.status, 200, `${what}: ${res.text}`);
        assert.deepEqual(res.body, { id, ...plantOf(plant) }, what);
        answered(id, plant, res.headers.etag, what);
      }
    };
    /** The owner of the `p`-th plant reads its access as the world has it, at the version its last change answered. */
    const checkAccess = async (p: number, when: string) => {
      const [id, plant] = [ids[p]!, world.plants[p]!];
      const res = await rawRequest(server.url, `/plants/${id}/access`, bearer(seeded.tokens[plant.owner]!));
      assert.equal(res.status, 200, res.text);
      assert.deepEqual(res.body, accessOf(plant), `${when}, the access of plant ${id} as its owner ${plant.owner}`);
      const version = versions.get(id);
      if (version !== undefined) assert.equal(res.headers.etag, version, `${when}, the version of plant ${id}`);
    };
    try {
      // Each owner reads its plants first: the run starts with an ETag of every plant.
      for (const [p, plant] of world.plants.entries()) await checkRead(plant.owner, ids[p]!, plant, 'at the start');
      for (const [i, op] of ops.entries()) {
        const user = world.users[op.by % world.users.length]!.name;
        const auth = bearer(seeded.tokens[user]!);
        const what = `op ${i} (${JSON.stringify(op)} as ${user})`;
        // The id the op names; its plant's access is read back after it, unless it is gone.
        let id: number;
        if (op.kind === 'create') {
          id = 1_000_000 + i;
          const body = JSON.stringify(op.tag === null ? { id, name: op.name } : { id, name: op.name, tag: op.tag });
          const res = await rawRequest(server.url, '/plants', { ...auth, ...JSON_BODY }, 'POST', body);
          assert.equal(res.status, 200, res.text);
          world.plants.push({ name: op.name, tag: op.tag, owner: user, public: false, users: [], groups: [] });
          ids.push(id);
        } else {
          const index = op.target >= 0 && world.plants.length > 0 ? op.target % world.plants.length : -1;
          id = index < 0 ? 999_999 : ids[index]!;
          const plant = index < 0 ? undefined : world.plants[index];
          const refused = refusal(world, user, plant);
          if (op.kind === 'delete') {
            const res = await rawRequest(server.url, `/plants/${id}`, auth, 'DELETE');
            assert.equal(res.status, refused?.status ?? 204, `${what}: ${res.text}`);
            if (refused === undefined) {
              world.plants.splice(index, 1);
              ids.splice(index, 1);
            }
          } else if (op.kind === 'read') {
            await checkRead(user, id, plant, what, someEtag(id, op.ifNoneMatch));
          } else if (op.kind === 'change') {
            const ifMatch = op.ifMatch === 'any' ? '*' : someEtag(id, op.ifMatch);
            const headers = { ...auth, ...MERGE_PATCH, ...(ifMatch === undefined ? {} : { 'if-match': ifMatch }) };
            // JSON leaves out what the op keeps.
            const res = await rawRequest(server.url, `/plants/${id}`, headers, 'PATCH', JSON.stringify({ name: op.name, tag: op.tag }));
            if (refused !== undefined) {
              assertError(res, refused.status, refused.code);
            } else if (ifMatch !== undefined && ifMatch !== '*' && stateOfEtag.get(ifMatch) !== stateKey(id, plant!)) {
              assertError(res, 412, 41202);
              answered(id, plant!, res.headers.etag, what);
            } else {
              assert.equal(res.status, 200, `${what}: ${res.text}`);
              if (op.name !== undefined) plant!.name = op.name;
              if (op.tag !== undefined) plant!.tag = op.tag;
              assert.deepEqual(res.body, { id, ...plantOf(plant!) }, what);
              answered(id, plant!, res.headers.etag, what);
            }
            for (const reader of world.users) await checkRead(reader.name, id, plant, `after ${what}`);
          } else if (op.kind === 'replace') {
            const grants =
              op.grants === 'kept'
                ? { users: plant?.users ?? [], groups: plant?.groups ?? [] }
                : {
                    users: op.grants.users.filter((u) => u < world.users.length).map((u) => `u${u}`),
                    groups: op.grants.groups.filter((g) => g < world.groups.length).map((g) => `g${g}`),
                  };
            const stray = op.stray === null ? undefined : strayName(world, op.stray);
            const body = {
              public: op.public,
              users: op.stray === 'user' ? [...grants.users, stray] : grants.users,
              groups: op.stray === 'group' ? [...grants.groups, stray] : grants.groups,
            };
            const res = await rawRequest(server.url, `/plants/${id}/access`, { ...auth, ...JSON_BODY }, 'PUT', JSON.stringify(body));
            if (refused !== undefined) {
              assertError(res, refused.status, refused.code);
            } else if (stray !== undefined) {
              assert.equal(assertError(res, 422, 42201).message, `no ${op.stray} named "${stray}"`, what);
            } else {
              assert.equal(res.status, 200, `${what}: ${res.text}`);
              plant!.public = op.public;
              plant!.users = byName(grants.users);
              plant!.groups = byName(grants.groups);
              assert.deepEqual(res.body, accessOf(plant!), what);
              versions.set(id, res.headers.etag!);
            }
          } else {
            const names = op.grantee === 'user' ? world.users.map((u) => u.name) : world.groups.map((g) => g.name);
            const known = op.name >= 0 && names.length > 0;
            const name = known ? names[op.name % names.length]! : strayName(world, op.grantee);
            const method = op.kind === 'share' ? 'PUT' : 'DELETE';
            const res = await rawRequest(server.url, `/plants/${id}/access/${op.grantee}s/${name}`, auth, method);
            if (refused !== undefined) {
              assertError(res, refused.status, refused.code);
            } else if (!known) {
              const unknown = assertError(res, 404, op.grantee === 'user' ? 40403 : 40404);
              assert.equal(unknown.message, `no ${op.grantee} named "${name}"`, what);
            } else {
              assert.equal(res.status, 204, `${what}: ${res.text}`);
              const list = op.grantee === 'user' ? 'users' : 'groups';
              plant![list] = byName(op.kind === 'share' ? [...new Set([...plant![list], name])] : plant![list].filter((n) => n !== name));
              versions.set(id, res.headers.etag!);
            }
          }
        }
        for (const reader of world.users) {
          const expected = oracle(world, reader.name, false);
          const res = await rawRequest(server.url, '/plants', bearer(seeded.tokens[reader.name]!));
          assert.deepEqual(res.body, expected, `after ${what}, as ${reader.name}`);
          // The reads after the op before cached this page: one the op leaves stale shows here.
          const page = await rawRequest(server.url, '/plants?limit=1000', bearer(seeded.tokens[reader.name]!));
          assert.deepEqual(page.body, expected, `after ${what}, as ${reader.name}, the page of 1000`);
        }
        if (ids.includes(id)) await checkAccess(ids.indexOf(id), `after ${what}`);
      }
      // A change that reached another plant shows here, unless a later change of that plant hid it.
      for (const p of world.plants.keys()) await checkAccess(p, 'at the end');
    } finally {
      await server.close();
    }
  } finally {
    await store.close();
  }
}

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`access rule property [${backend.name}]`, { skip: backend.skip }, () => {
    it('GET /plants (no limit) equals the oracle for every user', { timeout: 300_000 }, async () => {
      await fc.assert(
        fc.asyncProperty(scenario, (s) => checkScenario(backend, s, false)),
        { numRuns: NUM_RUNS },
      );
    });

    it('GET /plants?limit=k equals the first k plants of the oracle for every user', { timeout: 300_000 }, async () => {
      await fc.assert(
        fc.asyncProperty(scenario, (s) => checkScenario(backend, s, true)),
        { numRuns: NUM_RUNS },
      );
    });

    it('with JWTs, the groups claim counts exactly like stored memberships, with and without limit', { timeout: 300_000 }, async () => {
      await fc.assert(
        fc.asyncProperty(scenario, (s) => checkScenario(backend, s, true, true)),
        { numRuns: NUM_RUNS / 2 },
      );
    });

    it(
      'creates, deletes, sharing, changes and reads of one plant over HTTP answer as the rule says, and keep every listing and access equal to the oracle',
      { timeout: 300_000 },
      async () => {
        await fc.assert(
          fc.asyncProperty(scenario, writeOps, (s, ops) => checkWrites(backend, s, ops)),
          { numRuns: NUM_RUNS / 2 },
        );
      },
    );

    it('a user in more groups than SQLite reads as branches of their own sees what the oracle says, with and without limit', async () => {
      // 20 groups: past SQLITE_GROUP_BRANCHES, SQLite joins the groups in one branch (see listing-sql.ts).
      const groupCount = 20;
      const all = Array.from({ length: groupCount }, (_, g) => g);
      const many: Scenario = {
        users: [
          { admin: false, groups: all },
          { admin: false, groups: all.filter((g) => g % 2 === 0) },
        ],
        groupCount,
        plants: Array.from({ length: 40 }, (_, i) => ({
          name: `p${i}`,
          tag: i % 3 === 0 ? null : 't',
          owner: 1,
          public: false,
          users: [],
          groups: i % 4 === 3 ? [] : [i % groupCount, (i * 7) % groupCount],
        })),
        limits: [
          [10, 50],
          [30, -1],
        ],
        claims: [[], []],
        lowGroupBounds: false,
        rewrittenAndAnalyzed: false,
      };
      await checkScenario(backend, many, true);
      await checkScenario(backend, { ...many, users: [{ admin: false, groups: [] }, many.users[1]!], claims: [all, []] }, true, true);
      // Stored memberships of that many ranged groups, read group by group as claimed ones are.
      await checkScenario(backend, { ...many, lowGroupBounds: true }, true);
      await checkScenario(backend, { ...many, rewrittenAndAnalyzed: true }, true);
    });

    it("a change by the owner keeps the operator's name with control characters, as it keeps every field it leaves out", async () => {
      // The operator may give a plant control characters (plants add, an import); a client sends none, and the
      // fields a merge patch leaves out are not sent.
      const seeded: Scenario = {
        users: [{ admin: false, groups: [] }],
        groupCount: 0,
        plants: [{ name: 'a\u0001b', tag: null, owner: 0, public: false, users: [], groups: [] }],
        limits: [[0, 0]],
        claims: [[]],
        lowGroupBounds: false,
        rewrittenAndAnalyzed: false,
      };
      await checkWrites(backend, seeded, [
        { kind: 'change', by: 0, target: 0, name: undefined, tag: 'x', ifMatch: 'none' },
        { kind: 'change', by: 0, target: 0, name: undefined, tag: undefined, ifMatch: 'last' },
        { kind: 'read', by: 0, target: 0, ifNoneMatch: 'last' },
      ]);
    });

    it("regression: a plant shared with two of the user's groups does not hide the next plant under a limit", async () => {
      // u0 is in g0 and g1; plant A is shared with both groups, plant B with g0 only; u1 owns both.
      await checkScenario(
        backend,
        {
          users: [
            { admin: false, groups: [0, 1] },
            { admin: false, groups: [] },
          ],
          groupCount: 2,
          plants: [
            { name: 'A', tag: null, owner: 1, public: false, users: [], groups: [0, 1] },
            { name: 'B', tag: null, owner: 1, public: false, users: [], groups: [0] },
          ],
          limits: [
            [67, 100], // limits 2 and 3 for u0, who sees 2 plants
            [0, -1],
          ],
          claims: [[], []],
          lowGroupBounds: false,
          rewrittenAndAnalyzed: false,
        },
        true,
      );
    });
  });
}
