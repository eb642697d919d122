import { request } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { prng } from '../../bench/catalogue.js';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { DomainError } from '../../src/catalogue/errors.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { holdFor } from './held-transaction.js';
import { bearer, mintToken, rawRequest, startApp, type RunningApp } from './http-app.js';
import { DERIVED_DIFFERENCE, lowerGroupBounds, plainQuery } from './plain-sql.js';
import { runCli } from './processes.js';

/**
 * A concurrency checker for the access rule: many sessions at once change who sees what, and at quiescence every
 * user's listing on every instance must equal an oracle computed from the base tables alone.
 *
 * Sessions: HTTP on two instances (owners and admins share and unshare with users and groups, make plants public
 * or private, create and delete plants), the store the CLI uses (memberships, admin flags, token revocations, group
 * removals), CLI processes, plain SQL sessions that hold their transaction open for a while (memberships and group
 * shares, as psql or sqlite3 would), and slow full listings streaming meanwhile. No answer may be a 5xx; at the end,
 * after the freshness bound, every listing equals the oracle, every revoked token is refused, and the derived member
 * grants are exactly the pairs of memberships and group shares.
 */

export interface CheckerOptions {
  /** A fresh `--db` value. */
  db: string;
  /** How long the sessions run. */
  durationMs: number;
  /** Seeds the random choices, so that a failure can be run again. */
  seed: number;
  /** Lower the bounds past which groups are ranged (see lowerGroupBounds), so that groups move between both kinds. */
  lowGroupBounds?: boolean;
  /** CLI processes run, one after another, in each round. */
  cliRuns?: number;
  /** Rounds the run is cut into, each ending in a check at quiescence (3 by default). */
  rounds?: number;
}

export interface CheckerReport {
  operations: number;
  /** Answers of 5xx, and transport errors of anything but a listing ended on purpose. */
  failures: string[];
  /** Per instance and user, where the listing differs from the oracle. */
  mismatches: string[];
}

const USERS = ['u0', 'u1', 'u2', 'u3', 'u4', 'u5'];
const GROUPS = ['g0', 'g1', 'g2'];
/** Every instance shows a change committed by any writer within this bound (docs/deployment.md). */
const FRESHNESS_MS = 1_100;

interface Row {
  [column: string]: unknown;
}

/** What each user may see, from the base tables only (the access rule of catalogue/access-rule.ts, by hand). */
async function oracle(db: string): Promise<Map<string, string[]>> {
  const users = await plainQuery<Row>(db, 'SELECT id, name, is_admin FROM users');
  const plants = await plainQuery<Row>(db, 'SELECT id, name, owner_id, is_public FROM plants ORDER BY id');
  const userGrants = await plainQuery<Row>(db, 'SELECT plant_id, user_id FROM plant_user_grants');
  const groupGrants = await plainQuery<Row>(db, 'SELECT plant_id, group_id FROM plant_group_grants');
  const members = await plainQuery<Row>(db, 'SELECT group_id, user_id FROM group_members');
  const key = (a: unknown, b: unknown) => `${Number(a)} ${Number(b)}`;
  const sharedWithUser = new Set(userGrants.map((g) => key(g.plant_id, g.user_id)));
  const groupsOf = new Map<number, number[]>();
  for (const m of members) groupsOf.set(Number(m.user_id), [...(groupsOf.get(Number(m.user_id)) ?? []), Number(m.group_id)]);
  const sharedWithGroup = new Set(groupGrants.map((g) => key(g.plant_id, g.group_id)));
  const visible = new Map<string, string[]>();
  for (const user of users) {
    const id = Number(user.id);
    const sees = plants.filter(
      (p) =>
        Number(user.is_admin) === 1 ||
        Number(p.owner_id) === id ||
        Number(p.is_public) === 1 ||
        sharedWithUser.has(key(p.id, id)) ||
        (groupsOf.get(id) ?? []).some((g) => sharedWithGroup.has(key(p.id, g))),
    );
    visible.set(
      String(user.name),
      sees.map((p) => String(p.name)),
    );
  }
  return visible;
}

/** A full listing read slowly (paused between reads); ends however the server ends it. */
function slowListing(url: string, token: string, failures: string[]): Promise<void> {
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const req = request({ hostname, port, path: '/plants', headers: bearer(token), agent: false }, (res) => {
      if ((res.statusCode ?? 0) >= 500) failures.push(`slow listing answered ${res.statusCode}`);
      res.on('data', () => {
        res.pause();
        setTimeout(() => res.resume(), 5);
      });
      res.on('end', resolve);
      res.on('error', () => resolve());
      res.on('aborted', () => resolve());
    });
    req.on('error', () => resolve());
    req.end();
  });
}

