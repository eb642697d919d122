import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { prng } from '../../bench/catalogue.js';
import { recordBatch } from '../../src/import-format/records.js';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { DomainError } from '../../src/catalogue/errors.js';
import { EVENT_TYPES, type EventType } from '../../src/catalogue/plant-events.js';
import type { PlantId } from '../../src/catalogue/plant-ids.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { newWebhookSecret } from '../../src/webhooks/signing.js';
import { eventually } from '../helpers/assertions.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { connectPostgres, plainQuery } from '../helpers/plain-sql.js';
import { bearer, rawRequest, seed, startApp, type RunningApp } from '../helpers/http-app.js';
import { startReceiver, until, verifyDelivery as verify, type Received, type Receiver } from '../helpers/webhook-receiver.js';

// Webhook event types end to end: an endpoint registered without a choice is the original new-plant webhook, as
// before; one that chose types receives each in the envelope, as the served document describes it; and a receiver
// that keeps, per plant, the event of the largest sequence holds the catalogue, whatever order deliveries arrive
// in and however many writers changed it at once.

after(() => cleanupBackends());

const FAST = { pollMs: 20, leaseMs: 5_000, timeoutMs: 2_000, concurrency: 4, allowPrivateTargets: true };

/** A plant as an event carries it, and as the catalogue lists it: id, name, and tag when it has one. */
interface Mirrored {
  id: number;
  name: string;
  tag?: string;
}

interface Envelope {
  type: EventType;
  timestamp: string;
  sequence: number;
  data: Mirrored;
}

/** The envelopes a receiver got, verified with the endpoint's secret, in the order they arrived. */
const envelopes = (secret: string, receiver: Receiver): Envelope[] => receiver.received.map((got) => verify(secret, got) as Envelope);

const bySequence = (events: Envelope[]): Envelope[] => [...events].sort((a, b) => a.sequence - b.sequence);

/** The headers a delivery carries beyond those of any HTTP request (host, length, connection). */
const deliveryHeaders = (got: Received): string[] =>
  Object.keys(got.headers)
    .filter((name) => !['host', 'content-length', 'connection', 'keep-alive'].includes(name))
    .sort();

/** What the served document says each webhook's body is: a check per webhook, by its name there. */
async function webhookBodies(url: string): Promise<(name: string, body: unknown) => string[]> {
  const doc = (await (await fetch(`${url}/openapi.json`)).json()) as { webhooks: Record<string, unknown> };
  // As openapi-responses.ts reads the document: JSON Schema 2020-12, the OpenAPI formats and keywords.
  const ajv = new Ajv2020({ allErrors: true, strict: true, strictRequired: false });
  addFormats.default(ajv);
  ajv.addVocabulary(['discriminator', 'xml', 'externalDocs', 'example']);
  ajv.addVocabulary(['openapi', 'info', 'jsonSchemaDialect', 'servers', 'paths', 'webhooks', 'components', 'security', 'tags']);
  const id = 'urn:plantstore-test:webhooks';
  ajv.addSchema({ ...doc, $id: id });
  const compiled = new Map<string, ValidateFunction>();
  return (name, body) => {
    assert.ok(doc.webhooks[name], `the document describes the webhook ${name}`);
    let validate = compiled.get(name);
    if (validate === undefined) {
      const webhook = name.replaceAll('~', '~0').replaceAll('/', '~1');
      validate = ajv.compile({ $ref: `${id}#/webhooks/${webhook}/post/requestBody/content/application~1json/schema` });
      compiled.set(name, validate);
    }
    return validate(body) ? [] : (validate.errors ?? []).map((e) => `${name}${e.instancePath} ${e.message}`);
  };
}

