import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import stringWidth from 'string-width';
import { OPERATOR } from '../../src/catalogue/access-rule.js';
import { generateToken } from '../../src/catalogue/tokens.js';
import { openStore } from '../../src/store/open-store.js';
import { BIN, runCli } from '../helpers/processes.js';
import { addPlant } from '../helpers/http-app.js';

/** util-linux `script` gives the CLI a real pseudo-terminal, the way a person at a terminal runs it. */
function hasScript(): boolean {
  try {
    return execFileSync('script', ['--version'], { encoding: 'utf8' }).includes('util-linux');
  } catch {
    return false;
  }
}
const NO_PTY = hasScript() ? false : 'needs util-linux script(1) for a pseudo-terminal';

const quote = (s: string) => `'${s.replaceAll("'", `'\\''`)}'`;

/** Runs the CLI on a terminal; `redirect` is appended to the shell command (e.g. `> file` keeps stdout off it). */
function onTerminal(db: string, args: string[], redirect = ''): Promise<{ code: number; screen: string }> {
  const command = [process.execPath, BIN, '--db', db, ...args].map(quote).join(' ') + redirect;
  return new Promise((resolve) => {
    execFile(
      'script',
      ['-qec', command, '/dev/null'],
      { env: { ...process.env, PLANTSTORE_DB: '', TERM: 'xterm' }, maxBuffer: 64 * 1024 * 1024 },
      (error, stdout) => resolve({ code: error ? Number(error.code ?? 1) : 0, screen: stdout.replaceAll('\r\n', '\n') }),
    );
  });
}

/** Undoes the tab-separated escaping, COPY's: `\t`, `\n`, `\r`, `\\`, and other control characters' UTF-8 bytes (`\x1b`). */
const unescapeTsv = (field: string) =>
  field.replace(/((?:\\x[0-9a-f]{2})+)|\\([tnr\\])/g, (_, bytes: string | undefined, c: string) =>
    bytes !== undefined ? Buffer.from(bytes.replaceAll('\\x', ''), 'hex').toString('utf8') : { t: '\t', n: '\n', r: '\r', '\\': '\\' }[c]!,
  );

const SUMMARY = /^exported 5 records in \d+\.\d s \(\d+ records\/s\)$/;

describe('plantstore list output, progress and summaries', () => {
  let dir: string;
  let db: string;
  const oddName = 'Fern 🌿 "quoted" \\ back\u0001slash';
  const oddTag = 'tab\there\nnewline\u0007\u009b';

  before(async () => {
    dir = mkdtempSync(join(tmpdir(), 'plantstore-output-'));
    db = join(dir, 'plantstore.db');
    const store = await openStore({ db: db });
    try {
      await store.users.add('alice', false);
      await store.users.add('ünïcødé-🌵', true);
      await store.groups.add('gardeners');
      await store.groups.addMember('gardeners', 'alice');
      const fern = await addPlant(store, { name: oddName, tag: oddTag, owner: 'alice', public: true });
      await addPlant(store, { name: 'Cactus', owner: 'ünïcødé-🌵', public: false });
      await store.grants.add(fern.id, { group: 'gardeners' });
      await store.tokens.add({ user: 'alice', hash: generateToken().hash, label: 'laptop' });
    } finally {
      await store.close();
    }
  });
  after(() => rmSync(dir, { recursive: true, force: true }));

  it('--json is an array with the data, and piped output is the same rows tab-separated under a header', async () => {
    const lists: [string[], string[]][] = [
      [
        ['users', 'list'],
        ['name', 'admin'],
      ],
      [['groups', 'list'], ['name']],
      [
        ['plants', 'list'],
        ['name', 'tag', 'owner'],
      ],
      [['grants', 'list'], ['plantName']],
      [
        ['tokens', 'list'],
        ['user', 'label', 'state'],
      ],
    ];
    await Promise.all(
      lists.map(async ([command, fields]) => {
        const [json, plain] = await Promise.all([runCli(db, [...command, '--json']), runCli(db, command)]);
        assert.equal(json.code, 0, json.stderr);
        assert.equal(plain.code, 0, plain.stderr);
        const rows = JSON.parse(json.stdout) as Record<string, unknown>[];
        assert.ok(Array.isArray(rows) && rows.length > 0, `${command.join(' ')} --json: ${json.stdout}`);

        const [header, ...lines] = plain.stdout
          .split('\n')
          .slice(0, -1)
          .map((line) => line.split('\t').map(unescapeTsv));
        assert.equal(lines.length, rows.length, `${command.join(' ')}: one line per row`);
        assert.ok(
          lines.every((l) => l.length === header!.length),
          `${command.join(' ')}: every line has ${header!.length} fields`,
        );
        if (command[0] === 'plants') {
          assert.deepEqual(
            rows.map((p) => [p.name, p.tag, p.public]),
            [
              [oddName, oddTag, true],
              ['Cactus', undefined, false],
            ],
          );
        }
        for (const field of fields) {
          const column = header!.indexOf(field === 'plantName' ? 'NAME' : field.toUpperCase());
          assert.notEqual(column, -1, `${command.join(' ')}: no ${field} column in ${header!.join(',')}`);
          const shown = (v: unknown) =>
            v === undefined ? '-' : typeof v === 'boolean' ? (v ? 'yes' : 'no') : typeof v === 'string' ? v : JSON.stringify(v);
          assert.deepEqual(
            lines.map((l) => l[column]),
            rows.map((r) => shown(r[field])),
            `${command.join(' ')}: ${field} differs between --json and piped output`,
          );
        }
      }),
    );
  });

  it('an optional column tells a tag or label that is not there from one that reads "-"', async () => {
    const tagged = join(dir, 'dash-tags.db');
    const store = await openStore({ db: tagged });
    try {
      await store.users.add('alice', false);
      for (const [id, tag] of [
        [1, undefined],
        [2, '-'],
        [3, '"-"'],
      ] as const)
        await store.plants.create(OPERATOR, { id, name: `p${id}`, owner: 'alice', public: false, ...(tag === undefined ? {} : { tag }) });
    } finally {
      await store.close();
    }
    const listed = await runCli(tagged, ['plants', 'list']);
    const [header, ...lines] = listed.stdout
      .trim()
      .split('\n')
      .map((line) => line.split('\t').map(unescapeTsv));
    const tags = lines.map((line) => line[header!.indexOf('TAG')]);
    assert.deepEqual(tags, ['-', '"-"', '"\\"-\\""']);
    assert.deepEqual(
      tags.map((tag) => (tag === '-' ? undefined : tag.startsWith('"') ? (JSON.parse(tag) as string) : tag)),
      [undefined, '-', '"-"'],
    );
  });

  it("groups list's members column splits back into the names --json lists", async () => {
    const named = join(dir, 'members.db');
    const names = ['Smith, Ann', '"Quoted" Bo', 'x', 'plain, "and", quoted', 'back\\slash, x'];
    const store = await openStore({ db: named });
    try {
      await store.groups.add('gardeners');
      for (const name of names) {
        await store.users.add(name, false);
        await store.groups.addMember('gardeners', name);
      }
    } finally {
      await store.close();
    }
    const [json, plain] = await Promise.all([runCli(named, ['groups', 'list', '--json']), runCli(named, ['groups', 'list'])]);
    const { members } = (JSON.parse(json.stdout) as { members: string[] }[])[0]!;
    assert.deepEqual([...members].sort(), [...names].sort());
    const column = unescapeTsv(plain.stdout.split('\n')[1]!.split('\t')[1]!);
    const split = [...column.matchAll(/("(?:[^"\\]|\\.)*"|[^,]+)(?:, |$)/g)].map(([, member]) =>
      member!.startsWith('"') ? (JSON.parse(member!) as string) : member,
    );
    assert.deepEqual(split, members, column);
  });

  it('an error that echoes what was given shows it whole on one line, its control characters escaped', async () => {
    const run = await runCli(db, ['users', 'remove', '\u001b[2Jx\nsecond']);
    assert.equal(run.code, 1);
    assert.equal(run.stderr, 'plantstore: no user named "\\x1b[2Jx\\nsecond"\n');
  });

  it('on a terminal lists are aligned tables with control characters escaped', { skip: NO_PTY }, async () => {
    const { code, screen } = await onTerminal(db, ['plants', 'list']);
    assert.equal(code, 0, screen);
    const [header, ...rows] = screen.trimEnd().split('\n');
    assert.match(header!, /^ID\s+NAME\s+TAG\s+OWNER\s+PUBLIC$/);
    assert.equal(rows.length, 2);
    assert.doesNotMatch(screen, /[\u0001\u0007\t]/, 'control characters must not reach the terminal');
    // Every OWNER value starts under the OWNER header, counting display columns (the emoji is two wide).
    const ownerAt = header!.indexOf('OWNER');
    for (const [row, owner] of [
      [rows[0]!, 'alice'],
      [rows[1]!, 'ünïcødé-🌵'],
    ] as const) {
      assert.equal(stringWidth(row.slice(0, row.indexOf(owner))), ownerAt, `misaligned row: ${row}`);
    }
    // Shown whole, as the piped output escapes them: ESC or U+0001 would otherwise be lost as a `?`.
    assert.ok(rows[0]!.includes('Fern 🌿 "quoted" \\\\ back\\x01slash'), rows[0]);
    assert.ok(rows[0]!.includes('tab\\there\\nnewline\\x07\\xc2\\x9b'), rows[0]);
  });

  it(
    'import and export show a progress bar only on a terminal stderr, and always end with one summary line',
    { skip: NO_PTY },
    async () => {
      // Piped: stdout is exactly the data and stderr exactly the summary.
      const piped = await runCli(db, ['export']);
      assert.equal(piped.code, 0);
      assert.equal(piped.stdout.split('\n').length, 6, 'two users, one group and two plants, one a line');
      const summary = piped.stderr.trimEnd().split('\n');
      assert.equal(summary.length, 1, piped.stderr);
      assert.match(summary[0]!, SUMMARY);

      // On a terminal with stdout to a file: the bar is drawn on the terminal and the file holds only data.
      const file = join(dir, 'export.ndjson');
      const shown = await onTerminal(db, ['export'], ` > ${quote(file)}`);
      assert.equal(shown.code, 0, shown.screen);
      assert.match(shown.screen, /exporting \|/);
      assert.match(shown.screen, /exported 5 records in \d+\.\d s \(\d+ records\/s\)\n$/);
      assert.equal(readFileSync(file, 'utf8'), piped.stdout);

      const target = join(dir, 'target.db');
      const imported = await onTerminal(target, ['import', file]);
      assert.equal(imported.code, 0, imported.screen);
      assert.match(imported.screen, /importing \|/);
      assert.match(imported.screen, /imported 2 users, 1 groups, 2 plants, 1 grants in \d+\.\d s \(\d+ records\/s\)/);

      const again = join(dir, 'again.db');
      const quiet = await runCli(again, ['import', file]);
      assert.equal(quiet.code, 0, quiet.stderr);
      assert.equal(quiet.stdout, '');
      assert.match(quiet.stderr, /^imported 2 users, 1 groups, 2 plants, 1 grants in \d+\.\d s \(\d+ records\/s\)\n$/);
    },
  );
});
