import BetterSqlite3 from 'better-sqlite3';
import {
  allRowsSql,
  countTaggedSql,
  metGonePlant,
  pageFromColumns,
  scannedRows,
  visibleRowsSql,
  type ScannedColumns,
} from '../listing-sql.js';
import type { PageBasis, PlantRow, ScannedRows, TagCount, VisiblePage } from '../records.js';
import {
  allPlantsSql,
  groupParam,
  pageColumnsSql,
  SQLITE_GROUP_BRANCHES,
  taggedRowsSql,
  viewerGroupsSql,
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
  page(key: string, limit: number, rows: Rows, params: object, groupIds: readonly number[]): VisiblePage {
    const [ids, plants] = this.get(key, () => pageColumnsSql(rows(limit + 1))).get(params) as PageColumns;
    if (metGonePlant(plants)) return this.exactPage(key, limit, rows, params, groupIds);
    const page = pageFromColumns(ids, plants, limit, groupIds, true);
    if (page) return page;
    // SQLite aggregated the rows out of their order (it does not promise to keep it): the sorting statement.
    const sorted = this.get(`${key} ordered`, () => pageColumnsSql(rows(limit + 1), { ordered: true }));
    const [sortedIds, sortedPlants] = sorted.get(params) as PageColumns;
    return pageFromColumns(sortedIds, sortedPlants, limit, groupIds, true)!;
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
      countTagged: raw(countTaggedSql({ tag: ':tag', after: ':after', cap: ':cap' })),
      allTagged: raw(allRowsSql({ after: ':after', limit: ':limit', tag: ':tag' })),
      groups: raw(viewerGroupsSql(false)),
      groupsWithClaims: raw(viewerGroupsSql(true)),
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
    return scannedRows(this.tagged(user, tag, after, claims, limit));
  }

  /** Every plant with `tag` after `after` that `user` sees (RequestReads.taggedPlants). */
  taggedPlants(user: number, tag: string, after: number, claims: readonly string[]): PlantRow[] {
    return scannedRows(this.tagged(user, tag, after, claims)).matches;
  }

  /** The rows of taggedRowsSql (with a limit) or of a whole tag (without), for `user`'s groups. */
  private tagged(user: number, tag: string, after: number, claims: readonly string[], limit?: number): ScannedColumns[] {
    const { groupIds, rangedIds, shape, groupParams } = this.viewerGroups(user, claims);
    const params = { user, tag, after, ...(limit === undefined ? {} : { limit }), ...groupParams };
    // A viewer all of whose groups are read range by range (or who is in none) has no member grants to probe.
    const ranged = new Set(rangedIds);
    const small = groupIds.some((id) => !ranged.has(id));
    const whole = limit === undefined;
    const statement = this.listings.get(`tagged ${small} ${shape} ${whole}`, () => taggedRowsSql(small, shape, { whole }));
    return statement.all(params) as ScannedColumns[];
  }

  /** Every plant after `after` (with `tag` when given), at most `limit` (RequestReads.allRows). */
  allRows(after: number, limit: number, tag: string | undefined): PlantRow[] {
    const rows = tag === undefined ? this.statements.allRows.all({ after, limit }) : this.statements.allTagged.all({ after, limit, tag });
    return scannedRows(rows as ScannedColumns[]).matches;
  }

  pageBasis(user: number, claims: readonly string[], tagged: TagCount | undefined): PageBasis {
    const { groupIds } = this.viewerGroups(user, claims);
    if (tagged === undefined) return { groupIds };
    return { groupIds, tagged: (this.statements.countTagged.get(tagged) as [number])[0] };
  }

  /**
   * The groups a page of `user` counts, and those it reads range by range (ranged or claimed): a few as parameters of
   * their own (`:g0`…), more as one JSON array (`:ranged`), the statement's `shape` saying which.
   */
  private viewerGroups(user: number, claims: readonly string[]) {
    const claimed = claims.length > 0;
    const viewer = claimed ? { user, claims: JSON.stringify(claims) } : { user };
    const [counted, byRange] = (claimed ? this.statements.groupsWithClaims : this.statements.groups).get(viewer) as [string, string];
    const groupIds = JSON.parse(counted) as number[];
    const rangedIds = byRange === '[]' ? [] : (JSON.parse(byRange) as number[]);
    const shape: number | 'joined' = rangedIds.length <= SQLITE_GROUP_BRANCHES ? rangedIds.length : 'joined';
    const groupParams: Record<string, number | string> = shape === 'joined' ? { ranged: byRange } : {};
    if (shape !== 'joined') for (const [i, id] of rangedIds.entries()) groupParams[groupParam(i)] = id;
    return { groupIds, rangedIds, shape, groupParams };
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
