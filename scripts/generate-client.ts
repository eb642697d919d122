import { mkdir, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import openapiTS, { astToString, COMMENT_HEADER, type OpenAPI3 } from 'openapi-typescript';
import { buildApp } from '../src/app.js';
import { loadConfig } from '../src/config.js';
import { openStore } from '../src/store/open-store.js';

/** Where the committed client files live: `openapi.json` here, `schema.d.ts` under `src/`. */
export const CLIENT_DIR = fileURLToPath(new URL('../client/', import.meta.url));

export interface ClientFiles {
  /** The served OpenAPI document, pretty-printed. */
  'openapi.json': string;
  /** TypeScript types for it, from openapi-typescript. */
  'src/schema.d.ts': string;
}

const HEADER = `${COMMENT_HEADER.trimEnd()}
// Generated from the service's served OpenAPI document: run \`npm run client:generate\` after changing the API.

`;

/**
 * Renders the client files from the document the app itself serves at /openapi.json. The app is the real
 * one, built by the one factory on a private in-memory SQLite store, so no database server is needed; the
 * document does not depend on the data or the backend.
 */
export async function renderClientFiles(): Promise<ClientFiles> {
  const { store: storeConfig, app: appConfig } = loadConfig({ db: ':memory:', logLevel: 'silent' });
  const store = await openStore(storeConfig);
  try {
    const app = await buildApp({ config: appConfig, store });
    try {
      const res = await app.inject({ method: 'GET', url: '/openapi.json' });
      if (res.statusCode !== 200) throw new Error(`GET /openapi.json answered ${res.statusCode}: ${res.body}`);
      const document = res.json<OpenAPI3>();
      const ast = await openapiTS(document, { silent: true });
      return {
        'openapi.json': `${JSON.stringify(document, null, 2)}\n`,
        'src/schema.d.ts': HEADER + astToString(ast),
      };
    } finally {
      await app.close();
    }
  } finally {
    await store.close();
  }
}

/** Writes the client files under `dir` (the client package by default); returns the paths written. */
export async function generateClientFiles(dir = CLIENT_DIR): Promise<string[]> {
  const files = await renderClientFiles();
  const written: string[] = [];
  for (const [name, text] of Object.entries(files)) {
    const path = join(dir, name);
    await mkdir(resolve(path, '..'), { recursive: true });
    await writeFile(path, text);
    written.push(path);
  }
  return written;
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  for (const path of await generateClientFiles(process.argv[2])) console.log(`wrote ${path}`);
}
