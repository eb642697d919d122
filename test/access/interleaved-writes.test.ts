import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import fc from 'fast-check';
import pg from 'pg';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { openStore } from '../../src/store/open-store.js';
import { lowerGroupBounds } from '../helpers/plain-sql.js';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends, type Backend } from '../helpers/backends.js';
import { bearer, mintToken, rawRequest, startApp, type RawResponse, type RunningApp, addPlant, removePlant } from '../helpers/http-app.js';
import { PG_URL } from '../helpers/postgres.js';

// Property: with caching on, two servers on connections of their own (as two processes would be) answer
// GET /plants exactly as a plain oracle of the access rule says, while random writes arrive from another
// connection through the Store and from plain SQL. On SQLite every read that starts a millisecond after a write
// returned (the read snapshot is reused for at most that long) must already show it; on PostgreSQL every instance must show it within one second, and until then show either the state
// before the write or after it, never anything else (no plant that was never visible, none from a rolled-back
// view). Admins, owners, public plants, user grants, group grants and memberships all change under the caches;
// the sharing writes also arrive over HTTP, from the plant's owner or an admin, at either server, and answer 2xx.
// A plant's name and tag change too, by PATCH at either server (its owner or an admin) or by plain SQL naming its
// public id: every listing shows the plant with its new name and tag at its old place, to exactly its viewers.

const USERS = ['u0', 'u1', 'u2', 'u3'] as const;
const GROUPS = ['g0', 'g1'] as const;
/** How long after a write returns it may still be unseen: SQLite reuses a read snapshot for at most 1 ms. */
const BOUND_MS: Record<string, number> = { sqlite: 0, postgres: 1_000 };
const SNAPSHOT_MS = 2;

/**
 * A sharing write sent over HTTP instead, to the `server`-th server, by the `admin`-th admin (modulo their count)
 * when `admin` is set and there is one, else by the plant's owner.
 */
type Http = { server: number; admin: number | null } | null;

type Op =
  | { kind: 'add'; owner: number; public: boolean; viaSql: boolean }
  | { kind: 'remove'; plant: number; viaSql: boolean }
  | { kind: 'publish'; plant: number; public: boolean; http: Http }
  | { kind: 'rename'; plant: number }
  | { kind: 'change'; plant: number; name: boolean; tag: 'set' | 'remove' | 'kept'; http: Http }
  | { kind: 'grant' | 'ungrant'; plant: number; user: number; viaSql: boolean; http: Http }
  | { kind: 'grantGroup' | 'ungrantGroup'; plant: number; group: number; http: Http }
  | { kind: 'join' | 'leave'; user: number; group: number; viaSql: boolean }
  | { kind: 'admin'; user: number; admin: boolean };

const index = (n: number) => fc.nat({ max: n - 1 });
const http: fc.Arbitrary<Http> = fc.oneof(
  fc.constant(null),
  fc.record({ server: index(2), admin: fc.option(index(USERS.length), { nil: null }) }),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant('add' as const), owner: index(USERS.length), public: fc.boolean(), viaSql: fc.boolean() }),
  fc.record({ kind: fc.constant('remove' as const), plant: index(8), viaSql: fc.boolean() }),
  fc.record({ kind: fc.constant('publish' as const), plant: index(8), public: fc.boolean(), http }),
  fc.record({ kind: fc.constant('rename' as const), plant: index(8) }),
  fc.record({
    kind: fc.constant('change' as const),
    plant: index(8),
    name: fc.boolean(),
    tag: fc.constantFrom('set' as const, 'remove' as const, 'kept' as const),
    http,
  }),
  fc.record({
    kind: fc.constantFrom('grant' as const, 'ungrant' as const),
    plant: index(8),
    user: index(USERS.length),
    viaSql: fc.boolean(),
    http,
  }),
  fc.record({
    kind: fc.constantFrom('grantGroup' as const, 'ungrantGroup' as const),
    plant: index(8),
    group: index(GROUPS.length),
    http,
  }),
  fc.record({
    kind: fc.constantFrom('join' as const, 'leave' as const),
    user: index(USERS.length),
    group: index(GROUPS.length),
    viaSql: fc.boolean(),
  }),
  fc.record({ kind: fc.constant('admin' as const), user: index(USERS.length), admin: fc.boolean() }),
);

interface ModelPlant {
  id: number;
  name: string;
  tag: string | null;
  owner: string;
  public: boolean;
  users: Set<string>;
  groups: Set<string>;
}

/** A plant as the oracle compares it: its name, and its tag after a `#` when it has one. */
const shown = (p: { name: string; tag?: string | null }): string =>
  p.tag === undefined || p.tag === null ? p.name : `${p.name} #${p.tag}`;

