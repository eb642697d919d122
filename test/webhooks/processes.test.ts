import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { after, describe, it } from 'node:test';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { plainQuery, plainSql } from '../helpers/plain-sql.js';
import { runCli, spawnServe } from '../helpers/processes.js';
import { startReceiver, until, verifyDelivery as verify } from '../helpers/webhook-receiver.js';

// The webhook with real processes: an event committed while no server runs, or while the server that was
// sending it is killed (-9), is delivered after a restart; two instances on one PostgreSQL database deliver
// each event once.

after(() => cleanupBackends());

/** The receivers here listen on loopback: an address webhooks are sent to only when the operator allows it. */
const ALLOW_PRIVATE = { PLANTSTORE_WEBHOOK_ALLOW_PRIVATE: 'true' };

/** `webhooks add` with private receivers allowed by the environment, as an operator inside their network runs it. */
const addEndpoint = (db: string, ...args: string[]) => runCli(db, ['webhooks', 'add', ...args], undefined, ALLOW_PRIVATE);

async function cli(db: string, ...args: string[]): Promise<string> {
  const run = await runCli(db, args, undefined, ALLOW_PRIVATE);
  assert.equal(run.code, 0, run.stderr);
  return run.stdout.trimEnd().split('\n').at(-1)!;
}

