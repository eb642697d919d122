import BetterSqlite3 from 'better-sqlite3';
import { allRowsSql, metGonePlant, pageFromColumns, plantRows, type RowColumns } from '../listing-sql.js';
import type { ListingRequest, PlantRow, VisiblePage } from '../records.js';
import {
  allPlantsSql,
  groupParam,
  pageColumnsSql,
  SQLITE_GROUP_BRANCHES,
  viewerGroupsSql,
  visiblePlantsSql,
} from './sqlite-listing-sql.js';

/** Listing statements kept prepared, one per limit and shape (see sqlite-listing-sql.ts); the least recently made go first. */
const PREPARED_LISTINGS = 64;

type PageColumns = [ids: string, plants: string];

/** The query of a listing's rows (id, name, tag) in id order, at most `limit`; `exact` skips gone plants' positions. */
type Rows = (limit: number, exact?: boolean) => string;

/**
 * Listing statements made on first use, by key, the most recent PREPARED_LISTINGS kept. Each reads one row more
 * than the page holds and answers page columns (see pageColumnsSql): better-sqlite3 builds each row through
 * V8's generic property API, which costs more than the whole index work of a page, and the body would then be
 * serialized again; SQLite's JSON functions build it at once.
 */
class PreparedListings {
  private readonly statements = new Map<string, BetterSqlite3.Statement<unknown[]>>();

  constructor(private readonly db: BetterSqlite3.Database) {}

  /**
   * A page of at most `limit` plants that counted `groupIds`. `rows(limit + 1)` is the query of its rows (id,
   * name, tag) in id order, and `key` names it (with its limit).
   */
  page(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[], withIds = false): VisiblePage {
    const [ids, plants] = this.get(key, () => pageColumnsSql(rows(limit + 1), { withIds })).get(params) as PageColumns;
    if (metGonePlant(plants)) return this.exactPage(key, limit, rows, params, groupIds, withIds);
    const page = pageFromColumns(ids, plants, limit, groupIds, true, withIds);
    if (page) return page;
    // SQLite aggregated the rows out of their order (it does not promise to keep it): the sorting statement.
    const sorted = this.get(`${key} ordered`, () => pageColumnsSql(rows(limit + 1), { ordered: true, withIds }));
    const [sortedIds, sortedPlants] = sorted.get(params) as PageColumns;
    return pageFromColumns(sortedIds, sortedPlants, limit, groupIds, true, withIds)!;
  }

  /** The page again, its ranges skipping positions of plants that are gone (see metGonePlant in listing-sql.ts). */
  private exactPage(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[], withIds: boolean): VisiblePage {
    const exact = this.get(`${key} exact`, () => pageColumnsSql(rows(limit + 1, true), { ordered: true, withIds }));
    const [ids, plants] = exact.get(params) as PageColumns;
    return pageFromColumns(ids, plants, limit, groupIds, true, withIds)!;
  }

  /** The statement of `key`, made from `sql` on first use: rows as arrays, in the order of its columns. */
  get(key: string, sql: () => string): BetterSqlite3.Statement<unknown[]> {
    let statement = this.statements.get(key);
    if (statement === undefined) {
      if (this.statements.size >= PREPARED_LISTINGS) this.statements.delete(this.statements.keys().next().value!);
      statement = this.db.prepare(sql()).raw(true);
      this.statements.set(key, statement);
    }
    return statement;
  }
}

/**
 * The listing's reads on a SQLite store's read connection (see SqliteReadsAndChanges, which holds their snapshot):
 * pages of what a user or an admin sees (of one tag, with ids), and the rows of an admin's filtered pages (store/listing.ts).
 */
export class SqliteListingReads {
  private readonly listings: PreparedListings;
  private readonly statements;

  constructor(db: BetterSqlite3.Database) {
    const raw = (sql: string) => db.prepare(sql).raw(true);
    this.listings = new PreparedListings(db);
    this.statements = {
      allRows: raw(allRowsSql({ after: ':after', limit: ':limit' })),
      allTagged: raw(allRowsSql({ after: ':after', limit: ':limit', tag: ':tag' })),
      groups: raw(viewerGroupsSql(false)),
      groupsWithClaims: raw(viewerGroupsSql(true)),
    };
  }

  /** A page of what `user` sees, of one tag when `page.tag` names one, with ids when `page.withIds` (RequestReads.visiblePlants). */
  listPlantsVisibleTo(user: number, page: ListingRequest, claims: readonly string[]): VisiblePage {
    return this.pageOfViewer(user, page, this.viewerGroups(user, claims));
  }

  /**
   * The pages of several users (without claims), as listPlantsVisibleTo reads each: every viewer's groups first, then
   * every page, so that each statement runs right after itself (see SqliteTokenPages).
   */
  listPlantsVisibleToEach(asks: ReadonlyArray<{ user: number; page: ListingRequest }>): VisiblePage[] {
    const groups = asks.map(({ user }) => this.viewerGroups(user, []));
    return asks.map(({ user, page }, i) => this.pageOfViewer(user, page, groups[i]!));
  }

  private pageOfViewer(
    user: number,
    { after, limit, tag, withIds = false }: ListingRequest,
    { groupIds, shape, groupParams }: ReturnType<SqliteListingReads['viewerGroups']>,
  ): VisiblePage {
    const tagged = tag !== undefined;
    // Small groups' memberships are one range (the member grants); a ranged or claimed group is read range by range.
    const rows: Rows = (n, exact) => visiblePlantsSql(n, shape, { exact, tagged, withIds });
    const params = { user, after, ...groupParams, ...(tagged ? { tag } : {}) };
    return this.listings.page(`${limit} ${shape} ${tagged} ${withIds}`, limit, rows, params, groupIds, withIds);
  }

  listAllPlants(after: number, limit: number): VisiblePage {
    return this.listings.page(`${limit} all`, limit, (n) => allPlantsSql(n), { after }, []);
  }

  /** Every plant after `after` (with `tag` when given), at most `limit` (RequestReads.allRows). */
  allRows(after: number, limit: number, tag: string | undefined): PlantRow[] {
    const rows = tag === undefined ? this.statements.allRows.all({ after, limit }) : this.statements.allTagged.all({ after, limit, tag });
    return plantRows(rows as RowColumns[]);
  }

  /**
   * The groups a page of `user` counts, and those it reads range by range (ranged or claimed): a few as parameters of
   * their own (`:g0`…), more as one JSON array (`:ranged`), the statement's `shape` saying which.
   */
  private viewerGroups(user: number, claims: readonly string[]) {
    const claimed = claims.length > 0;
    const viewer = { user, ...(claimed ? { claims: JSON.stringify(claims) } : {}) };
    const statement = claimed ? this.statements.groupsWithClaims : this.statements.groups;
    const [counted, byRange] = statement.get(viewer) as [string, string];
    const groupIds = JSON.parse(counted) as number[];
    const rangedIds = byRange === '[]' ? [] : (JSON.parse(byRange) as number[]);
    const shape: number | 'joined' = rangedIds.length <= SQLITE_GROUP_BRANCHES ? rangedIds.length : 'joined';
    const groupParams: Record<string, number | string> = shape === 'joined' ? { ranged: byRange } : {};
    if (shape !== 'joined') for (const [i, id] of rangedIds.entries()) groupParams[groupParam(i)] = id;
    return { groupIds, shape, groupParams };
  }
}
