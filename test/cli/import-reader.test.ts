import assert from 'node:assert/strict';
import { Readable } from 'node:stream';
import { describe, it } from 'node:test';
import fc from 'fast-check';
import { MAX_LINE_LENGTH, readRecordBatches } from '../../src/import-format/ndjson.js';
import type { CatalogueRecord } from '../../src/import-format/records.js';
import type { NumberedRecord } from '../../src/import-format/records.js';

// The import reader splits the text itself (one batch per chunk read), so chunk boundaries, line ends and
// line numbers are its own business: wherever the input is cut, the records and their numbers are the same.

async function readAll(chunks: Array<string | Buffer>): Promise<NumberedRecord[]> {
  const all: NumberedRecord[] = [];
  for await (const batch of readRecordBatches(Readable.from(chunks, { objectMode: false }))) all.push(...batch);
  return all;
}

/** Cuts `text` at the given fractions of its byte length, as a stream delivering Buffers would. */
function cut(text: string, at: number[]): Buffer[] {
  const bytes = Buffer.from(text);
  const points = [...new Set(at.map((f) => Math.floor(f * bytes.length)))].sort((a, b) => a - b);
  const chunks: Buffer[] = [];
  let from = 0;
  for (const p of [...points, bytes.length]) {
    if (p > from) chunks.push(bytes.subarray(from, p));
    from = p;
  }
  return chunks;
}

const user = (name: string): CatalogueRecord => ({ type: 'user', name });

