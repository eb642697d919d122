import { existsSync } from 'node:fs';
import { copyFile, readdir, readFile, writeFile } from 'node:fs/promises';
import { basename, dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { init, parse } from 'es-module-lexer';

/**
 * Runs after `tsc` (`npm run build:service`): kysely and TypeBox become one module each (TypeBox's entry points
 * sharing their chunks) under `dist/vendor/`, and the built service imports them from there. Node 20 resolves,
 * reads and links an ES module graph file by file, and these two packages are about 500 files: loading them was
 * most of a command's start, which an import or a new serving process pays whole. The sources and the tests run
 * from the sources keep importing the packages themselves; the bundles are built from the same installed copies.
 */

const DIST = fileURLToPath(new URL('../dist/', import.meta.url));
const VENDOR = join(DIST, 'vendor');

/** Each bundled specifier and the module under `dist/vendor/` that replaces it. */
const BUNDLED = new Map([
  ['kysely', 'kysely.js'],
  ['typebox', 'typebox.js'],
  ['typebox/schema', 'typebox-schema.js'],
  ['typebox/compile', 'typebox-compile.js'],
]);

const LICENSES = [
  ['kysely', 'LICENSE'],
  ['typebox', 'license'],
] as const;

async function bundle(): Promise<void> {
  const entryPoints = Object.fromEntries(
    [...BUNDLED].map(([specifier, file]) => [file.replace(/\.js$/, ''), fileURLToPath(import.meta.resolve(specifier))]),
  );
  await build({
    entryPoints,
    outdir: VENDOR,
    bundle: true,
    splitting: true,
    format: 'esm',
    platform: 'node',
    target: 'node20',
    chunkNames: 'chunk-[hash]',
    legalComments: 'eof',
    logLevel: 'warning',
  });
  for (const [name, file] of LICENSES) await copyFile(join(packageDir(name), file), join(VENDOR, `${name}.LICENSE`));
}

/** The installed package's folder: the nearest above its entry point that holds its package.json. */
function packageDir(name: string): string {
  for (let dir = dirname(fileURLToPath(import.meta.resolve(name))); dir !== dirname(dir); dir = dirname(dir)) {
    if (existsSync(join(dir, 'package.json')) && basename(dir) === name) return dir;
  }
  throw new Error(`cannot find the folder of ${name}`);
}

async function* builtModules(dir: string): AsyncGenerator<string> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory() && path !== VENDOR) yield* builtModules(path);
    else if (entry.isFile() && entry.name.endsWith('.js')) yield path;
  }
}

/** Points a built module's imports of the bundled packages at their bundles; returns whether it changed. */
async function pointAtBundles(path: string): Promise<boolean> {
  const code = await readFile(path, 'utf8');
  const [imports] = parse(code, path);
  let out = '';
  let from = 0;
  for (const { type, specifier, start, end } of imports) {
    const file = typeof specifier === 'string' ? BUNDLED.get(specifier) : undefined;
    if (file === undefined) continue;
    let target = relative(dirname(path), join(VENDOR, file)).split(sep).join('/');
    if (!target.startsWith('.')) target = `./${target}`;
    // A dynamic import's span holds the quoted literal; a static one's only what is between the quotes.
    out += code.slice(from, start) + (type === 'dynamic' ? JSON.stringify(target) : target);
    from = end;
  }
  if (from === 0) return false;
  await writeFile(path, out + code.slice(from));
  return true;
}

await init();
await bundle();
let changed = 0;
for await (const path of builtModules(DIST)) if (await pointAtBundles(path)) changed++;
if (changed === 0) throw new Error('no built module imports kysely or TypeBox: is dist/ built?');