for (const backend of BACKENDS) {
  describe(`webhook deliveries across processes [${backend.name}]`, { skip: backend.skip }, () => {
    it(
      'delivers after a restart what was committed while no server ran, and what a killed server was sending',
      { timeout: 90_000 },
      async () => {
        const db = await backend.freshDb();
        // The first delivery of plant 2 is held, unanswered, while its server is killed.
        const hook = await startReceiver((n) => (n === 2 ? 'hold' : { status: 200 }));
        try {
          await cli(db, 'users', 'add', 'alice');
          const secret = await cli(db, 'webhooks', 'add', hook.url);
          assert.match(secret, /^whsec_[A-Za-z0-9+/]+=*$/);
          await cli(db, 'plants', 'add', '--name', 'While down', '--owner', 'alice', '--id', '1');
          const first = await spawnServe(db, ['--webhook-lease', '16'], ALLOW_PRIVATE);
          await until(() => hook.received.length === 1, 'the event committed while no server ran', 10_000);
          assert.deepEqual(verify(secret, hook.received[0]!), { id: 1, name: 'While down' });
          await cli(db, 'plants', 'add', '--name', 'In flight', '--owner', 'alice', '--id', '2');
          await until(() => hook.received.length === 2, 'the delivery in flight', 10_000);
          first.child.kill('SIGKILL');
          await first.stop();
          const second = await spawnServe(db, ['--webhook-lease', '16'], ALLOW_PRIVATE);
          try {
            // The killed server's lease runs out (16 s), then the restarted one sends the event again.
            await until(() => hook.received.length === 3, 'the event after the lease ran out', 30_000);
            assert.equal(hook.received[2]!.headers['webhook-id'], hook.received[1]!.headers['webhook-id'], 'the same event');
            assert.deepEqual(verify(secret, hook.received[2]!), { id: 2, name: 'In flight' });
            const deliveries = JSON.parse(await runCli(db, ['webhooks', 'deliveries', '--json']).then((r) => r.stdout)) as Array<{
              type: string;
              status: string;
            }>;
            assert.deepEqual(
              deliveries.map((d) => [d.type, d.status]),
              [
                ['plant.created', 'delivered'],
                ['plant.created', 'delivered'],
              ],
            );
            // The table names the event too.
            assert.match((await runCli(db, ['webhooks', 'deliveries'])).stdout, /^WEBHOOK-ID\tENDPOINT\tEVENT\tPLANT\tSTATUS\t/);
          } finally {
            await second.stop();
          }
        } finally {
          await hook.close();
        }
      },
    );

    it('manages endpoints from the CLI: secrets shown once, never listed; rotation, retry, enable and remove', async () => {
      const db = await backend.freshDb();
      const secret = await cli(db, 'webhooks', 'add', 'http://127.0.0.1:9/hooks/plants');
      assert.match(secret, /^whsec_[A-Za-z0-9+/]{32}$/);
      const list = async () => JSON.parse((await runCli(db, ['webhooks', 'list', '--json'])).stdout) as Array<Record<string, unknown>>;
      const [endpoint] = await list();
      assert.equal(endpoint!.url, 'http://127.0.0.1:9/hooks/plants');
      assert.equal(endpoint!.state, 'enabled');
      // Enabling an enabled endpoint changes nothing and says so; a disabled one (as a 410 leaves it) is enabled.
      const enable = () => runCli(db, ['webhooks', 'enable', String(endpoint!.id)]);
      assert.match((await enable()).stderr, new RegExp(`webhook endpoint ${String(endpoint!.id)} was already enabled`));
      await plainSql(db, `UPDATE webhook_endpoints SET disabled_at = 1, disabled_reason = 'gone' WHERE id = ${String(endpoint!.id)}`);
      assert.equal((await list())[0]!.state, 'disabled');
      const enabled = await enable();
      assert.equal(enabled.code, 0, enabled.stderr);
      assert.match(enabled.stderr, new RegExp(`^enabled webhook endpoint ${String(endpoint!.id)}$`, 'm'));
      assert.equal((await list())[0]!.state, 'enabled');
      assert.ok(!JSON.stringify(await list()).includes('whsec_'), 'secrets are never listed');
      const rotated = await cli(db, 'webhooks', 'rotate-secret', String(endpoint!.id), '--overlap', '1h');
      assert.match(rotated, /^whsec_/);
      assert.notEqual(rotated, secret);
      assert.ok((await list())[0]!.previousSecretUntil, 'the old secret signs too, until the overlap ends');
      // After a leak: the old secret stops signing at once.
      const atOnce = await runCli(db, ['webhooks', 'rotate-secret', String(endpoint!.id), '--overlap', '0']);
      assert.equal(atOnce.code, 0, atOnce.stderr);
      assert.match(atOnce.stdout, /^whsec_/);
      assert.match(atOnce.stderr, /the old one no longer signs/);
      // The secret the first rotation left signing for an hour stops early; the command says so.
      assert.match(atOnce.stderr, /^the secret replaced before, which was to sign until \S+Z, no longer signs$/m);
      assert.equal((await list())[0]!.previousSecretUntil, undefined);
      const retry = await runCli(db, ['webhooks', 'retry']);
      assert.equal(retry.code, 0);
      assert.match(retry.stderr, /0 deliveries \(failed or waiting for a later attempt\) will be sent now/);
      for (const bad of [
        ['add', 'ftp://example.com/x'],
        ['add', 'https://user:pw@example.com/x'],
        ['add', 'not a url'],
        ['enable', '999'],
        // Not a public address, as written: refused unless the operator allows private receivers.
        ['add', 'http://127.0.0.1:8080/hooks'],
        ['add', 'http://0x7f000001/hooks'],
        ['add', 'http://2130706433/hooks'],
        ['add', 'http://[::1]/hooks'],
        ['add', 'http://[::ffff:10.0.0.1]/hooks'],
        ['add', 'http://0.0.0.0/hooks'],
        ['add', 'http://localhost:3000/hooks'],
        ['add', 'http://192.168.1.10/hooks'],
        // Link-local and cloud metadata: refused even then.
        ['add', 'http://169.254.169.254/latest/meta-data', '--webhook-allow-private'],
        ['add', 'http://[fe80::1]/hooks', '--webhook-allow-private'],
        ['add', 'http://[fd00:ec2::254]/latest', '--webhook-allow-private'],
        // 169.254.169.254 carried by IPv6: IPv4-compatible (refused by default too), IPv4-translated, NAT64 (well-known
        // and local-use prefixes), 6to4, Teredo (the client's address inverted) and ISATAP.
        ['add', 'http://[::a9fe:a9fe]/latest'],
        ['add', 'http://[::a9fe:a9fe]/latest', '--webhook-allow-private'],
        ['add', 'http://[::ffff:0:a9fe:a9fe]/latest', '--webhook-allow-private'],
        ['add', 'http://[64:ff9b::a9fe:a9fe]/latest', '--webhook-allow-private'],
        ['add', 'http://[64:ff9b:1:a9fe:a9:fe00::]/latest', '--webhook-allow-private'],
        ['add', 'http://[2002:a9fe:a9fe::1]/latest', '--webhook-allow-private'],
        ['add', 'http://[2001:0:4136:e378:8000:63bf:5601:5601]/latest', '--webhook-allow-private'],
        ['add', 'http://[2001:db8::200:5efe:a9fe:a9fe]/latest', '--webhook-allow-private'],
        // Nothing listens on port 0, and a fragment is never sent.
        ['add', 'http://127.0.0.1:0/hooks', '--webhook-allow-private'],
        ['add', 'http://127.0.0.1:9/hooks#plants', '--webhook-allow-private'],
        ['add', 'http://127.0.0.1:9/hooks#', '--webhook-allow-private'],
      ]) {
        const run = await runCli(db, ['webhooks', ...bad]);
        assert.equal(run.code, 1, `${bad.join(' ')}: ${run.stderr}`);
        assert.equal(run.stderr.trim().split('\n').length, 1, run.stderr);
        if (bad[1]!.endsWith('/latest') || bad[1]!.includes('169.254')) assert.match(run.stderr, /link-local or cloud metadata/, bad[1]);
      }
      const allowed = await runCli(db, ['webhooks', 'add', 'http://[::1]:9/hooks', '--webhook-allow-private']);
      assert.equal(allowed.code, 0, allowed.stderr);
      const byEnv = await addEndpoint(db, 'http://127.0.0.1:3000/hooks');
      assert.equal(byEnv.code, 0, byEnv.stderr);
      assert.doesNotMatch(byEnv.stderr, /note:/);
      // A URL another endpoint has: taken (as while an endpoint's types change), and said.
      const again = await addEndpoint(db, 'http://127.0.0.1:3000/hooks', '--events', 'plant.deleted');
      assert.equal(again.code, 0, again.stderr);
      const first = (await list()).find((e) => e.url === 'http://127.0.0.1:3000/hooks')!;
      assert.match(
        again.stderr,
        new RegExp(
          `^note: endpoint ${String(first.id)} has this URL too: its receiver gets the deliveries of each, signed with its own secret$`,
          'm',
        ),
      );
      for (const e of (await list()).filter((e) => e.url !== 'http://127.0.0.1:9/hooks/plants'))
        await cli(db, 'webhooks', 'remove', String(e.id));
      await cli(db, 'webhooks', 'remove', String(endpoint!.id));
      assert.deepEqual(await list(), []);
    });

    it('registers an endpoint for the event types chosen with --events, and lists each endpoint with its types', async () => {
      const db = await backend.freshDb();
      const mirror = await addEndpoint(db, 'http://127.0.0.1:9/hooks/mirror', '--events', 'plant.created,plant.updated,plant.deleted');
      assert.equal(mirror.code, 0, mirror.stderr);
      assert.match(mirror.stdout, /^whsec_[A-Za-z0-9+/]{32}\n$/);
      assert.match(
        mirror.stderr,
        /^added webhook endpoint \d+ for http:\/\/127\.0\.0\.1:9\/hooks\/mirror \(plant\.created,plant\.updated,plant\.deleted, as envelope\)/,
      );
      // In any order, spaced or repeated: stored in the document's order, each once.
      await cli(db, 'webhooks', 'add', 'http://127.0.0.1:9/hooks/gone', '--events', ' plant.deleted, plant.updated,plant.deleted');
      const original = await addEndpoint(db, 'http://127.0.0.1:9/hooks/plants');
      assert.equal(original.code, 0, original.stderr);
      assert.match(original.stderr, /\(plant\.created, as NewPlant\); store the secret now/);
      for (const [events, error] of [
        [
          'plant.moved',
          /^plantstore: unknown event type "plant\.moved"; the event types are plant\.created, plant\.updated, plant\.deleted\n$/,
        ],
        [
          'plant.created,PLANT.UPDATED,updated',
          /^plantstore: unknown event types "PLANT\.UPDATED", "updated"; the event types are plant\.created, plant\.updated, plant\.deleted\n$/,
        ],
        ['', /^plantstore: --events names no event type; the event types are plant\.created, plant\.updated, plant\.deleted\n$/],
        [' , ', /^plantstore: --events names no event type/],
      ] as const) {
        const run = await addEndpoint(db, 'http://127.0.0.1:9/hooks/refused', '--events', events);
        assert.equal(run.code, 1, `--events "${events}": ${run.stderr}`);
        assert.match(run.stderr, error);
        assert.equal(run.stdout, '', 'no secret for an endpoint not added');
      }
      const listed = JSON.parse((await runCli(db, ['webhooks', 'list', '--json'])).stdout) as Array<Record<string, unknown>>;
      assert.deepEqual(
        listed.map((e) => [e.url, e.types, e.envelope, e.state]),
        [
          ['http://127.0.0.1:9/hooks/mirror', ['plant.created', 'plant.updated', 'plant.deleted'], true, 'enabled'],
          ['http://127.0.0.1:9/hooks/gone', ['plant.updated', 'plant.deleted'], true, 'enabled'],
          ['http://127.0.0.1:9/hooks/plants', ['plant.created'], false, 'enabled'],
        ],
      );
      // Piped, the list is tab-separated under its header: the types and the body are columns of their own.
      const [header, ...rows] = (await runCli(db, ['webhooks', 'list'])).stdout
        .trimEnd()
        .split('\n')
        .map((line) => line.split('\t'));
      assert.deepEqual(header, ['ID', 'URL', 'EVENTS', 'BODY', 'STATE', 'CREATED', 'OLD SECRET UNTIL']);
      assert.deepEqual(
        rows.map((row) => row.slice(1, 5)),
        [
          ['http://127.0.0.1:9/hooks/mirror', 'plant.created,plant.updated,plant.deleted', 'envelope', 'enabled'],
          ['http://127.0.0.1:9/hooks/gone', 'plant.updated,plant.deleted', 'envelope', 'enabled'],
          ['http://127.0.0.1:9/hooks/plants', 'plant.created', 'NewPlant', 'enabled'],
        ],
      );
      const help = await runCli(db, ['webhooks', 'add', '--help']);
      assert.match(help.stdout.replace(/\s+/g, ' '), /--events <types> .*plant\.created, plant\.updated, plant\.deleted/);
    });

    if (backend.name === 'sqlite') {
      // Debian 12's sqlite3 is 3.40: the triggers must not need a newer SQLite than the one an operator has.
      const sqlite3 = spawnSync('sqlite3', ['--version'], { encoding: 'utf8' });
      const missing = sqlite3.status === 0 ? false : 'the sqlite3 command is not installed';
      it(
        'plain SQL from the sqlite3 command adds plants while endpoints are enabled, and each endpoint gets each event',
        { skip: !process.env.CI && missing, timeout: 30_000 },
        async () => {
          assert.equal(missing, false, 'CI installs the sqlite3 command');
          const db = await backend.freshDb();
          const hook = await startReceiver();
          try {
            await cli(db, 'users', 'add', 'alice');
            // Two endpoints: SQLite 3.40 read last_insert_rowid() again for the second one's delivery, which then
            // named the first delivery instead of the event (migration 0020).
            const secrets = [await cli(db, 'webhooks', 'add', `${hook.url}/first`), await cli(db, 'webhooks', 'add', `${hook.url}/second`)];
            const insert = spawnSync(
              'sqlite3',
              [
                db,
                "INSERT INTO plants (api_id, name, owner_id, is_public, created_at) SELECT 7, 'By sqlite3', id, 0, 0 FROM users WHERE name = 'alice';" +
                  "INSERT INTO plants (api_id, name, owner_id, is_public, created_at) SELECT 8, 'And another', id, 0, 0 FROM users WHERE name = 'alice'",
              ],
              { encoding: 'utf8' },
            );
            assert.equal(insert.status, 0, `sqlite3 ${sqlite3.stdout.trim()}: ${insert.stderr}`);
            const server = await spawnServe(db, [], ALLOW_PRIVATE);
            try {
              // A plant created over HTTP afterwards: a stray delivery from before made its write fail (500).
              const token = (await runCli(db, ['tokens', 'create', 'alice'])).stdout.trim();
              const created = await fetch(`${server.url}/plants`, {
                method: 'POST',
                headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
                body: JSON.stringify({ id: 9, name: 'Over HTTP' }),
              });
              assert.equal(created.status, 200, await created.text());
              await until(() => hook.received.length === 6, 'three events, each to both endpoints', 10_000);
              for (const [i, path] of ['/hooks/first', '/hooks/second'].entries()) {
                const got = hook.received.filter((delivery) => delivery.path === path).map((delivery) => verify(secrets[i]!, delivery));
                assert.deepEqual(
                  got.sort((a, b) => (a as { id: number }).id - (b as { id: number }).id),
                  [
                    { id: 7, name: 'By sqlite3' },
                    { id: 8, name: 'And another' },
                    { id: 9, name: 'Over HTTP' },
                  ],
                  path,
                );
              }
            } finally {
              await server.stop();
            }
          } finally {
            await hook.close();
          }
        },
      );
    }

    it('a drain killed with -9 loses nothing, and sends again only what it had not recorded', { timeout: 120_000 }, async () => {
      const db = await backend.freshDb();
      const hook = await startReceiver();
      try {
        await cli(db, 'users', 'add', 'alice');
        await cli(db, 'webhooks', 'add', hook.url);
        const records = Array.from({ length: 2000 }, (_, i) =>
          JSON.stringify({ type: 'plant', id: i + 1, name: `p${i + 1}`, owner: 'alice' }),
        );
        assert.equal((await runCli(db, ['import', '-'], records.join('\n') + '\n')).code, 0);
        const killed = await spawnServe(db, ['--webhook-lease', '16'], ALLOW_PRIVATE);
        await until(() => hook.received.length >= 300, 'the drain under way', 30_000);
        killed.child.kill('SIGKILL');
        await killed.stop();
        assert.ok(hook.received.length < 2000, 'killed during the drain');
        const ids = () => hook.received.map((got) => String(got.headers['webhook-id']));
        // What reached the receiver from the dead process, against what it had recorded as delivered: the rest was
        // in flight, or answered while its outcome waited for the next batch of outcomes.
        await new Promise((resolve) => setTimeout(resolve, 200));
        const reached = new Set(ids()).size;
        const [recorded] = await plainQuery<{ n: number | string }>(
          db,
          "SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'delivered'",
        );
        const unrecorded = reached - Number(recorded!.n);
        const restarted = await spawnServe(db, ['--webhook-lease', '16'], ALLOW_PRIVATE);
        try {
          await until(() => new Set(ids()).size === 2000, 'every event, once the killed claims ran out', 60_000);
          await new Promise((resolve) => setTimeout(resolve, 500));
          const again = ids().length - new Set(ids()).size;
          // Sent twice: only what had reached the receiver unrecorded when the process died, never one recorded.
          assert.ok(again <= unrecorded, `${again} deliveries sent twice, ${unrecorded} unrecorded at the kill`);
        } finally {
          await restarted.stop();
        }
      } finally {
        await hook.close();
      }
    });

    if (backend.name === 'postgres') {
      it('two instances on one database deliver each event once', { timeout: 60_000 }, async () => {
        const db = await backend.freshDb();
        const hook = await startReceiver();
        try {
          await cli(db, 'users', 'add', 'alice');
          const secret = await cli(db, 'webhooks', 'add', hook.url);
          const instances = [await spawnServe(db, [], ALLOW_PRIVATE), await spawnServe(db, [], ALLOW_PRIVATE)];
          try {
            // A drain both instances take part in, and single writes each hears of.
            const records = Array.from({ length: 2000 }, (_, i) =>
              JSON.stringify({ type: 'plant', id: i + 1, name: `p${i + 1}`, owner: 'alice' }),
            );
            const run = await runCli(db, ['import', '-'], records.join('\n') + '\n');
            assert.equal(run.code, 0, run.stderr);
            for (let i = 2001; i <= 2020; i++) await cli(db, 'plants', 'add', '--name', `p${i}`, '--owner', 'alice', '--id', String(i));
            await until(() => hook.received.length >= 2020, '2,020 deliveries', 45_000);
            await new Promise((resolve) => setTimeout(resolve, 1500));
            const messageIds = hook.received.map((got) => String(got.headers['webhook-id']));
            assert.equal(new Set(messageIds).size, messageIds.length, 'no webhook-id twice');
            const ids = hook.received.map((got) => (verify(secret, got) as { id: number }).id).sort((a, b) => a - b);
            assert.deepEqual(
              ids,
              Array.from({ length: 2020 }, (_, i) => i + 1),
              'each event once',
            );
          } finally {
            for (const instance of instances) await instance.stop();
          }
        } finally {
          await hook.close();
        }
      });
    }
  });
}
