import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';

// COPY FROM STDIN in its text format: escaping, rows buffered before their ids are known, and the copy itself.

/** A value in COPY's text format: backslash, tab, newline and carriage return escaped (NUL is refused earlier). */
export function copyText(value: string): string {
  return /[\\\t\n\r]/.test(value) ? value.replace(/[\\\t\n\r]/g, (c) => COPY_ESCAPES[c]!) : value;
}
const COPY_ESCAPES: Record<string, string> = { '\\': '\\\\', '\t': '\\t', '\n': '\\n', '\r': '\\r' };

/**
 * A batch's COPY rows of plants, all but the ids (reserved when the batch is written), kept in a Buffer: held
 * as strings until then, they survived every young-generation GC and were copied each time.
 */
export class PlantRows {
  private bytes = Buffer.allocUnsafe(1 << 16);
  private readonly ends: number[] = [];

  get count(): number {
    return this.ends.length;
  }

  add(row: string): void {
    const start = this.ends.at(-1) ?? 0;
    if (start + 3 * row.length > this.bytes.length) {
      const bigger = Buffer.allocUnsafe(2 * (start + 3 * row.length));
      this.bytes.copy(bigger, 0, 0, start);
      this.bytes = bigger;
    }
    this.ends.push(start + this.bytes.write(row, start));
  }

  /** The rows, each with its id in front. */
  withIds(ids: number[]): Buffer {
    // An id below 2^53 has at most 16 digits.
    const out = Buffer.allocUnsafe((this.ends.at(-1) ?? 0) + 16 * this.count);
    let length = 0;
    let start = 0;
    this.ends.forEach((end, i) => {
      length += out.write(String(ids[i]), length, 'latin1');
      length += this.bytes.copy(out, length, start, end);
      start = end;
    });
    return out.subarray(0, length);
  }
}

/** The COPY rows of grants given as (plant index, grantee id) pairs, each with its plant's tag (COPY text, by index). */
export function grantRows(pairs: number[], ids: number[], tags: string[]): string {
  let text = '';
  for (let i = 0; i < pairs.length; i += 2) text += `${pairs[i + 1]}\t${ids[pairs[i]!]}\t${tags[pairs[i]!]}\n`;
  return text;
}

/**
 * Runs a `COPY … FROM STDIN` of rows already in COPY text format, handed to the socket in one piece: written
 * in chunks, each waited for the socket to drain, so the next went out only once Node was done with the
 * records at hand, and the database waited meanwhile.
 */
export async function copyInto(client: pg.PoolClient, statement: string, rows: string | Buffer): Promise<void> {
  if (rows.length === 0) return;
  await pipeline(Readable.from([rows]), client.query(copyFrom(statement)));
}
