import { Agent, request } from 'node:http';
import { parseArgs } from 'node:util';
import { Webhook } from 'standardwebhooks';

// The limit of the event rows of `npm run bench`: a bare Node loop posting signed bodies over kept-alive node:http
// connections to the same receiver, at the dispatcher's concurrency (per endpoint and in all), with nothing
// stored. Prints its wall time and its own CPU time.

const { values: args } = parseArgs({
  options: {
    urls: { type: 'string' },
    count: { type: 'string' },
    'endpoint-concurrency': { type: 'string', default: '8' },
    concurrency: { type: 'string', default: '64' },
  },
});
const urls = args.urls!.split(',');
const count = Number(args.count);
const perEndpoint = Math.min(Number(args['endpoint-concurrency']), Math.floor(Number(args.concurrency) / urls.length) || 1);
const signer = new Webhook(`whsec_${Buffer.alloc(24, 7).toString('base64')}`);
const agents = urls.map(() => new Agent({ keepAlive: true }));

function post(endpoint: number, n: number): Promise<void> {
  const body = JSON.stringify({ id: n, name: `Plant ${n}`, tag: 'bench' });
  const id = `msg_bare_${endpoint}_${n}_${process.pid}`;
  const now = new Date();
  return new Promise((resolve, reject) => {
    const req = request(urls[endpoint]!, {
      method: 'POST',
      agent: agents[endpoint],
      headers: {
        'content-type': 'application/json',
        'content-length': Buffer.byteLength(body),
        'webhook-id': id,
        'webhook-timestamp': String(Math.floor(now.getTime() / 1000)),
        'webhook-signature': signer.sign(id, now, body),
      },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', resolve);
    });
    req.on('error', reject);
    req.end(body);
  });
}

const cpu = process.cpuUsage();
const started = performance.now();
const each = Math.ceil(count / urls.length);
await Promise.all(
  urls.map(async (_, endpoint) => {
    let next = 0;
    const total = Math.min(each, count - endpoint * each);
    await Promise.all(
      Array.from({ length: perEndpoint }, async () => {
        while (next < total) await post(endpoint, next++);
      }),
    );
  }),
);
const seconds = (performance.now() - started) / 1000;
const used = process.cpuUsage(cpu);
for (const agent of agents) agent.destroy();
process.stdout.write(`${JSON.stringify({ seconds, cpuSeconds: (used.user + used.system) / 1e6 })}\n`);
