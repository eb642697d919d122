import { createServer, type ServerResponse } from 'node:http';

// The receiver of the event rows of `npm run bench`, in a process of its own so that its CPU is not counted as the
// sender's: a bare node:http server on loopback answering 200 at any path but /hang, which never answers. It counts
// deliveries by path, and duplicates by path and webhook-id (one event goes to every endpoint with one id) and notes when each plant arrived (epoch ms, fractional).
// GET /_state reads the counts and arrivals; GET /_counts the counts alone, cheap enough to ask for every few ms while a
// drain runs (the arrivals of 20,000 deliveries are half a megabyte of JSON); POST /_reset forgets them.

let byPath = new Map<string, number>();
let seen = new Set<string>();
let duplicates = 0;
let arrivals: Record<number, number> = {};
const held: ServerResponse[] = [];
const counts = () => ({ byPath: Object.fromEntries(byPath), unique: seen.size, duplicates });

const server = createServer((req, res) => {
  const chunks: Buffer[] = [];
  req.on('data', (chunk: Buffer) => chunks.push(chunk));
  req.on('end', () => {
    const path = req.url ?? '';
    if (path === '/_counts') return res.end(JSON.stringify(counts()));
    if (path === '/_state') return res.end(JSON.stringify({ ...counts(), arrivals }));
    if (path === '/_reset') {
      [byPath, seen, duplicates, arrivals] = [new Map(), new Set(), 0, {}];
      for (const r of held.splice(0)) r.destroy();
      return res.end('{}');
    }
    const at = performance.timeOrigin + performance.now();
    if (path === '/hang') return void held.push(res);
    const id = `${path} ${String(req.headers['webhook-id'])}`;
    if (seen.has(id)) duplicates += 1;
    else seen.add(id);
    byPath.set(path, (byPath.get(path) ?? 0) + 1);
    arrivals[(JSON.parse(Buffer.concat(chunks).toString()) as { id: number }).id] ??= at;
    res.end();
  });
});
server.keepAliveTimeout = 60_000;
server.listen(0, '127.0.0.1', () => process.stdout.write(`listening ${(server.address() as { port: number }).port}\n`));