describe('import reader', () => {
  it('reads CRLF line ends, skips blank lines and takes a last line without a newline', async () => {
    const text = '{"type":"user","name":"a"}\r\n\r\n   \n{"type":"user","name":"b"}\n{"type":"user","name":"c"}';
    assert.deepEqual(await readAll([text]), [
      { line: 1, record: user('a') },
      { line: 4, record: user('b') },
      { line: 5, record: user('c') },
    ]);
  });

  it('ignores a byte order mark that opens the input, cut anywhere, and refuses one anywhere else', async () => {
    const text = '\uFEFF{"type":"user","name":"a"}\n{"type":"user","name":"b"}\n';
    for (const at of [[], [0.05], [0.02, 0.5]]) {
      assert.deepEqual(await readAll(cut(text, at)), [
        { line: 1, record: user('a') },
        { line: 2, record: user('b') },
      ]);
    }
    await assert.rejects(readAll(['{"type":"user","name":"a"}\n\uFEFF{"type":"user","name":"b"}\n']), /line 2: not valid JSON/);
  });

  it('skips as blank only lines of JSON whitespace, and refuses a line of any other space', async () => {
    assert.deepEqual(await readAll(['{"type":"user","name":"a"}\n \t\r\r\n']), [{ line: 1, record: user('a') }]);
    // A byte order mark past the input's start, a no-break space, a line separator: no record, and not blank.
    for (const space of ['\uFEFF', '\u00A0', '\u2028']) {
      await assert.rejects(readAll([`{"type":"user","name":"a"}\n${space}\n`]), /line 2: not valid JSON/, JSON.stringify(space));
    }
  });

  it('names the line of a bad record even when it spans chunks', async () => {
    const text = '{"type":"user","name":"a"}\n\n{"type":"user",\n';
    await assert.rejects(readAll(cut(text, [0.3, 0.9])), /line 3: not valid JSON/);
    await assert.rejects(readAll(['{"type":"user","name":"a"}\n{"type":"user","name":"b","x":1}']), /line 2: unknown field "x"/);
  });

  it("refuses a plant's id with a fraction JSON parsers lose, with its line; a zero fraction or an exponent passes", async () => {
    const plant = (id: string) => `{"type":"user","name":"a"}\n{"type":"plant","name":"P 1.5","owner":"a","id":${id}}\n`;
    for (const id of ['4503599627370496.5', '7.0000000000000000001', '70000000000000000001e-19']) {
      await assert.rejects(readAll([plant(id)]), new RegExp(`line 2: the number ${id.replace('.', '\\.')} is not a whole number, though`));
    }
    for (const [id, read] of [
      ['7.000', 7],
      ['7e0', 7],
      ['700e-2', 7],
    ] as const) {
      assert.deepEqual((await readAll([plant(id)]))[1]!.record, { type: 'plant', name: 'P 1.5', owner: 'a', id: read });
    }
  });

  it('refuses a user or group named "." or "..", which no URL path can carry, with its line; other dotted names pass', async () => {
    for (const type of ['user', 'group']) {
      for (const name of ['.', '..']) {
        const text = `{"type":"user","name":"a"}\n${JSON.stringify({ type, name })}\n`;
        const refused = new RegExp(`: line 2: ${type} name must not be "${name.replaceAll('.', '\\.')}": a URL path cannot carry it`);
        await assert.rejects(readAll([text]), refused);
      }
    }
    const dotted = ['...', '.a', 'a.', '%2E'].map(user);
    assert.deepEqual(
      await readAll([dotted.map((r) => JSON.stringify(r)).join('\n')]),
      dotted.map((record, i) => ({ line: i + 1, record })),
    );
  });

  it('refuses a line longer than any record as soon as it is, without reading the rest', async () => {
    const piece = 'x'.repeat(1024 * 1024);
    async function* endless() {
      yield '{"type":"user","name":"a"}\n{"type":"user","name":"';
      for (;;) yield piece;
    }
    await assert.rejects(
      async () => {
        for await (const batch of readRecordBatches(Readable.from(endless(), { objectMode: false }))) void batch;
      },
      new RegExp(`line 2: longer than ${MAX_LINE_LENGTH} bytes`),
    );
  });

  it('refuses bytes that are not UTF-8 with their line, however the input is cut, where a U+FFFD would have been stored', async () => {
    const text = Buffer.concat([
      Buffer.from('{"type":"user","name":"a"}\n\n{"type":"user","name":"caf'),
      Buffer.from([0xe9]),
      Buffer.from('"}\n{"type":"user","name":"b"}\n'),
    ]);
    for (let i = 1; i < text.length; i++) {
      const chunks = [text.subarray(0, i), text.subarray(i)];
      await assert.rejects(readAll(chunks), /line 3: not valid UTF-8/, `cut at ${i}`);
    }
    // U+FFFD written as UTF-8 is a character like any other.
    assert.deepEqual(await readAll([Buffer.from('{"type":"user","name":"a\uFFFD"}\n')]), [{ line: 1, record: user('a\uFFFD') }]);
  });

  it('keeps multi-byte characters cut between chunks whole', async () => {
    const text = '{"type":"user","name":"Zoë 🌵"}\n';
    for (let i = 1; i < Buffer.byteLength(text); i++) {
      assert.deepEqual(await readAll(cut(text, [i / Buffer.byteLength(text)])), [{ line: 1, record: user('Zoë 🌵') }]);
    }
  });

  it('gives the same numbered records wherever the input is cut (property)', async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.oneof(
            fc.constant(''),
            fc.array(fc.constantFrom('a', 'z', '7', 'é', '🌵', ' ', '"'), { minLength: 1, maxLength: 8 }).map((c) => `u${c.join('')}x`),
          ),
          { maxLength: 30 },
        ),
        fc.array(fc.double({ min: 0, max: 1, noNaN: true }), { maxLength: 8 }),
        fc.constantFrom('\n', '\r\n'),
        async (names, at, eol) => {
          // An empty entry is a blank line; every other one a user record.
          const lines = names.map((n) => (n === '' ? '' : JSON.stringify(user(n))));
          const expected = names.flatMap((n, i) => (n === '' ? [] : [{ line: i + 1, record: user(n) }]));
          assert.deepEqual(await readAll(cut(lines.map((l) => l + eol).join(''), at)), expected);
        },
      ),
      { numRuns: 200 },
    );
  });
});
