import { loadConfig, type ConfigInput } from './config.js';
import { DomainError } from './catalogue/errors.js';

// Entry point of one `serve --workers N` worker. The primary passes its flags; the environment is inherited.
// They are validated here again, as in the primary, rather than trusted as a finished Config.
let config;
try {
  config = loadConfig(JSON.parse(process.env.PLANTSTORE_WORKER_INPUT ?? 'null') as ConfigInput, process.env);
} catch (err) {
  const message = err instanceof DomainError || err instanceof SyntaxError ? err.message : String(err);
  process.stderr.write(
    `plantstore worker: ${process.env.PLANTSTORE_WORKER_INPUT === undefined ? 'started without PLANTSTORE_WORKER_INPUT' : message}\n`,
  );
  process.exit(1);
}
// Before the (slower) HTTP stack loads: a scrape arriving while this worker starts must still get an answer.
if (config.server.metrics) (await import('./metrics/metrics.js')).answerPrimaryScrapes();
try {
  await (await import('./server.js')).runServer(config);
} catch (err) {
  // A port taken or refused: one line, as `serve` without workers says it; the primary decides what follows.
  process.stderr.write(`plantstore worker: ${(err as Error).message}\n`);
  process.exit(1);
}
