import {
  SqliteAdapter,
  SqliteIntrospector,
  SqliteQueryCompiler,
  type CompiledQuery,
  type DatabaseConnection,
  type Dialect,
  type Driver,
  type Kysely,
  type QueryResult,
} from 'kysely';
import type { GroupCommit } from './group-commit.js';

/**
 * Kysely on group commit (group-commit.ts): each query is one statement of the next batch, answered once the
 * batch is committed. One statement at a time is its own unit of work: there are no transactions here.
 */
class GroupCommitConnection implements DatabaseConnection {
  constructor(private readonly commits: () => GroupCommit) {}

  async executeQuery<R>(query: CompiledQuery): Promise<QueryResult<R>> {
    const { rows, changes } = await this.commits().execute(query.sql, query.parameters);
    return { rows: rows as R[], numAffectedRows: BigInt(changes) };
  }

  async *streamQuery<R>(): AsyncIterableIterator<QueryResult<R>> {
    throw new Error('group commit does not stream');
  }
}

class GroupCommitDriver implements Driver {
  private readonly connection: GroupCommitConnection;

  constructor(commits: () => GroupCommit) {
    this.connection = new GroupCommitConnection(commits);
  }

  async init(): Promise<void> {}
  async acquireConnection(): Promise<DatabaseConnection> {
    return this.connection;
  }
  async beginTransaction(): Promise<void> {
    throw new Error('group commit runs single statements, not transactions');
  }
  async commitTransaction(): Promise<void> {}
  async rollbackTransaction(): Promise<void> {}
  async releaseConnection(): Promise<void> {}
  async destroy(): Promise<void> {}
}

/** The dialect of a Kysely instance whose statements are group-committed by `commits()`. */
export class GroupCommitDialect implements Dialect {
  constructor(private readonly commits: () => GroupCommit) {}

  createAdapter() {
    return new SqliteAdapter();
  }
  createDriver(): Driver {
    return new GroupCommitDriver(this.commits);
  }
  createIntrospector(db: Kysely<unknown>) {
    return new SqliteIntrospector(db);
  }
  createQueryCompiler() {
    return new SqliteQueryCompiler();
  }
}
