import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { it } from 'node:test';
import { errorCatalogueMarkdown } from '../src/http/error-catalogue.js';

it('README lists the error-code catalogue exactly as the service documents it', () => {
  const readme = readFileSync(new URL('../README.md', import.meta.url), 'utf8');
  assert.ok(readme.includes(errorCatalogueMarkdown()), 'README error table is stale: paste errorCatalogueMarkdown() output');
});