for (const backend of BACKENDS) {
  describe(`webhook event types [${backend.name}]`, { skip: backend.skip }, () => {
    let store: Store;
    let server: RunningApp;
    let tokens: Record<string, string>;
    let bodies: (name: string, body: unknown) => string[];

    before(async () => {
      store = await backend.open();
      ({ tokens } = await seed(store, { users: [{ name: 'alice' }, { name: 'root', admin: true }] }));
      server = await startApp(store, { webhooks: FAST });
      bodies = await webhookBodies(server.url);
    });
    after(async () => {
      await server?.close();
      await store?.close();
    });

    const json = (user: string) => ({ ...bearer(tokens[user]!), 'content-type': 'application/json' });
    const create = (user: string, plant: Mirrored) => rawRequest(server.url, '/plants', json(user), 'POST', JSON.stringify(plant));
    const change = (user: string, id: number, patch: object) =>
      rawRequest(
        server.url,
        `/plants/${id}`,
        { ...bearer(tokens[user]!), 'content-type': 'application/merge-patch+json' },
        'PATCH',
        JSON.stringify(patch),
      );
    const remove = (user: string, id: number) => rawRequest(server.url, `/plants/${id}`, bearer(tokens[user]!), 'DELETE');

    it('an endpoint registered without a choice receives new plants alone, body and headers as before', async () => {
      const original = await startReceiver();
      const everything = await startReceiver();
      const secret = newWebhookSecret();
      const allSecret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(original.url, secret);
      // Beside it, an endpoint that takes every type: the changes and the delete below do raise events.
      const all = await store.webhooks.addEndpoint(everything.url, allSecret, [...EVENT_TYPES]);
      try {
        assert.deepEqual([endpoint.types, endpoint.envelope], [['plant.created'], false]);
        assert.deepEqual([all.types, all.envelope], [[...EVENT_TYPES], true]);
        assert.equal((await create('alice', { id: 11, name: 'Fern', tag: 'fern' })).status, 200);
        assert.equal((await change('alice', 11, { name: 'Maidenhair fern' })).status, 200);
        assert.equal((await store.plants.update(OPERATOR, 11 as PlantId, { tag: null })).outcome, 'changed');
        assert.equal((await remove('alice', 11)).status, 204);
        await until(() => everything.received.length === 4, 'the four events at the endpoint that takes every type');
        await until(() => original.received.length >= 1, 'the new plant at the original endpoint');
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.equal(original.received.length, 1, 'neither the changes nor the delete are sent to the original endpoint');
        const [got] = original.received;
        // Byte for byte the NewPlant of the original document, as every delivery before event types was.
        assert.equal(got!.body, '{"id":11,"name":"Fern","tag":"fern"}');
        assert.deepEqual(verify(secret, got!), { id: 11, name: 'Fern', tag: 'fern' });
        assert.deepEqual(bodies('/plant/webhook', JSON.parse(got!.body)), []);
        assert.deepEqual(deliveryHeaders(got!), ['content-type', 'user-agent', 'webhook-id', 'webhook-signature', 'webhook-timestamp']);
        assert.equal(got!.headers['content-type'], 'application/json');
        assert.equal(got!.headers['user-agent'], 'plantstore-webhooks');
        // The envelope endpoint's deliveries carry the very same headers: the type is in the body alone.
        for (const delivery of everything.received) assert.deepEqual(deliveryHeaders(delivery), deliveryHeaders(got!));
        assert.deepEqual(
          (await store.webhooks.listEndpoints()).map((e) => [e.id, e.types, e.envelope]),
          [
            [endpoint.id, ['plant.created'], false],
            [all.id, [...EVENT_TYPES], true],
          ],
        );
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await store.webhooks.removeEndpoint(all.id);
        await original.close();
        await everything.close();
      }
    });

    it('an endpoint that chose types receives each change in the envelope; one that changes nothing raises nothing', async () => {
      const everything = await startReceiver();
      const deletes = await startReceiver();
      const secret = newWebhookSecret();
      const deleteSecret = newWebhookSecret();
      const all = await store.webhooks.addEndpoint(everything.url, secret, [...EVENT_TYPES]);
      const deletesOnly = await store.webhooks.addEndpoint(deletes.url, deleteSecret, ['plant.deleted']);
      try {
        assert.deepEqual([deletesOnly.types, deletesOnly.envelope], [['plant.deleted'], true]);
        const before = Date.now();
        assert.equal((await create('alice', { id: 21, name: 'Sweet basil', tag: 'herb' })).status, 200);
        assert.equal((await store.plants.update(OPERATOR, 21 as PlantId, { name: 'Basil' })).outcome, 'changed');
        // The same name again, an empty patch, and both fields as they are: the plant stays as it was, and no event is raised.
        assert.equal((await store.plants.update(OPERATOR, 21 as PlantId, { name: 'Basil' })).outcome, 'unchanged');
        assert.equal((await change('alice', 21, {})).status, 200);
        assert.equal((await change('alice', 21, { name: 'Basil', tag: 'herb' })).status, 200);
        // Over HTTP, by the plant's owner: the tag removed.
        assert.equal((await change('alice', 21, { tag: null })).status, 200);
        // A change of another field (who sees it) is no plant.updated either.
        assert.equal((await store.access.change(OPERATOR, 21 as PlantId, { kind: 'public', public: true })).outcome, 'changed');
        assert.equal(await store.plants.delete(OPERATOR, 21 as PlantId), 'deleted');
        await until(() => everything.received.length >= 4, 'four events');
        await until(() => deletes.received.length >= 1, 'the delete');
        await new Promise((resolve) => setTimeout(resolve, 300));
        const events = bySequence(envelopes(secret, everything));
        assert.deepEqual(
          events.map(({ type, data }) => [type, data]),
          [
            ['plant.created', { id: 21, name: 'Sweet basil', tag: 'herb' }],
            ['plant.updated', { id: 21, name: 'Basil', tag: 'herb' }],
            ['plant.updated', { id: 21, name: 'Basil' }],
            ['plant.deleted', { id: 21, name: 'Basil' }],
          ],
        );
        assert.equal(new Set(events.map((e) => e.sequence)).size, 4, 'a sequence of its own for each event');
        for (const event of events) {
          assert.deepEqual(Object.keys(event), ['type', 'timestamp', 'sequence', 'data']);
          assert.ok(Number.isSafeInteger(event.sequence) && event.sequence > 0, `sequence ${event.sequence}`);
          assert.equal(new Date(event.timestamp).toISOString(), event.timestamp);
          assert.ok(Date.parse(event.timestamp) >= before - 1_000 && Date.parse(event.timestamp) <= Date.now(), event.timestamp);
          assert.deepEqual(bodies(event.type, event), [], `the served document describes ${event.type} as it is sent`);
        }
        assert.equal(new Set(everything.received.map((got) => got.headers['webhook-id'])).size, 4, 'a webhook-id per event');
        // The endpoint that took deletes alone got the delete alone: the same event, the same envelope.
        assert.equal(deletes.received.length, 1);
        assert.deepEqual(verify(deleteSecret, deletes.received[0]!), events[3]);
        const deliveries = await store.webhooks.listDeliveries({ limit: 10 });
        assert.deepEqual(
          deliveries.map((d) => [d.endpointId, d.plantId, d.status]),
          [
            [all.id, 21, 'delivered'],
            [deletesOnly.id, 21, 'delivered'],
            [all.id, 21, 'delivered'],
            [all.id, 21, 'delivered'],
            [all.id, 21, 'delivered'],
          ],
        );
      } finally {
        await store.webhooks.removeEndpoint(all.id);
        await store.webhooks.removeEndpoint(deletesOnly.id);
        await everything.close();
        await deletes.close();
      }
    });

    it('an endpoint that chose changes alone gets neither the new plant nor its delete', async () => {
      const receiver = await startReceiver();
      const secret = newWebhookSecret();
      const endpoint = await store.webhooks.addEndpoint(receiver.url, secret, ['plant.updated']);
      try {
        const events = async () => (await store.webhooks.listDeliveries({ limit: 100 })).length;
        const delivered = await events();
        assert.equal((await create('alice', { id: 31, name: 'Mint' })).status, 200);
        assert.equal((await change('alice', 31, { tag: 'herb' })).status, 200);
        assert.equal((await remove('alice', 31)).status, 204);
        await until(() => receiver.received.length >= 1, 'the change');
        await new Promise((resolve) => setTimeout(resolve, 300));
        assert.deepEqual(
          envelopes(secret, receiver).map(({ type, data }) => [type, data]),
          [['plant.updated', { id: 31, name: 'Mint', tag: 'herb' }]],
        );
        assert.equal(await events(), delivered + 1, 'one delivery: the create and the delete found no endpoint');
      } finally {
        await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });
    it('gives a webhook-id one body: the original body and the envelope at one URL get ids of their own', async () => {
      const receiver = await startReceiver();
      const secrets = { plain: newWebhookSecret(), envelope: newWebhookSecret(), created: newWebhookSecret() };
      // As while an endpoint's types change: another endpoint added beside it, at the same URL, before it goes.
      const endpoints = {
        plain: await store.webhooks.addEndpoint(receiver.url, secrets.plain),
        envelope: await store.webhooks.addEndpoint(receiver.url, secrets.envelope, [...EVENT_TYPES]),
        created: await store.webhooks.addEndpoint(receiver.url, secrets.created, ['plant.created']),
      };
      try {
        assert.equal((await create('alice', { id: 41, name: 'Thyme' })).status, 200);
        await until(() => receiver.received.length >= 3, 'the new plant at each endpoint');
        /** Which endpoint sent `got`: the one whose secret signed it. */
        const sender = (got: Received) =>
          (Object.keys(secrets) as Array<keyof typeof secrets>).filter((name) => {
            try {
              return verify(secrets[name], got) !== undefined;
            } catch {
              return false;
            }
          });
        const got = Object.fromEntries(receiver.received.map((delivery) => [sender(delivery).join(), delivery]));
        assert.deepEqual(Object.keys(got).sort(), ['created', 'envelope', 'plain']);
        const id = (name: string) => String(got[name]!.headers['webhook-id']);
        assert.equal(got.plain!.body, '{"id":41,"name":"Thyme"}');
        assert.equal(got.envelope!.body, got.created!.body, 'one envelope for one event');
        assert.notEqual(id('plain'), id('envelope'), 'two bodies, two ids: a receiver that skips seen ids gets both');
        assert.equal(id('envelope'), id('created'), 'one body, one id');
        for (const name of Object.keys(got)) assert.match(id(name), /^msg_[0-9a-f]{32}$/);
        // `webhooks deliveries` shows each endpoint's delivery with the id its receiver saw.
        const listed = await store.webhooks.listDeliveries({ limit: 3 });
        assert.deepEqual(
          listed.map((d) => [d.endpointId, d.messageId]),
          [
            [endpoints.plain.id, id('plain')],
            [endpoints.envelope.id, id('envelope')],
            [endpoints.created.id, id('created')],
          ],
        );
      } finally {
        for (const endpoint of Object.values(endpoints)) await store.webhooks.removeEndpoint(endpoint.id);
        await receiver.close();
      }
    });
  });

  if (backend.name === 'postgres') {
    describe(`an import beside other writers' events [${backend.name}]`, { skip: backend.skip }, () => {
      it(
        'commits while another writer changes a plant, and gives each endpoint the events of its types alone',
        { timeout: 60_000 },
        async () => {
          const db = await backend.freshDb();
          const store = await openStore({ db });
          const other = await openStore({ db });
          try {
            await seed(store, { users: [{ name: 'alice' }] });
            await store.plants.create(OPERATOR, { id: 1, name: 'Changed meanwhile', owner: 'alice', public: false });
            const all = await store.webhooks.addEndpoint('http://127.0.0.1:9/all', newWebhookSecret(), [...EVENT_TYPES]);
            const original = await store.webhooks.addEndpoint('http://127.0.0.1:9/original', newWebhookSecret());
            // Changes committed all through the import, its last statements included: each raises its event, and its
            // deliveries, by trigger, with an event id past the last one the import read before raising its own.
            let importing = true;
            let changes = 0;
            const changing = (async () => {
              while (importing) await other.plants.update(OPERATOR, 1 as PlantId, { name: `Changed ${++changes}` });
            })();
            const PLANTS = 20_000;
            const records = Array.from({ length: PLANTS }, (_, i) => ({
              type: 'plant' as const,
              id: 100 + i,
              name: `Imported ${i}`,
              owner: 'alice',
            }));
            try {
              await store.bulk.importRecords(recordBatch(records));
            } finally {
              importing = false;
              await changing;
            }
            const delivered = await plainQuery<{ type: string; endpoint: string; deliveries: string; events: string }>(
              db,
              `SELECT e.type, d.endpoint_id AS endpoint, count(*) AS deliveries, count(DISTINCT e.id) AS events
             FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id GROUP BY 1, 2 ORDER BY 1, 2`,
            );
            assert.deepEqual(
              delivered.map((r) => [r.type, Number(r.endpoint), Number(r.deliveries), Number(r.events)]),
              [
                ['plant.created', all.id, PLANTS, PLANTS],
                ['plant.created', original.id, PLANTS, PLANTS],
                ['plant.updated', all.id, changes, changes],
              ],
            );
          } finally {
            await other.close();
            await store.close();
          }
        },
      );
    });
  }

  describe(`a catalogue mirrored from webhook events [${backend.name}]`, { skip: backend.skip }, () => {
    /** Plant ids the writers share: few, so that they meet on the same plants, and deleted ids are created again. */
    const IDS = 10;
    const WRITES = 60;
    const NAMES = ['Aloe', 'Basil', 'Cactus', 'Dill', 'Fern'];
    const TAGS = ['herb', 'succulent', 'fern'];

    it(
      'replaying the envelopes received, the largest sequence per plant, gives the catalogue after concurrent writers',
      { timeout: 60_000 },
      async () => {
        const db = await backend.freshDb();
        const store = await openStore({ db });
        // A second store on the same database: another process's writes, as far as the first one knows.
        const other = await openStore({ db });
        const sql = backend.name === 'postgres' ? await connectPostgres(db) : undefined;
        const random = prng(0x5eed);
        // Answers come back after a few milliseconds, unevenly, and one delivery in five fails its first attempt
        // (tried again 5 s later): deliveries overtake one another, as over any network.
        const failedOnce = new Set<string>();
        const receiver: Receiver = await startReceiver((n) => {
          const id = String(receiver.received[n - 1]!.headers['webhook-id']);
          if (n % 5 === 2 && !failedOnce.has(id)) {
            failedOnce.add(id);
            return { status: 503 };
          }
          return { status: 200, delayMs: Math.floor(random() * 8) };
        });
        const secret = newWebhookSecret();
        let server: RunningApp | undefined;
        try {
          const { tokens } = await seed(store, { users: [{ name: 'alice' }, { name: 'root', admin: true }] });
          await store.webhooks.addEndpoint(receiver.url, secret, [...EVENT_TYPES]);
          server = await startApp(store, { webhooks: FAST });
          const url = server.url;

          /** One writer's plan: each write from its own seeded generator, so that a run repeats its writes. */
          const plan = (seed: number) => {
            const rnd = prng(seed);
            const pick = <T>(list: readonly T[]): T => list[Math.floor(rnd() * list.length)]!;
            return Array.from({ length: WRITES }, () => {
              const id = 1 + Math.floor(rnd() * IDS);
              const name = `${pick(NAMES)} ${Math.floor(rnd() * 3)}`;
              // A change of the name, of the tag (removed one time in three), or of both.
              const what = rnd();
              const tag = rnd() < 1 / 3 ? null : pick(TAGS);
              const r = rnd();
              return r < 0.35
                ? { kind: 'create' as const, id, name, ...(tag === null ? {} : { tag }) }
                : r < 0.75
                  ? { kind: 'change' as const, id, change: what < 0.4 ? { name } : what < 0.7 ? { tag } : { name, tag } }
                  : { kind: 'delete' as const, id };
            });
          };
          type Write = ReturnType<typeof plan>[number];
          const conflicts = (err: unknown) => {
            if (!(err instanceof DomainError && err.kind === 'conflict')) throw err;
          };

          /** Writes through a store, as the CLI and an import write. */
          const throughStore = (target: Store) => async (w: Write) => {
            const id = w.id as PlantId;
            if (w.kind === 'create') {
              const { kind: _, ...plant } = w;
              await target.plants.create(OPERATOR, { ...plant, owner: 'alice', public: false }).catch(conflicts);
            } else if (w.kind === 'change') await target.plants.update(OPERATOR, id, w.change);
            else await target.plants.delete(OPERATOR, id);
          };
          /** Writes over HTTP, as an admin: any plant, whoever owns it. */
          const overHttp = async (w: Write) => {
            const headers = { ...bearer(tokens.root!), 'content-type': 'application/json' };
            const res =
              w.kind === 'create'
                ? await rawRequest(url, '/plants', headers, 'POST', JSON.stringify({ id: w.id, name: w.name, tag: w.tag }))
                : w.kind === 'change'
                  ? await rawRequest(url, `/plants/${w.id}`, headers, 'PATCH', JSON.stringify(w.change))
                  : await rawRequest(url, `/plants/${w.id}`, bearer(tokens.root!), 'DELETE');
            assert.ok([200, 204, 404, 409].includes(res.status), `${JSON.stringify(w)}: ${res.status} ${res.text}`);
          };
          /** Writes with plain SQL, as an operator at psql would (PostgreSQL): the triggers raise the events. */
          const plainSql = async (w: Write) => {
            if (w.kind === 'create') {
              await sql!.query(
                'INSERT INTO plants (api_id, name, tag, owner_id, is_public, created_at) ' +
                  "SELECT $1, $2, $3, id, 0, 0 FROM users WHERE name = 'alice' ON CONFLICT DO NOTHING",
                [w.id, w.name, w.tag ?? null],
              );
            } else if (w.kind === 'change') {
              const sets = Object.entries(w.change).map(([column], i) => `${column} = $${i + 2}`);
              await sql!.query(`UPDATE plants SET ${sets.join(', ')} WHERE api_id = $1`, [w.id, ...Object.values(w.change)]);
            } else await sql!.query('DELETE FROM plants WHERE api_id = $1', [w.id]);
          };

          const writers = [throughStore(store), throughStore(other), overHttp, ...(sql ? [plainSql] : [])];
          await Promise.all(
            writers.map(async (write, i) => {
              for (const w of plan(1_000 + i)) await write(w);
            }),
          );

          // Every delivery made, then what a receiver does: per plant, the event of the largest sequence.
          await eventually('every delivery delivered', () => store.webhooks.listDeliveries({ limit: 100_000 }), {
            until: (deliveries) => deliveries.every((d) => d.status === 'delivered'),
            timeoutMs: 30_000,
          });
          const deliveries = await store.webhooks.listDeliveries({ limit: 100_000 });
          const received = envelopes(secret, receiver);
          assert.equal(new Set(receiver.received.map((got) => got.headers['webhook-id'])).size, deliveries.length, 'each event received');
          const latest = new Map<number, Envelope>();
          for (const event of received) {
            const seen = latest.get(event.data.id);
            if (seen === undefined || event.sequence > seen.sequence) latest.set(event.data.id, event);
          }
          const mirror = [...latest.values()]
            .filter((event) => event.type !== 'plant.deleted')
            .map((event) => event.data)
            .sort((a, b) => a.id - b.id);
          const catalogue = (await store.plants.list({}))
            .map((p): Mirrored => ({ id: p.id, name: p.name, ...(p.tag === undefined ? {} : { tag: p.tag }) }))
            .sort((a, b) => a.id - b.id);
          assert.deepEqual(mirror, catalogue);

          // The run met what it is meant to meet: every type, tags removed, ids deleted and created again, and
          // deliveries that arrived after a later event of the same plant.
          const count = (type: EventType) => received.filter((e) => e.type === type).length;
          for (const type of EVENT_TYPES) assert.ok(count(type) >= 5, `${count(type)} ${type} events`);
          assert.ok(
            received.some((e) => e.type === 'plant.updated' && e.data.tag === undefined),
            'a change that removed a tag',
          );
          const recreated = [...latest.keys()].filter((id) => {
            const ofPlant = bySequence(received.filter((e) => e.data.id === id)).map((e) => e.type);
            return ofPlant.some((type, i) => type === 'plant.created' && ofPlant.slice(0, i).includes('plant.deleted'));
          });
          assert.ok(recreated.length > 0, 'an id deleted and created again');
          const overtaken = received.filter((e, i) => received.slice(0, i).some((s) => s.data.id === e.data.id && s.sequence > e.sequence));
          assert.ok(overtaken.length > 0, 'a delivery that arrived after a later event of its plant');
        } finally {
          await server?.close();
          await receiver.close();
          await sql?.end();
          await other.close();
          await store.close();
        }
      },
    );
  });
}
