/**
 * Merges ascending id lists (one per access branch) into the first `limit` distinct ids, ascending.
 * Branches are short (each already cut at `limit`), so a repeated min-scan beats a heap here.
 */
export function mergeSortedIds(branches: readonly (readonly number[])[], limit: number): number[] {
  const live = branches.filter((b) => b.length > 0);
  if (live.length === 1) return live[0]!.slice(0, limit);
  const cursors = new Array<number>(live.length).fill(0);
  const out: number[] = [];
  while (out.length < limit) {
    let min = Infinity;
    for (let b = 0; b < live.length; b++) {
      const id = live[b]![cursors[b]!];
      if (id !== undefined && id < min) min = id;
    }
    if (min === Infinity) break;
    out.push(min);
    for (let b = 0; b < live.length; b++) if (live[b]![cursors[b]!] === min) cursors[b] = cursors[b]! + 1;
  }
  return out;
}