/** The catalogue as the oracle sees it. */
class Model {
  plants: ModelPlant[] = [];
  admins = new Set<string>();
  /** When each user's admin flag last changed (Date.now() after the write returned). */
  adminChanged = new Map<string, number>();
  members = new Map<string, Set<string>>(GROUPS.map((g) => [g, new Set<string>()]));

  visibleTo(user: string, admin = this.admins.has(user)): string[] {
    return this.plants
      .filter(
        (p) => admin || p.owner === user || p.public || p.users.has(user) || [...p.groups].some((g) => this.members.get(g)!.has(user)),
      )
      .map(shown);
  }

  snapshot(): Record<string, string[]> {
    return Object.fromEntries(USERS.map((u) => [u, this.visibleTo(u)]));
  }

  /**
   * What each user whose admin flag changed less than `boundMs` ago may still be shown: this state with the flag
   * as it was. A change of the flag that shows in no listing (an admin who sees what the user saw anyway) passes
   * the check of its own write, so it may still be on its way when a later write is checked.
   */
  withFlagsOnTheirWay(boundMs: number): Record<string, string[]> {
    const now = Date.now();
    return Object.fromEntries(
      USERS.map((u) => [
        u,
        now - (this.adminChanged.get(u) ?? -Infinity) < boundMs ? this.visibleTo(u, !this.admins.has(u)) : this.visibleTo(u),
      ]),
    );
  }
}

/** Plain SQL on a connection of its own, no Plant Store code (SQLite: foreign keys off, as `sqlite3` runs). */
interface PlainSql {
  run(sql: string, values: unknown[]): Promise<void>;
  close(): Promise<void>;
}

async function plainSql(backend: Backend, db: string): Promise<PlainSql> {
  if (backend.name === 'sqlite') {
    const conn = new BetterSqlite3(db);
    conn.pragma('busy_timeout = 5000');
    return {
      run: async (sql, values) => {
        conn.prepare(sql.replace(/\$(\d+)/g, '@p$1')).run(Object.fromEntries(values.map((v, i) => [`p${i + 1}`, v])));
      },
      close: async () => {
        conn.close();
      },
    };
  }
  const client = new pg.Client({ connectionString: PG_URL });
  await client.connect();
  await client.query(`SET search_path = ${new URL(db).searchParams.get('schema')}`);
  return {
    run: async (sql, values) => void (await client.query(sql, values)),
    close: () => client.end(),
  };
}

const userId = `(SELECT id FROM users WHERE name = $1)`;
const groupId = `(SELECT id FROM groups WHERE name = $1)`;

/** The two servers, every user's token, and the backend's bound, for the writes sent over HTTP. */
interface Web {
  servers: RunningApp[];
  tokens: Record<string, string>;
  boundMs: number;
}

/**
 * Sends a write of `plant` over HTTP as `via` says (`path` under /plants/{id}), and answers the 2xx reply: 200 to
 * a PUT of the whole access or a PATCH of the plant (with `body`), 204 to one grantee's. A server may still take
 * the caller's admin flag as it was until the bound after it changed (its token is cached), so a refusal of an
 * admin who is not the owner is retried until then; a refused change changes nothing.
 */
async function overHttp(
  via: NonNullable<Http>,
  model: Model,
  web: Web,
  plant: ModelPlant,
  method: 'PUT' | 'DELETE' | 'PATCH',
  path: string,
  body?: unknown,
): Promise<RawResponse> {
  const admins = [...model.admins].sort();
  const caller = via.admin !== null && admins.length > 0 ? admins[via.admin % admins.length]! : plant.owner;
  const headers = { ...bearer(web.tokens[caller]!), ...(body === undefined ? {} : { 'content-type': 'application/json' }) };
  const deadline = (model.adminChanged.get(caller) ?? -Infinity) + web.boundMs;
  for (;;) {
    const res = await rawRequest(
      web.servers[via.server]!.url,
      `/plants/${plant.id}${path}`,
      headers,
      method,
      body === undefined ? undefined : JSON.stringify(body),
    );
    if (res.status === (body === undefined ? 204 : 200)) return res;
    assert.ok(
      caller !== plant.owner && (res.status === 403 || res.status === 404) && Date.now() < deadline,
      `${method} /plants/${plant.id}${path} as ${caller} at server ${via.server}: ${res.status} ${res.text}`,
    );
    await new Promise((r) => setTimeout(r, 10));
  }
}

