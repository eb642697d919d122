import BetterSqlite3 from 'better-sqlite3';
import {
  allRowsSql,
  firstReadIsPage,
  firstReadPositions,
  metGonePlant,
  pageFromColumns,
  scannedRows,
  visibleRowsSql,
  type ScannedColumns,
} from '../listing-sql.js';
import type { FirstFilteredPage, FirstRead, ListingRequest, PlantRow, ScannedRows, VisiblePage } from '../records.js';
import {
  allPlantsSql,
  firstVisibleRowsOf,
  groupParam,
  pageColumnsSql,
  SQLITE_GROUP_BRANCHES,
  taggedRowsSql,
  viewerGroupsAndTagSql,
  viewerGroupsSql,
  visibleCountSql,
  visiblePlantsSql,
  visiblePositionsSql,
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
    if (metGonePlant(plants)) return this.exactPage(key, limit, rows, params, groupIds);
    const page = pageFromColumns(ids, plants, limit, groupIds, true, withIds);
    if (page) return page;
    // SQLite aggregated the rows out of their order (it does not promise to keep it): the sorting statement.
    const sorted = this.get(`${key} ordered`, () => pageColumnsSql(rows(limit + 1), { ordered: true, withIds }));
    const [sortedIds, sortedPlants] = sorted.get(params) as PageColumns;
    return pageFromColumns(sortedIds, sortedPlants, limit, groupIds, true, withIds)!;
  }

  /** The page again, its ranges skipping positions of plants that are gone (see metGonePlant in listing-sql.ts). */
  private exactPage(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[]): VisiblePage {
    const exact = this.get(`${key} exact`, () => pageColumnsSql(rows(limit + 1, true), { ordered: true }));
    const [ids, plants] = exact.get(params) as PageColumns;
    return pageFromColumns(ids, plants, limit, groupIds, true)!;
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
 * pages of what a user or an admin sees, and the rows of filtered pages (store/listing.ts).
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
      groupsAndTag: raw(viewerGroupsAndTagSql(false)),
      groupsAndTagWithClaims: raw(viewerGroupsAndTagSql(true)),
    };
  }

  listPlantsVisibleTo(user: number, after: number, limit: number, claims: readonly string[]): VisiblePage {
    const { groupIds, shape, rows, params } = this.viewerQuery(user, after, claims);
    return this.listings.page(`${limit} ${shape}`, limit, rows, params, groupIds);
  }

  listAllPlants(after: number, limit: number): VisiblePage {
    return this.listings.page(`${limit} all`, limit, (n) => allPlantsSql(n), { after }, []);
  }

  /** The positions `user` sees after `after`, at most `limit`, and of them those with `tag` (RequestReads.visibleRows). */
  visibleRows(user: number, after: number, limit: number, claims: readonly string[], tag: string | undefined): ScannedRows {
    const { shape, positions, params } = this.viewerQuery(user, after, claims);
    const key = `rows ${limit} ${shape}${tag === undefined ? '' : ' tag'}`;
    const statement = this.listings.get(key, () => visibleRowsSql(positions(limit), tag === undefined ? undefined : ':tag'));
    return scannedRows(statement.all(tag === undefined ? params : { ...params, tag }) as ScannedColumns[]);
  }

  /** The plants with `tag` after `after`, at most `limit`, and of them those `user` sees (RequestReads.taggedRows). */
  taggedRows(user: number, tag: string, after: number, limit: number, claims: readonly string[]): ScannedRows {
    const { groupIds, rangedIds, shape, groupParams } = this.viewerGroups(user, claims);
    const statement = this.listings.get(`tagged ${probesSmallGroups(groupIds, rangedIds)} ${shape}`, () =>
      taggedRowsSql(probesSmallGroups(groupIds, rangedIds), shape),
    );
    return scannedRows(statement.all({ user, tag, after, limit, ...groupParams }) as ScannedColumns[]);
  }

  /** A filtered page in one read when it can be (RequestReads.firstFilteredPage). */
  firstFilteredPage(user: number, page: ListingRequest, claims: readonly string[], first: FirstRead): FirstFilteredPage {
    const { after, limit, tag } = page;
    const withIds = page.withIds === true;
    const wanted = limit + 1;
    const { groupIds, rangedIds, shape, groupParams, commonTag } = this.viewerGroups(user, claims, tag, after, first.rareBelow);
    const params = { user, after, ...(tag === undefined ? {} : { tag }), ...groupParams };
    if (tag !== undefined && !commonTag) {
      const small = probesSmallGroups(groupIds, rangedIds);
      const rows = (n: number) => taggedRowsSql(small, shape, { rare: n });
      return { page: this.listings.page(`rare ${limit} ${small} ${shape} ${withIds}`, limit, rows, params, groupIds, withIds), groupIds };
    }
    const positions = firstReadPositions(first, wanted, tag !== undefined);
    const rows = (n: number) => firstVisibleRowsOf(positions, n, shape, tag !== undefined);
    const found = this.listings.page(
      `first ${limit} ${positions} ${shape} ${tag !== undefined} ${withIds}`,
      limit,
      rows,
      params,
      groupIds,
      withIds,
    );
    // Counted only for a page that came out short.
    if (found.more) return { page: found, groupIds };
    const counted = this.listings.get(`count ${positions} ${shape}`, () => visibleCountSql(positions, shape));
    const [read] = counted.get({ user, after, ...groupParams }) as [number];
    return { page: firstReadIsPage(found, read, positions) ? found : undefined, groupIds };
  }

  /** Every plant after `after` (with `tag` when given), at most `limit` (RequestReads.allRows). */
  allRows(after: number, limit: number, tag: string | undefined): PlantRow[] {
    const rows = tag === undefined ? this.statements.allRows.all({ after, limit }) : this.statements.allTagged.all({ after, limit, tag });
    return scannedRows(rows as ScannedColumns[]).matches;
  }

  /**
   * The groups a page of `user` counts, and those it reads range by range (ranged or claimed): a few as parameters of
   * their own (`:g0`…), more as one JSON array (`:ranged`), the statement's `shape` saying which.
   */
  private viewerGroups(user: number, claims: readonly string[], tag?: string, after?: number, rareBelow?: number) {
    const claimed = claims.length > 0;
    const viewer = {
      user,
      ...(claimed ? { claims: JSON.stringify(claims) } : {}),
      ...(tag === undefined ? {} : { tag, after, rare: rareBelow }),
    };
    const statement =
      tag === undefined
        ? claimed
          ? this.statements.groupsWithClaims
          : this.statements.groups
        : claimed
          ? this.statements.groupsAndTagWithClaims
          : this.statements.groupsAndTag;
    const [counted, byRange, common] = statement.get(viewer) as [string, string, number | undefined];
    const groupIds = JSON.parse(counted) as number[];
    const rangedIds = byRange === '[]' ? [] : (JSON.parse(byRange) as number[]);
    const shape: number | 'joined' = rangedIds.length <= SQLITE_GROUP_BRANCHES ? rangedIds.length : 'joined';
    const groupParams: Record<string, number | string> = shape === 'joined' ? { ranged: byRange } : {};
    if (shape !== 'joined') for (const [i, id] of rangedIds.entries()) groupParams[groupParam(i)] = id;
    return { groupIds, rangedIds, shape, groupParams, commonTag: common === 1 };
  }

  /** The listing query of what `user` sees after `after`: its shape (a statement per shape and limit), rows and parameters. */
  private viewerQuery(user: number, after: number, claims: readonly string[]) {
    const { groupIds, shape, groupParams } = this.viewerGroups(user, claims);
    // Small groups' memberships are one range (the member grants); a ranged or claimed group is read range by range.
    const rows: Rows = (n, exact) => visiblePlantsSql(n, shape, exact);
    const positions = (n: number) => visiblePositionsSql(n, shape);
    return { groupIds, shape: String(shape), rows, positions, params: { user, after, ...groupParams } };
  }
}

/** Whether a probe of one plant reads member grants: not for a viewer all of whose groups are read range by range (or in none). */
function probesSmallGroups(groupIds: readonly number[], rangedIds: readonly number[]): boolean {
  const ranged = new Set(rangedIds);
  return groupIds.some((id) => !ranged.has(id));
}
