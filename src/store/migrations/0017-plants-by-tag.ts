import { sql, type Kysely, type Migration } from 'kysely';

/**
 * Plants by tag, in catalogue order: what a page of one tag (`GET /plants?tag=T`) reads first, so that a rare
 * tag's page reads that tag's few plants, not the catalogue (store/listing.ts). Untagged plants, often most of a
 * catalogue, are left out of it: no query looks for them by tag.
 */
export function plantsByTag(): Migration {
  return {
    async up(db: Kysely<any>) {
      await sql`CREATE INDEX plants_by_tag ON plants (tag, id) WHERE tag IS NOT NULL`.execute(db);
    },
  };
}
