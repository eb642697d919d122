import type { Viewer } from '../catalogue/access-rule.js';
import { seesEverything } from '../catalogue/access-rule.js';
import type { Awaitable } from '../awaitable.js';
import type { DatabaseSeam } from './seam.js';
import type { HotQueries } from './hot-queries.js';
import type { PageRequest, VisiblePage } from './records.js';

const EMPTY_PAGE: VisiblePage = Object.freeze({ json: '[]', ids: [], more: false, next: undefined, groupIds: [], cacheable: true });

/** Pages of the listing: what `GET /plants` reads. */
export function listingPages(d: DatabaseSeam, hot: HotQueries) {
  return {
    /**
     * One page of the plants `viewer` may see (catalogue/access-rule.ts), in catalogue order: those after position
     * `page.after`, at most `page.limit`, and whether more follow. Admins see every plant, others what the rule's
     * paths give them. A JWT's claimed groups count like stored memberships; names of no stored group grant nothing.
     * Cost grows with `limit` and the viewer's group count, not the catalogue. The page also says which groups it
     * counted: what a cached copy of it depends on.
     */
    listVisiblePlants(viewer: Viewer, page: PageRequest): Awaitable<VisiblePage> {
      if (page.limit === 0) return EMPTY_PAGE;
      if (seesEverything(viewer)) return hot.run('all_plants', () => d.reads.allPlants(page, viewer.userId));
      return hot.run('visible_plants', () => d.reads.visiblePlants(viewer.userId, page, viewer.groups ?? []));
    },
  };
}

export type Listing = ReturnType<typeof listingPages>;
