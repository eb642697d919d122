import type { CatalogueRecord, NumberedRecord } from '../import-format/records.js';
import { exportCatalogue } from './catalogue-export.js';
import { importCatalogue } from './catalogue-import.js';
import type { DatabaseSeam } from './seam.js';
import type { ImportProgress, ImportSummary } from './records.js';

/** The whole catalogue at once: import, export, counts and backups (the CLI). */
export function bulkCatalogue(d: DatabaseSeam) {
  return {
    /** All-or-nothing: either every record is written or none is. Records come in batches, in file order. */
    async importRecords(batches: AsyncIterable<readonly NumberedRecord[]>, progress?: ImportProgress): Promise<ImportSummary> {
      const summary = await d.bulk.importing((target) => importCatalogue(batches, target, progress));
      await d.changes.catchUp();
      return summary;
    },

    /** Streams the whole catalogue in import format, in an order that imports back; `onTotal` hears its length first. */
    exportRecords: (onTotal?: (records: number) => void): AsyncGenerator<CatalogueRecord> =>
      exportCatalogue(() => d.bulk.exportSnapshot(), onTotal),

    /**
     * Writes a copy of the whole database, tokens, webhook endpoints and their secrets included, to `file`, where
     * there must be nothing yet: the database as it was at one commit, made while writers go on. SQLite only; on
     * PostgreSQL an invalid_input error says what to use instead.
     */
    backup: (file: string): Promise<void> => d.bulk.backup(file),
  };
}

export type BulkCatalogue = ReturnType<typeof bulkCatalogue>;
