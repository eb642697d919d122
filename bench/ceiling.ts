import { createServer } from 'node:http';
import { CONSTANT_PAGE } from './constant-page.js';

// The ceiling: a bare node:http server answering a constant 20-plant JSON body, nothing else.
// Same body size and headers class as the service's first page, no routing, no auth, no database.

const body = Buffer.from(CONSTANT_PAGE);
const port = Number(process.argv[2] ?? 0);

const server = createServer((_req, res) => {
  res.writeHead(200, { 'content-type': 'application/json; charset=utf-8', 'content-length': body.length });
  res.end(body);
});
server.keepAliveTimeout = 72_000;
server.listen(port, '127.0.0.1', () => {
  const address = server.address();
  process.stdout.write(`listening ${typeof address === 'object' && address ? address.port : port}\n`);
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
