import type { Viewer } from '../catalogue/access-rule.js';
import { seesEverything } from '../catalogue/access-rule.js';
import { then, type Awaitable } from '../awaitable.js';
import { fieldsOfRow } from '../catalogue/plant-fields.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { ListingRequest, PlantRow, VisiblePage } from './records.js';

const EMPTY_PAGE: VisiblePage = Object.freeze({ json: '[]', ids: [], more: false, next: undefined, groupIds: [], cacheable: true });

/** Pages of the listing: what `GET /plants` reads. */
export function listingPages(d: DatabaseSeam, hot: HotQueries) {
  return {
    /**
     * One page of the plants `viewer` may see (catalogue/access-rule.ts), in catalogue order: those after position
     * `page.after`, at most `page.limit`, and whether more follow. Admins see every plant, others what the rule's
     * paths give them. A JWT's claimed groups count like stored memberships; names of no stored group grant nothing.
     * Cost grows with `limit` and the viewer's group count, not the catalogue. The page also says which groups it
     * counted: what a cached copy of it depends on. With `tag`, only the plants with that tag; with `withIds`, each
     * plant with its id.
     */
    listVisiblePlants(viewer: Viewer, page: ListingRequest): Awaitable<VisiblePage> {
      if (page.limit === 0) return EMPTY_PAGE;
      const filtered = page.tag !== undefined || page.withIds === true;
      if (seesEverything(viewer)) {
        return filtered
          ? hot.run('filtered_plants', () => adminsFilteredPage(d, page))
          : hot.run('all_plants', () => d.reads.allPlants(page, viewer.userId));
      }
      // A page of one tag reads the viewer's ranges of that tag (migration 0018), as many entries of each as an untagged page.
      return hot.run(filtered ? 'filtered_plants' : 'visible_plants', () =>
        d.reads.visiblePlants(viewer.userId, page, viewer.groups ?? []),
      );
    },
  };
}

export type Listing = ReturnType<typeof listingPages>;

/** An admin's page of one tag, or with ids: every plant (of that tag, by the index of plants by tag). */
function adminsFilteredPage(d: DatabaseSeam, { after, limit, tag, withIds = false }: ListingRequest): Awaitable<VisiblePage> {
  return then(d.reads.allRows(after, limit + 1, tag), (found) => pageOf(found, limit, withIds));
}

/** A page of at most `limit` of the plants found (one more says that more follow), each as the listing shows it. */
function pageOf(found: readonly PlantRow[], limit: number, withIds: boolean): VisiblePage {
  const shown = found.slice(0, limit);
  const json = `[${shown.map((row) => JSON.stringify(withIds ? { id: row.id, ...fieldsOfRow(row) } : fieldsOfRow(row))).join(',')}]`;
  const more = found.length > limit;
  return {
    json,
    ids: shown.map((row) => row.position),
    more,
    next: more ? found[limit]!.position : undefined,
    groupIds: [],
    cacheable: true,
  };
}
