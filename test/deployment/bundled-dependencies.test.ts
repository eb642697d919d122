import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { it } from 'node:test';
import { init, parse } from 'es-module-lexer';

// The built service loads kysely and TypeBox from their bundles (scripts/bundle-dependencies.ts): one import of
// either package left pointing at node_modules loads its several hundred files again. `npm test` builds first,
// so this reads the build under test.

const DIST = join(import.meta.dirname, '../../dist');
const VENDOR = join(DIST, 'vendor');

function* builtModules(dir: string): Generator<string> {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory() && path !== VENDOR) yield* builtModules(path);
    else if (entry.isFile() && entry.name.endsWith('.js')) yield path;
  }
}

it('the built service imports kysely and TypeBox from their bundles only, and each bundle is there', async () => {
  await init();
  const fromPackages: string[] = [];
  const bundles = new Set<string>();
  for (const path of builtModules(DIST)) {
    for (const { specifier } of parse(readFileSync(path, 'utf8'), path)[0]) {
      if (typeof specifier !== 'string') continue;
      if (/^(kysely|typebox)(\/|$)/.test(specifier)) fromPackages.push(`${path}: ${specifier}`);
      else if (specifier.startsWith('.') && resolve(dirname(path), specifier).startsWith(`${VENDOR}/`)) {
        bundles.add(resolve(dirname(path), specifier));
      }
    }
  }
  assert.deepEqual(fromPackages, []);
  assert.deepEqual([...bundles].map((bundle) => bundle.slice(VENDOR.length + 1)).sort(), [
    'kysely.js',
    'typebox-compile.js',
    'typebox-schema.js',
    'typebox.js',
  ]);
  for (const bundle of bundles) assert.ok(existsSync(bundle), `${bundle} is missing`);
});
