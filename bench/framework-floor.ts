import Fastify from 'fastify';
import { COMMON_HEADERS, JSON_TYPE } from '../src/http/common-headers.js';
import { CONSTANT_PAGE } from './constant-page.js';

// The framework floor, for information: Fastify answering the ceiling's constant body with the headers a Plant
// Store page carries (the common ones set as the request arrives, as the service does, then RateLimit and Link),
// and nothing else: no authentication, no rate limiting, no cache, no database. The distance from the ceiling to
// this floor is what the framework and the headers cost before any of Plant Store's own work.

const port = Number(process.argv[2] ?? 0);

const app = Fastify({ keepAliveTimeout: 72_000 });
app.addHook('onRequest', (_request, reply, done) => {
  reply.headers(COMMON_HEADERS);
  done();
});
let remaining = 30_000;
app.get('/plants', (_request, reply) => {
  remaining = remaining > 0 ? remaining - 1 : 30_000;
  reply.header('ratelimit-policy', '"default";q=30000;w=60');
  reply.header('ratelimit', `"default";r=${remaining};t=60`);
  reply.header('link', '</plants?limit=20&cursor=cDIw>; rel="next"');
  reply.type(JSON_TYPE).send(CONSTANT_PAGE);
});
const address = await app.listen({ port, host: '127.0.0.1' });
process.stdout.write(`listening ${new URL(address).port}\n`);
process.on('SIGTERM', () => void app.close().then(() => process.exit(0)));
