import { sql, type Kysely, type Migration } from 'kysely';

type Dialect = 'sqlite' | 'postgres';

/**
 * Plants by tag, in catalogue order: what a page of one tag (`GET /plants?tag=T`) reads first, so that a rare
 * tag's page reads that tag's few plants, not the catalogue (store/listing.ts). The entries carry the plant's flag
 * and owner, which decide two of the access rule's paths: a plant is checked against them without reading its row.
 * Untagged plants, often most of a catalogue, are left out: no query looks for them by tag.
 */
export function plantsByTag(dialect: Dialect): Migration {
  return {
    async up(db: Kysely<any>) {
      if (dialect === 'sqlite') {
        await sql`CREATE INDEX plants_by_tag ON plants (tag, id, is_public, owner_id) WHERE tag IS NOT NULL`.execute(db);
      } else {
        await sql`CREATE INDEX plants_by_tag ON plants (tag, id) INCLUDE (is_public, owner_id) WHERE tag IS NOT NULL`.execute(db);
      }
    },
  };
}
