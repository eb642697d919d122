import { readFileSync } from 'node:fs';

/** The service version, from package.json (one source); also reported by `plantstore --version`. */
export const VERSION: string = (JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string })
  .version;
