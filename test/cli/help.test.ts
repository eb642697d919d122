import assert from 'node:assert/strict';
import { it } from 'node:test';
import { runCli } from '../helpers/processes.js';

/** The sub-commands a --help output lists, with their descriptions (commander's "Commands:" section). */
function listedCommands(help: string): { name: string; description: string }[] {
  const section = /\nCommands:\n([\s\S]*?)(?:\n\n|$)/.exec(help)?.[1] ?? '';
  // A command starts a line at two spaces of indent; deeper-indented lines continue a wrapped description.
  return [...section.matchAll(/^ {2}(\S+)(?: [^\n]*?)? {2,}(\S[^\n]*)$/gm)]
    .map((m) => ({ name: m[1]!, description: m[2]!.trim() }))
    .filter((c) => c.name !== 'help');
}

it('every command and sub-command has a description and --help with examples', async () => {
  const seen: string[] = [];
  // At most three processes at a time: quick enough, and gentle on a busy two-core machine.
  let running = 0;
  const waiting: Array<() => void> = [];
  const help = async (path: string[]) => {
    while (running >= 3) await new Promise<void>((resolve) => waiting.push(resolve));
    running++;
    try {
      return await runCli(':memory:', [...path, '--help']);
    } finally {
      running--;
      waiting.shift()?.();
    }
  };
  const visit = async (path: string[]): Promise<void> => {
    const run = await help(path);
    const name = ['plantstore', ...path].join(' ');
    assert.equal(run.code, 0, `${name} --help exited ${run.code}: ${run.stderr}`);
    assert.match(run.stdout, /^Usage: plantstore/, `${name} --help has no usage line`);
    const examples = /\nExamples:\n((?: {2}\S.*\n)+)/.exec(run.stdout);
    assert.ok(examples, `${name} --help has no "Examples:" section:\n${run.stdout}`);
    assert.ok(
      examples[1]!.split('\n').some((line) => line.includes('plantstore')),
      `${name} examples show no plantstore command line`,
    );
    // Clean help: a default shown once per option, unquoted, and never "default required".
    const options = run.stdout.replace(/\n {20,}/g, ' ').split('\n');
    for (const line of options) assert.ok((line.match(/\bdefault\b/g) ?? []).length <= 1, `${name}: default twice in "${line}"`);
    assert.doesNotMatch(run.stdout, /\(default: "/, `${name} --help quotes a default`);
    assert.doesNotMatch(run.stdout, /default required/, `${name} --help says "default required"`);
    seen.push(path.join(' '));
    const children = listedCommands(run.stdout);
    for (const child of children) assert.ok(child.description.length > 0, `${name} ${child.name} has no description`);
    await Promise.all(children.map((child) => visit([...path, child.name])));
  };
  await visit([]);

  // The walk must really have reached the leaves, or a broken parser would pass vacuously.
  for (const expected of [
    'users add',
    'groups add-member',
    'plants list',
    'plants show',
    'plants update',
    'grants remove',
    'tokens revoke',
    'import',
    'export',
    'doctor',
    'serve',
  ]) {
    assert.ok(seen.includes(expected), `the walk did not reach "${expected}"; saw ${seen.join(', ')}`);
  }
  assert.ok(seen.length >= 25, `only ${seen.length} commands walked`);
});

it('help followed by a command path shows the help of its last command', async () => {
  for (const path of [
    ['users', 'add'],
    ['webhooks', 'rotate-secret'],
  ]) {
    const flag = await runCli(':memory:', [...path, '--help']);
    const asked = await runCli(':memory:', ['help', ...path]);
    assert.equal(asked.code, 0, asked.stderr);
    assert.match(asked.stdout, new RegExp(`^Usage: plantstore ${path.join(' ')} `));
    assert.equal(asked.stdout, flag.stdout);
  }
  assert.match((await runCli(':memory:', ['help', 'users'])).stdout, /^Usage: plantstore users /);
});