async function apply(o: Op, model: Model, writer: Store, sql: PlainSql, web: Web, serial: number): Promise<void> {
  const plant = 'plant' in o ? model.plants[o.plant % Math.max(1, model.plants.length)] : undefined;
  if ('plant' in o && plant === undefined) return;
  switch (o.kind) {
    case 'add': {
      const owner = USERS[o.owner]!;
      const name = `p${serial}`;
      let id: number;
      if (o.viaSql) {
        await sql.run(`INSERT INTO plants (name, owner_id, is_public, created_at) VALUES ($2, ${userId}, $3, 0)`, [
          owner,
          name,
          o.public ? 1 : 0,
        ]);
        id = Math.max(0, ...model.plants.map((p) => p.id)) + 1;
      } else {
        id = (await addPlant(writer, { name, owner, public: o.public })).id;
      }
      model.plants.push({ id, name, tag: null, owner, public: o.public, users: new Set(), groups: new Set() });
      // Ids are not reused, so the oracle's id is only a guess on plain SQL: read the real one back.
      if (o.viaSql) model.plants.at(-1)!.id = (await writer.plants.list({})).find((p) => p.name === name)!.id;
      return;
    }
    case 'remove':
      if (o.viaSql) await sql.run('DELETE FROM plants WHERE id = $1', [plant!.id]);
      else await removePlant(writer, plant!.id);
      model.plants = model.plants.filter((p) => p !== plant);
      return;
    case 'publish':
      if (o.http) {
        // The whole access is replaced: the plant's grants as they are, with the flag set.
        const access = { public: o.public, users: [...plant!.users].sort(), groups: [...plant!.groups].sort() };
        const res = await overHttp(o.http, model, web, plant!, 'PUT', '/access', access);
        assert.deepEqual(res.body, access);
      } else {
        await sql.run('UPDATE plants SET is_public = $2 WHERE id = $1', [plant!.id, o.public ? 1 : 0]);
      }
      plant!.public = o.public;
      return;
    case 'rename':
      plant!.name = `${plant!.name}'`;
      await sql.run('UPDATE plants SET name = $2 WHERE id = $1', [plant!.id, plant!.name]);
      return;
    case 'change': {
      const name = o.name ? `${plant!.name}*` : plant!.name;
      const tag = o.tag === 'set' ? `t${serial}` : o.tag === 'remove' ? null : plant!.tag;
      if (o.http) {
        // A merge patch: only what changes is sent.
        const patch = { ...(o.name ? { name } : {}), ...(o.tag === 'kept' ? {} : { tag }) };
        const res = await overHttp(o.http, model, web, plant!, 'PATCH', '', patch);
        assert.deepEqual(res.body, { id: plant!.id, name, ...(tag === null ? {} : { tag }) });
      } else {
        // As an operator would in psql or sqlite3: by the id the API shows.
        await sql.run('UPDATE plants SET name = $2, tag = $3 WHERE api_id = $1', [plant!.id, name, tag]);
      }
      plant!.name = name;
      plant!.tag = tag;
      return;
    }
    case 'grant':
    case 'ungrant': {
      const user = USERS[o.user]!;
      if (o.http) await overHttp(o.http, model, web, plant!, o.kind === 'grant' ? 'PUT' : 'DELETE', `/access/users/${user}`);
      else if (o.kind === 'grant' && o.viaSql)
        await sql.run(`INSERT INTO plant_user_grants (user_id, plant_id) VALUES (${userId}, $2) ON CONFLICT DO NOTHING`, [user, plant!.id]);
      else if (o.kind === 'grant') await writer.grants.add(plant!.id as PlantId, { user });
      else await sql.run(`DELETE FROM plant_user_grants WHERE user_id = ${userId} AND plant_id = $2`, [user, plant!.id]);
      if (o.kind === 'grant') plant!.users.add(user);
      else plant!.users.delete(user);
      return;
    }
    case 'grantGroup':
    case 'ungrantGroup': {
      const group = GROUPS[o.group]!;
      if (o.http) await overHttp(o.http, model, web, plant!, o.kind === 'grantGroup' ? 'PUT' : 'DELETE', `/access/groups/${group}`);
      else if (o.kind === 'grantGroup') await writer.grants.add(plant!.id as PlantId, { group });
      else await sql.run(`DELETE FROM plant_group_grants WHERE group_id = ${groupId} AND plant_id = $2`, [group, plant!.id]);
      if (o.kind === 'grantGroup') plant!.groups.add(group);
      else plant!.groups.delete(group);
      return;
    }
    case 'join':
    case 'leave': {
      const [user, group] = [USERS[o.user]!, GROUPS[o.group]!];
      const members = model.members.get(group)!;
      if (o.kind === 'join') {
        if (o.viaSql) {
          await sql.run(
            `INSERT INTO group_members (group_id, user_id) VALUES (${groupId}, (SELECT id FROM users WHERE name = $2)) ON CONFLICT DO NOTHING`,
            [group, user],
          );
        } else {
          await writer.groups.addMember(group, user);
        }
        members.add(user);
      } else {
        await sql.run(`DELETE FROM group_members WHERE group_id = ${groupId} AND user_id = (SELECT id FROM users WHERE name = $2)`, [
          group,
          user,
        ]);
        members.delete(user);
      }
      return;
    }
    case 'admin': {
      const user = USERS[o.user]!;
      await writer.users.setAdmin(user, o.admin);
      model.adminChanged.set(user, Date.now());
      if (o.admin) model.admins.add(user);
      else model.admins.delete(user);
      return;
    }
  }
}

