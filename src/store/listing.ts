import type { Viewer } from '../catalogue/access-rule.js';
import { seesEverything } from '../catalogue/access-rule.js';
import type { Awaitable } from '../awaitable.js';
import { fieldsOfRow } from '../catalogue/plant-fields.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { ListingRequest, PlantRow, ScannedRows, VisiblePage } from './records.js';

const EMPTY_PAGE: VisiblePage = Object.freeze({ json: '[]', ids: [], more: false, next: undefined, groupIds: [], cacheable: true });

/**
 * The rows a filtered page's first reads take of each kind; each further read takes twice as many. Enough that a
 * page of 20 of a tag held by a third of what a viewer sees is one read.
 */
const FIRST_READ = 64;
/** A tag held by fewer plants than this (from a page's start on) is read whole, by its index, with one statement. */
const RARE_TAG = 256;
/** The most rows one read takes, however long a page's search goes on. */
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
 * A page of one tag, or with ids: the database's rows, each plant serialized here.
 *
 * A tag held by fewer than RARE_TAG plants from the page on is read whole by the index of plants by tag, each plant
 * checked against the access rule (a few index probes each). Another tag's page looks for its plants two ways at
 * once, each read twice as far as the one before, and ends with whichever finds the page first: what the viewer
 * sees, each checked for the tag (cheap when the tag is common among them), and the plants with the tag, each
 * checked against the rule (cheap when the viewer sees most of them). Either way's rows are the page's exactly as
 * far as it has read, so a page costs about twice the cheaper way's reads. Both are dear only for a tag common in
 * the catalogue and rare among the many plants one viewer sees (docs/performance.md).
 */
async function filteredPage(d: DatabaseSeam, viewer: Viewer, page: ListingRequest): Promise<VisiblePage> {
  const { after, limit, tag } = page;
  const wanted = limit + 1;
  const withIds = page.withIds === true;
  if (seesEverything(viewer)) return pageOf(await d.reads.allRows(after, wanted, tag), limit, [], withIds);
  const claims = viewer.groups ?? [];
  const basis = await d.reads.pageBasis(viewer.userId, claims, tag === undefined ? undefined : { tag, after, cap: RARE_TAG });
  const { groupIds } = basis;
  const seen = new Search((from, size) => d.reads.visibleRows(viewer.userId, from, size, claims, tag), after);
  if (tag === undefined) {
    for (let size = wanted; ; size = Math.min(size * 2, LARGEST_READ)) {
      if (await seen.read(size, wanted)) return pageOf(seen.found, limit, groupIds, withIds);
    }
  }
  const tagged = new Search((from, size) => d.reads.taggedRows(viewer.userId, tag, from, size, claims), after);
  if (basis.tagged! < RARE_TAG) {
    return pageOf(await d.reads.taggedPlants(viewer.userId, tag, after, claims), limit, groupIds, withIds);
  }
  for (let size = Math.max(FIRST_READ, wanted); ; size = Math.min(size * 2, LARGEST_READ)) {
    if (await seen.read(size, wanted)) return pageOf(seen.found, limit, groupIds, withIds);
    if (await tagged.read(size, wanted)) return pageOf(tagged.found, limit, groupIds, withIds);
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
