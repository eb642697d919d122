import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';

// The container image is built from the files .dockerignore leaves. Where a container engine answers, the image
// is built; everywhere, the Dockerfile's build stage runs on that context: each COPY from it, and each RUN step
// but those that need the image's root (apt-get) or would change this repository's install (the packages come
// from the repository's own install of the same lockfile instead of npm ci, and are not rebuilt or pruned).

const ROOT = new URL('../..', import.meta.url).pathname;

/** The files of the working tree the allow-list .dockerignore keeps (`*`, then `!path` and `!dir/` lines). */
function buildContext(): string[] {
  const rules = readFileSync(join(ROOT, '.dockerignore'), 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'));
  assert.equal(rules[0], '*', '.dockerignore is an allow-list');
  const kept = rules.slice(1).map((rule) => {
    assert.match(rule, /^![\w./-]+$/, `a rule this test reads: ${rule}`);
    return rule.slice(1);
  });
  const files: string[] = [];
  const walk = (dir: string) => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name);
      const name = relative(ROOT, path);
      if (entry.isDirectory()) {
        if (entry.name !== 'node_modules' && entry.name !== '.git') walk(path);
      } else if (kept.some((rule) => (rule.endsWith('/') ? name.startsWith(rule) : name === rule))) files.push(name);
    }
  };
  walk(ROOT);
  return files;
}

/** The build stage's instructions, one per line (continuations joined). */
function buildStage(): Array<{ instruction: string; args: string }> {
  const text = readFileSync(join(ROOT, 'Dockerfile'), 'utf8').replaceAll(/\\\n/g, ' ');
  const stages = text.split(/^FROM /m).slice(1);
  return stages[0]!
    .split('\n')
    .slice(1)
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const [instruction, ...rest] = line.split(/\s+/);
      return { instruction: instruction!, args: rest.join(' ') };
    });
}

const engine = spawnSync('docker', ['info'], { encoding: 'utf8', timeout: 10_000 });
const noEngine = engine.status === 0 ? false : 'no container engine answers here';

describe('the container image', () => {
  it("builds from the context .dockerignore leaves: the Dockerfile's build stage, step by step", { timeout: 120_000 }, () => {
    const context = buildContext();
    const app = mkdtempSync(join(tmpdir(), 'plantstore-image-'));
    try {
      for (const { instruction, args } of buildStage()) {
        if (instruction === 'COPY') {
          const [...sources] = args.split(/\s+/);
          const destination = sources.pop()!;
          for (const source of sources) {
            const inContext = context.filter((file) => file === source || file.startsWith(`${source}/`));
            assert.ok(inContext.length > 0, `COPY ${source}: not in the build context .dockerignore leaves`);
            const target =
              destination.endsWith('/') && sources.length > 1
                ? join(app, destination, source)
                : join(app, destination === './' ? source : destination);
            for (const file of inContext)
              cpSync(join(ROOT, file), file === source ? target : join(target, relative(source, file)), { recursive: true });
          }
        } else if (instruction === 'RUN') {
          for (const step of args.split('&&').map((s) => s.trim())) {
            if (/^(apt-get|rm -rf \/var\/lib\/apt)/.test(step) || /^npm (rebuild|prune)\b/.test(step)) continue;
            if (/^npm ci\b/.test(step)) {
              symlinkSync(join(ROOT, 'node_modules'), join(app, 'node_modules'));
              continue;
            }
            const run = spawnSync('bash', ['-c', step], { cwd: app, encoding: 'utf8' });
            assert.equal(run.status, 0, `RUN ${step}: ${run.stderr}${run.stdout}`);
          }
        }
      }
      assert.ok(existsSync(join(app, 'dist/cli/main.js')), 'the build stage made the CLI the image runs');
      const version = spawnSync(process.execPath, ['dist/cli/main.js', '--version'], { cwd: app, encoding: 'utf8' });
      assert.equal(version.status, 0, version.stderr);
    } finally {
      rmSync(app, { recursive: true, force: true });
    }
  });

  it('builds as an image where a container engine answers', { skip: noEngine, timeout: 900_000 }, () => {
    const build = spawnSync('docker', ['build', '--quiet', ROOT], { encoding: 'utf8' });
    assert.equal(build.status, 0, build.stderr);
  });
});