/**
 * What every server answers each user now, in three forms: the page of up to 1000 plants (the form that is
 * cached), the streamed full listing (never cached) and the cached first page of 2, each given as the full list
 * it implies (the first page is compared with the first two of the others).
 */
type Forms = { page: string[]; streamed: string[]; first: string[] };

async function observe(servers: RunningApp[], tokens: Record<string, string>): Promise<Array<Record<string, Forms>>> {
  const names = async (server: RunningApp, user: string, query: string) => {
    const res = await rawRequest(server.url, `/plants${query}`, bearer(tokens[user]!));
    assert.equal(res.status, 200, res.text);
    const listed = (res.body as Array<{ name: string; tag?: string }>).map(shown);
    // A page that says more follow ends with a marker, so that the oracle checks the Link too.
    return res.headers.link === undefined ? listed : [...listed, MORE];
  };
  return Promise.all(
    servers.map(async (server) => {
      const seen: Record<string, Forms> = {};
      for (const user of USERS) {
        seen[user] = {
          page: await names(server, user, '?limit=1000'),
          streamed: await names(server, user, ''),
          first: await names(server, user, '?limit=2'),
        };
      }
      return seen;
    }),
  );
}

/** What a page's `Link: rel="next"` says, as the last of its names (no plant name starts with a space). */
const MORE = ' more follow';
const same = (a: readonly string[], b: readonly string[]) => JSON.stringify(a) === JSON.stringify(b);
/** Whether one form of an answer shows exactly this state (the first page of 2 with a Link when more follow). */
const shows = (forms: Forms, form: keyof Forms, state: readonly string[]) =>
  same(forms[form], form === 'first' ? [...state.slice(0, 2), ...(state.length > 2 ? [MORE] : [])] : state);

async function checkRun(backend: Backend, ops: Op[], lowGroupBounds = false): Promise<void> {
  const db = await backend.freshDb();
  const stores: Store[] = [];
  const open = async () => {
    const store = await openStore({ db });
    stores.push(store);
    return store;
  };
  const writer = await open();
  if (lowGroupBounds) await lowerGroupBounds(db);
  const servers: RunningApp[] = [];
  const sql = await plainSql(backend, db);
  try {
    const tokens: Record<string, string> = {};
    for (const user of USERS) {
      await writer.users.add(user, false);
      tokens[user] = (await mintToken(writer, user)).token;
    }
    for (const group of GROUPS) await writer.groups.add(group);
    servers.push(await startApp(await open()), await startApp(await open()));
    const model = new Model();
    let before = model.snapshot();
    for (const [serial, o] of ops.entries()) {
      // Warm every cache with the state before the write.
      await observe(servers, tokens);
      const beforeWithFlagsOnTheirWay = model.withFlagsOnTheirWay(BOUND_MS[backend.name]!);
      await apply(o, model, writer, sql, { servers, tokens, boundMs: BOUND_MS[backend.name]! }, serial);
      await new Promise((r) => setTimeout(r, SNAPSHOT_MS));
      const expected = model.snapshot();
      const flagsOnTheirWay = model.withFlagsOnTheirWay(BOUND_MS[backend.name]!);
      const deadline = Date.now() + BOUND_MS[backend.name]!;
      for (;;) {
        const seen = await observe(servers, tokens);
        let converged = true;
        for (const [i, answers] of seen.entries()) {
          for (const user of USERS) {
            // A stale cached page shows as a form that differs from the oracle. Within PostgreSQL's bound each
            // form may still show the state before the write: they are three requests, and the change can
            // arrive between them; a user's admin flag changed within the bound may still be the old one.
            // SQLite allows no bound: every form shows the write at once.
            for (const form of ['page', 'streamed', 'first'] as const) {
              const now = shows(answers[user]!, form, expected[user]!);
              converged &&= now;
              const withinBound =
                BOUND_MS[backend.name]! > 0 &&
                [before, flagsOnTheirWay, beforeWithFlagsOnTheirWay].some((state) => shows(answers[user]!, form, state[user]!));
              assert.ok(
                now || withinBound,
                `server ${i}, ${user}, ${form} after ${JSON.stringify(o)}: saw ${JSON.stringify(answers[user]![form])}, expected ${JSON.stringify(expected[user])}`,
              );
            }
          }
        }
        if (converged) break;
        assert.ok(Date.now() < deadline, `not every server shows ${JSON.stringify(o)} within ${BOUND_MS[backend.name]} ms`);
        await new Promise((r) => setTimeout(r, 10));
      }
      before = expected;
    }
  } finally {
    for (const server of servers) await server.close();
    await sql.close();
    for (const store of stores) await store.close();
  }
}

