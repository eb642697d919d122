import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { errorCatalogueMarkdown } from '../src/http/error-codes.js';
import { settingsTable } from '../src/settings.js';

const ROOT = new URL('..', import.meta.url).pathname;
const readme = readFileSync(join(ROOT, 'README.md'), 'utf8');

it('README lists the error-code catalogue exactly as the service documents it', () => {
  assert.ok(readme.includes(errorCatalogueMarkdown()), 'README error table is stale: paste errorCatalogueMarkdown() output');
});

it("README's configuration tables are the settings table in code, row for row", () => {
  // The README's table of the service's settings, then the JWT settings' in the identity providers' page.
  const identityProviders = readFileSync(join(ROOT, 'docs', 'identity-providers.md'), 'utf8');
  const tables: string[][] = [];
  let current: string[] | undefined;
  for (const line of `${readme}\n${identityProviders}`.split('\n')) {
    if (line === '| Flag | Environment | Default | Meaning |') tables.push((current = []));
    if (current && line.startsWith('|')) current.push(line);
    else current = undefined;
  }
  assert.deepEqual(
    tables,
    [settingsTable('service'), settingsTable('jwt')],
    'configuration tables in README.md and docs/identity-providers.md are stale: paste settingsTable() output',
  );
});

const refused = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(false);
    });
    socket.once('error', () => resolve(true));
  });

describe("the README's quick start", () => {
  const dir = mkdtempSync(join(tmpdir(), 'plantstore-quickstart-'));
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('gives `npm ci && npm run demo`, whose process npm passes signals to', () => {
    const block = /## Quick start[\s\S]*?```sh\n([\s\S]*?)```/.exec(readme)?.[1] ?? '';
    assert.match(block, /^npm ci && npm run demo\b/m);
    const scripts = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    assert.match(scripts.demo!, /^exec node /, 'the demo script execs the server, so npm signals it directly');
  });

  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    it(`stops the demo started with npm run demo when npm gets ${signal}, leaving nothing listening`, { timeout: 60_000 }, async () => {
      const npm = spawn('npm', ['run', '-s', 'demo', '--', '--db', join(dir, `${signal}.db`), '--port', '0'], {
        cwd: ROOT,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
      const port = await new Promise<number>((resolve, reject) => {
        const onData = (chunk: Buffer) => {
          output += String(chunk);
          const match = /Server listening at http:\/\/127\.0\.0\.1:(\d+)/.exec(output);
          if (match) resolve(Number(match[1]));
        };
        npm.stdout.on('data', onData);
        npm.stderr.on('data', onData);
        void exited.then(() => reject(new Error(`the demo exited before listening:\n${output}`)));
      });
      assert.equal(await refused(port), false, 'the demo listens');
      npm.kill(signal);
      assert.equal(await exited, 0, output);
      assert.equal(await refused(port), true, `port ${port} is still taken after npm exited:\n${output}`);
    });
  }
});