export async function runConcurrencyChecker(options: CheckerOptions): Promise<CheckerReport> {
  const { db, durationMs } = options;
  const rnd = prng(options.seed);
  const pick = <T>(list: readonly T[]): T => list[Math.floor(rnd() * list.length)]!;
  const stores: Store[] = [await openStore({ db }), await openStore({ db })];
  if (options.lowGroupBounds) await lowerGroupBounds(db);
  const servers: RunningApp[] = [];
  const failures: string[] = [];
  let operations = 0;
  const revoked: string[] = [];
  try {
    const [store] = stores as [Store];
    for (const user of USERS) await store.users.add(user, user === 'u0');
    for (const group of GROUPS) await store.groups.add(group);
    for (const server of stores) servers.push(await startApp(server, { captureLogs: true, logLevel: 'error', logRequests: false }));
    const tokens = new Map<string, { token: string; id: number }>();
    for (const user of USERS) tokens.set(user, await mintToken(store, user));
    const plants: Array<{ id: PlantId; owner: string }> = [];
    let nextId = 1000;
    let nextName = 0;
    for (let i = 0; i < 12; i++) {
      const owner = pick(USERS);
      const { id } = await store.plants.create(OPERATOR, { id: nextId++, name: `plant${nextName++}`, owner, public: rnd() < 0.2 });
      plants.push({ id, owner });
    }
    let until = 0;
    const running = () => performance.now() < until;
    const answered = (what: string, status: number) => {
      operations++;
      if (status >= 500) failures.push(`${what} answered ${status}`);
    };
    const viaHttp = async () => {
      while (running()) {
        const server = pick(servers);
        const plant = plants.length > 0 ? pick(plants) : undefined;
        const actor = plant !== undefined && rnd() < 0.7 ? plant.owner : pick(USERS);
        const token = tokens.get(actor)!.token;
        const choice = rnd();
        let what: string;
        let res;
        if (choice < 0.15 || plant === undefined) {
          const id = nextId++;
          what = `POST /plants ${id}`;
          res = await rawRequest(
            server.url,
            '/plants',
            { ...bearer(token), 'content-type': 'application/json' },
            'POST',
            JSON.stringify({ id, name: `plant${nextName++}` }),
          );
          if (res.status === 200) plants.push({ id: id as PlantId, owner: actor });
        } else if (choice < 0.25) {
          what = `DELETE /plants/${plant.id}`;
          res = await rawRequest(server.url, `/plants/${plant.id}`, bearer(token), 'DELETE');
        } else if (choice < 0.35) {
          what = `PUT /plants/${plant.id}/access`;
          const body = { public: rnd() < 0.3, users: USERS.filter(() => rnd() < 0.3), groups: GROUPS.filter(() => rnd() < 0.4) };
          res = await rawRequest(
            server.url,
            `/plants/${plant.id}/access`,
            { ...bearer(token), 'content-type': 'application/json' },
            'PUT',
            JSON.stringify(body),
          );
        } else {
          const path = rnd() < 0.25 ? `users/${pick(USERS)}` : `groups/${pick(GROUPS)}`;
          const method = rnd() < 0.6 ? 'PUT' : 'DELETE';
          what = `${method} /plants/${plant.id}/access/${path}`;
          res = await rawRequest(server.url, `/plants/${plant.id}/access/${path}`, bearer(token), method);
        }
        answered(what, res.status);
      }
    };
    const viaStore = async () => {
      while (running()) {
        const choice = rnd();
        const user = pick(USERS.slice(1));
        try {
          if (choice < 0.5) {
            if (rnd() < 0.5) await store.groups.addMember(pick(GROUPS), user);
            else await store.groups.removeMember(pick(GROUPS), user);
          } else if (choice < 0.7) {
            await store.users.setAdmin(user, rnd() < 0.3);
          } else if (choice < 0.85) {
            const old = tokens.get(user)!;
            tokens.set(user, await mintToken(store, user));
            await store.tokens.revoke(old.id);
            revoked.push(old.token);
          } else {
            const group = pick(GROUPS);
            await store.groups.remove(group).catch(() => undefined);
            await store.groups.add(group).catch(() => undefined);
          }
          operations++;
        } catch (err) {
          // A group removed by another session meanwhile is not found: what the sequential order would say too.
          if (!(err instanceof DomainError && err.kind === 'not_found')) failures.push(`store: ${(err as Error).message}`);
        }
        await sleep(rnd() * 20);
      }
    };
    const viaHeldSql = async () => {
      while (running()) {
        const user = `(SELECT id FROM users WHERE name = '${pick(USERS.slice(1))}')`;
        const group = `(SELECT id FROM groups WHERE name = '${pick(GROUPS)}')`;
        const plant = plants.length > 0 ? pick(plants).id : 0;
        const plantAt = `(SELECT id FROM plants WHERE api_id = ${plant})`;
        const statement = pick([
          `INSERT INTO group_members (group_id, user_id) SELECT ${group}, ${user} WHERE ${group} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM group_members WHERE group_id = ${group} AND user_id = ${user})`,
          `DELETE FROM group_members WHERE group_id = ${group} AND user_id = ${user}`,
          `INSERT INTO plant_group_grants (group_id, plant_id) SELECT ${group}, ${plantAt} WHERE ${group} IS NOT NULL AND ${plantAt} IS NOT NULL AND NOT EXISTS (SELECT 1 FROM plant_group_grants WHERE group_id = ${group} AND plant_id = ${plantAt})`,
          `DELETE FROM plant_group_grants WHERE group_id = ${group} AND plant_id = ${plantAt}`,
        ]);
        try {
          await holdFor(db, statement, rnd() * 150);
          operations++;
        } catch (err) {
          // A plain session may lose a deadlock or a key to the service: it is rolled back, as psql's would be.
          if (!/deadlock|duplicate key|UNIQUE|foreign key|FOREIGN KEY/i.test((err as Error).message))
            failures.push(`plain SQL: ${(err as Error).message}`);
        }
      }
    };
    const viaCli = async () => {
      for (let i = 0; i < (options.cliRuns ?? 2) && running(); i++) {
        const args = pick([
          ['groups', 'add-member', pick(GROUPS), pick(USERS.slice(1))],
          ['groups', 'remove-member', pick(GROUPS), pick(USERS.slice(1))],
        ]);
        const run = await runCli(db, args);
        operations++;
        if (run.code !== 0 && !/not a member|already|no group|no user/i.test(run.stderr))
          failures.push(`cli ${args.join(' ')}: ${run.stderr}`);
      }
    };
    const slowListings = async () => {
      while (running()) {
        await Promise.all(servers.map((server) => slowListing(server.url, tokens.get(pick(USERS))!.token, failures)));
      }
    };
    const mismatches: string[] = [];
    // Rounds, each checked at its quiescence: a later change (a member who leaves again) would otherwise heal what
    // an earlier race left wrong before the end.
    for (let round = 0; round < (options.rounds ?? 3); round++) {
      until = performance.now() + durationMs / (options.rounds ?? 3);
      await Promise.all([viaHttp(), viaHttp(), viaStore(), viaHeldSql(), viaHeldSql(), viaHeldSql(), viaCli(), slowListings()]);
      await sleep(FRESHNESS_MS);
      await check(`round ${round}`);
    }
    // What the servers logged as errors says why a 5xx was answered.
    if (failures.length > 0)
      for (const server of servers)
        failures.push(
          ...server
            .logs()
            .split('\n')
            .filter((line) => line !== '')
            .slice(0, 5),
        );
    return { operations, failures, mismatches };

    async function check(when: string): Promise<void> {
      const expected = await oracle(db);
      for (const [i, server] of servers.entries()) {
        for (const user of USERS) {
          const res = await rawRequest(server.url, '/plants', bearer(tokens.get(user)!.token));
          const names = res.status === 200 ? (res.body as Array<{ name: string }>).map((p) => p.name) : [`status ${res.status}`];
          const want = expected.get(user) ?? [];
          if (JSON.stringify(names) !== JSON.stringify(want)) {
            mismatches.push(`${when}, instance ${i}, ${user}: listed ${JSON.stringify(names)}, the oracle ${JSON.stringify(want)}`);
          }
        }
        for (const token of revoked) {
          const res = await rawRequest(server.url, '/plants?limit=1', bearer(token));
          if (res.status !== 401) mismatches.push(`${when}, instance ${i}: a revoked token answered ${res.status}`);
        }
      }
      const derived = await plainQuery<Row>(db, DERIVED_DIFFERENCE);
      for (const row of derived) mismatches.push(`${when}, member grants: ${JSON.stringify(row)}`);
    }
  } finally {
    for (const server of servers) await server.close();
    for (const store of stores) await store.close();
  }
}
