import type { Config } from './config.js';

// Entry point of one `serve --workers N` worker; the primary passes the validated config in the environment.
const config = JSON.parse(process.env.PLANTSTORE_WORKER_CONFIG ?? 'null') as Config | null;
if (!config) {
  process.stderr.write('plantstore worker: started without PLANTSTORE_WORKER_CONFIG\n');
  process.exit(1);
}
// Before the (slower) HTTP stack loads: a scrape arriving while this worker starts must still get an answer.
if (config.metrics) (await import('./metrics/metrics.js')).answerPrimaryScrapes();
await (await import('./server.js')).runServer(config);
