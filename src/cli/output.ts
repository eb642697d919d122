/** Prints rows as aligned columns on a terminal or as JSON (`--json`), for every `list` command. */
export function printRows<T extends object>(rows: T[], columns: { header: string; value: (row: T) => string }[], json: boolean): void {
  if (json) {
    process.stdout.write(`${JSON.stringify(rows, null, 2)}\n`);
    return;
  }
  if (rows.length === 0) {
    process.stderr.write('(none)\n');
    return;
  }
  const cells = rows.map((row) => columns.map((c) => c.value(row).replace(/[\u0000-\u001f\u007f]/g, '?')));
  const widths = columns.map((c, i) => Math.max(c.header.length, ...cells.map((r) => r[i]!.length)));
  const line = (values: string[]) => values.map((v, i) => v.padEnd(widths[i]!)).join('  ').trimEnd();
  process.stdout.write(`${line(columns.map((c) => c.header.toUpperCase()))}\n`);
  for (const row of cells) process.stdout.write(`${line(row)}\n`);
}

export const isoDate = (d: Date | undefined): string => (d ? d.toISOString().replace(/\.\d{3}Z$/, 'Z') : '-');
