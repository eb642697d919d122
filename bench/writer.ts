import { Agent, request } from 'node:http';
import { parseArgs } from 'node:util';
import { OPERATOR } from '../src/catalogue/access-rule.js';
import type { PlantId } from '../src/catalogue/plant-ids.js';
import { generateToken } from '../src/catalogue/tokens.js';
import { openStore } from '../src/store/open-store.js';
import { userName } from './catalogue.js';

// A writer process for the "under writes" rows of `npm run bench`: commits about `--rate` changes a second
// until SIGTERM, then prints how many it made. In turn: a plant owned by one of the measured users, created by
// that user over `POST /plants` of the measured service (`--url`, with the users' tokens in
// BENCH_WRITER_TOKENS) or else through the store; a grant of an existing plant to one of them and a token of a
// user not measured, through the store's real write path (the CLI's).

const { values: args } = parseArgs({
  options: {
    db: { type: 'string' },
    rate: { type: 'string', default: '100' },
    /** The measured users are user1..userN. */
    measured: { type: 'string', default: '100' },
    users: { type: 'string', default: '1000' },
    plants: { type: 'string', default: '100000' },
    url: { type: 'string' },
  },
});
if (!args.db) throw new Error('--db is required');

const store = await openStore({ db: args.db });
const rate = Number(args.rate);
const measured = Number(args.measured);
const users = Number(args.users);
const plants = Number(args.plants);
/** The measured users' tokens, user1 first, for creating their plants over HTTP. */
const tokens = args.url === undefined ? [] : (JSON.parse(process.env.BENCH_WRITER_TOKENS ?? '[]') as string[]);
// Ids no earlier run of the writer used (it runs once per round against the same database).
const idBase = Date.now() * 1000;
let made = 0;
let failed = 0;
let stopping = false;

async function change(i: number): Promise<void> {
  const user = userName(1 + (i % measured));
  switch (i % 3) {
    case 0:
      if (args.url !== undefined) await createOverHttp(i);
      else await store.plants.create(OPERATOR, { name: `Written #${i}`, tag: 'bench', owner: user, public: false });
      break;
    case 1:
      await store.grants.add((1 + ((i * 7919) % plants)) as PlantId, { user });
      break;
    default: {
      const other = userName(measured + 1 + (i % (users - measured - 1)));
      await store.tokens.add({ user: other, hash: generateToken().hash, label: 'bench writer' });
    }
  }
}

// node:http on one kept-alive connection rather than fetch: the writer is load, not what is measured, and
// fetch cost it about a fifth more CPU on the cores the measured reads share.
const agent = new Agent({ keepAlive: true, maxSockets: 1 });

function createOverHttp(i: number): Promise<void> {
  const body = JSON.stringify({ id: idBase + i, name: `Written #${i}`, tag: 'bench' });
  return new Promise((resolve, reject) => {
    const req = request(`${args.url}/plants`, {
      method: 'POST',
      agent,
      headers: {
        authorization: `Bearer ${tokens[i % measured]}`,
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
      },
    });
    req.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk: string) => (text += chunk));
      res.on('end', () => (res.statusCode === 200 ? resolve() : reject(new Error(`POST /plants answered ${res.statusCode}: ${text}`))));
    });
    req.on('error', reject);
    req.end(body);
  });
}

process.once('SIGTERM', () => (stopping = true));
process.stdout.write('writing\n');
const started = performance.now();
for (let i = 0; !stopping; i++) {
  try {
    await change(i);
    made++;
  } catch (err) {
    failed++;
    if (failed === 1) process.stderr.write(`writer: ${(err as Error).message}\n`);
  }
  // Paced against the start, so the rate holds however long each commit takes.
  const due = started + ((i + 1) * 1000) / rate;
  const wait = due - performance.now();
  if (wait > 0) await new Promise((resolve) => setTimeout(resolve, wait));
}
const seconds = (performance.now() - started) / 1000;
await store.close();
agent.destroy();
process.stdout.write(`${JSON.stringify({ changes: made, failed, seconds })}\n`);
