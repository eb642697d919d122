import type { Viewer } from '../catalogue/access-rule.js';
import { seesEverything } from '../catalogue/access-rule.js';
import type { Awaitable } from '../awaitable.js';
import { fieldsOfRow } from '../catalogue/plant-fields.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { FirstRead, ListingRequest, PlantRow, ScannedRows, VisiblePage } from './records.js';

const EMPTY_PAGE: VisiblePage = Object.freeze({ json: '[]', ids: [], more: false, next: undefined, groupIds: [], cacheable: true });

/**
 * How far a filtered page's first read looks (see filteredPage): a tag held by fewer than `rareBelow` plants from
 * the page on is read by its index, another tag's page from the first `positions` of what the viewer sees, enough
 * that a page of 20 of a tag held by a third of those is one read.
 */
export const FIRST_READ: FirstRead = { rareBelow: 256, positions: 64 };
/** The rows a further read of a filtered page takes of each kind: twice as many as the one before, at most this. */
const LARGEST_READ = 8192;

/** Pages of the listing: what `GET /plants` reads. */
export function listingPages(d: DatabaseSeam, hot: HotQueries) {
  return {
    /**
     * One page of the plants `viewer` may see (catalogue/access-rule.ts), in catalogue order: those after position
     * `page.after`, at most `page.limit`, and whether more follow. Admins see every plant, others what the rule's
     * paths give them. A JWT's claimed groups count like stored memberships; names of no stored group grant nothing.
     * Cost grows with `limit` and the viewer's group count, not the catalogue. The page also says which groups it
     * counted: what a cached copy of it depends on. With `tag`, only the plants with that tag; with `withIds`, each
     * plant with its id (see filteredPage).
     */
    listVisiblePlants(viewer: Viewer, page: ListingRequest): Awaitable<VisiblePage> {
      if (page.limit === 0) return EMPTY_PAGE;
      if (page.tag !== undefined || page.withIds === true) return hot.run('filtered_plants', () => filteredPage(d, viewer, page));
      if (seesEverything(viewer)) return hot.run('all_plants', () => d.reads.allPlants(page, viewer.userId));
      return hot.run('visible_plants', () => d.reads.visiblePlants(viewer.userId, page, viewer.groups ?? []));
    },
  };
}

export type Listing = ReturnType<typeof listingPages>;

/**
 * A page of one tag, or with ids.
 *
 * Its first read (RequestReads.firstFilteredPage) is the whole page as a rule. A tag held by fewer than
 * FIRST_READ.rareBelow plants from the page on is read by the index of plants by tag, each plant checked against
 * the access rule (a few index probes each). Another tag's page is read from what the viewer sees, each plant's row
 * joined as it comes, and stops once it has the page: cheap when the tag is common among them.
 *
 * When that read runs out before the page is full, the page looks for its plants two ways at once, each read twice
 * as far as the one before, and ends with whichever finds the page first: what the viewer sees, each checked for
 * the tag, and the plants with the tag, each checked against the rule (cheap when the viewer sees most of them).
 * Either way's rows are the page's exactly as far as it has read, so a page costs about twice the cheaper way's
 * reads. Both are dear only for a tag common in the catalogue and rare among the many plants one viewer sees
 * (docs/performance.md).
 */
async function filteredPage(d: DatabaseSeam, viewer: Viewer, page: ListingRequest): Promise<VisiblePage> {
  const { after, limit, tag } = page;
  const wanted = limit + 1;
  const withIds = page.withIds === true;
  if (seesEverything(viewer)) return pageOf(await d.reads.allRows(after, wanted, tag), limit, [], withIds);
  const claims = viewer.groups ?? [];
  const first = await d.reads.firstFilteredPage(viewer.userId, page, claims, FIRST_READ);
  if (first.page !== undefined) return first.page;
  const { groupIds } = first;
  const seen = new Search((from, size) => d.reads.visibleRows(viewer.userId, from, size, claims, tag), after);
  const tagged =
    tag === undefined ? undefined : new Search((from, size) => d.reads.taggedRows(viewer.userId, tag, from, size, claims), after);
  for (let size = Math.max(FIRST_READ.positions, wanted); ; size = Math.min(size * 2, LARGEST_READ)) {
    if (await seen.read(size, wanted)) return pageOf(seen.found, limit, groupIds, withIds);
    if (tagged !== undefined && (await tagged.read(size, wanted))) return pageOf(tagged.found, limit, groupIds, withIds);
  }
}

/** One way of looking for a page's plants: reads in catalogue order, each from where the last one stopped. */
class Search {
  readonly found: PlantRow[] = [];

  constructor(
    private readonly next: (after: number, size: number) => Awaitable<ScannedRows>,
    private from: number,
  ) {}

  /** Reads `size` more rows; true when it has found `wanted` plants or read to the end. */
  async read(size: number, wanted: number): Promise<boolean> {
    const { matches, last, read } = await this.next(this.from, size);
    this.found.push(...matches);
    if (last !== undefined) this.from = last;
    return this.found.length >= wanted || read < size;
  }
}

/** A page of at most `limit` of the plants found (one more says that more follow), each as the listing shows it. */
function pageOf(found: readonly PlantRow[], limit: number, groupIds: readonly number[], withIds: boolean): VisiblePage {
  const shown = found.slice(0, limit);
  const json = `[${shown.map((row) => JSON.stringify(withIds ? { id: row.id, ...fieldsOfRow(row) } : fieldsOfRow(row))).join(',')}]`;
  const more = found.length > limit;
  return { json, ids: shown.map((row) => row.position), more, next: more ? found[limit]!.position : undefined, groupIds, cacheable: true };
}