/**
 * Every kind of write, and each sharing write and change of a plant over HTTP, by the owner and by an admin (the
 * first right after the caller becomes one), in an order where each one changes what some cached page must show.
 */
const EVERY_KIND: Op[] = [
  { kind: 'add', owner: 1, public: false, viaSql: false },
  { kind: 'join', user: 0, group: 0, viaSql: false },
  { kind: 'grantGroup', plant: 0, group: 0, http: null },
  { kind: 'leave', user: 0, group: 0, viaSql: true },
  { kind: 'join', user: 0, group: 0, viaSql: true },
  { kind: 'ungrantGroup', plant: 0, group: 0, http: null },
  { kind: 'grant', plant: 0, user: 2, viaSql: true, http: null },
  { kind: 'rename', plant: 0 },
  { kind: 'change', plant: 0, name: true, tag: 'set', http: null },
  { kind: 'ungrant', plant: 0, user: 2, viaSql: false, http: null },
  { kind: 'publish', plant: 0, public: true, http: null },
  { kind: 'publish', plant: 0, public: false, http: null },
  { kind: 'grantGroup', plant: 0, group: 0, http: { server: 0, admin: null } },
  { kind: 'change', plant: 0, name: true, tag: 'kept', http: { server: 1, admin: null } },
  { kind: 'change', plant: 0, name: false, tag: 'set', http: null },
  { kind: 'ungrantGroup', plant: 0, group: 0, http: { server: 1, admin: null } },
  { kind: 'grant', plant: 0, user: 2, viaSql: false, http: { server: 1, admin: null } },
  { kind: 'ungrant', plant: 0, user: 2, viaSql: false, http: { server: 0, admin: null } },
  { kind: 'publish', plant: 0, public: true, http: { server: 0, admin: null } },
  { kind: 'publish', plant: 0, public: false, http: { server: 1, admin: null } },
  { kind: 'admin', user: 3, admin: true },
  { kind: 'grant', plant: 0, user: 2, viaSql: false, http: { server: 1, admin: 0 } },
  { kind: 'change', plant: 0, name: false, tag: 'set', http: { server: 0, admin: 0 } },
  { kind: 'publish', plant: 0, public: true, http: { server: 0, admin: 0 } },
  { kind: 'change', plant: 0, name: true, tag: 'remove', http: { server: 1, admin: 0 } },
  { kind: 'change', plant: 0, name: true, tag: 'set', http: null },
  { kind: 'publish', plant: 0, public: false, http: { server: 1, admin: 0 } },
  { kind: 'ungrant', plant: 0, user: 2, viaSql: false, http: { server: 0, admin: 0 } },
  { kind: 'add', owner: 2, public: true, viaSql: true },
  { kind: 'grant', plant: 0, user: 0, viaSql: false, http: null },
  { kind: 'remove', plant: 0, viaSql: true },
  { kind: 'admin', user: 3, admin: false },
  { kind: 'remove', plant: 0, viaSql: false },
];

after(() => cleanupBackends());

for (const backend of BACKENDS) {
  describe(`access rule under interleaved writes, caches on [${backend.name}]`, { skip: backend.skip }, () => {
    it('every read equals the oracle (SQLite) or converges to it within the bound (PostgreSQL)', { timeout: 600_000 }, async () => {
      await fc.assert(
        fc.asyncProperty(fc.array(op, { minLength: 1, maxLength: 17 }), fc.boolean(), (ops, lowGroupBounds) =>
          checkRun(backend, ops, lowGroupBounds),
        ),
        {
          numRuns: backend.name === 'sqlite' ? 60 : 25,
          examples: [
            [EVERY_KIND, false],
            [EVERY_KIND, true],
          ],
        },
      );
    });
  });
}
