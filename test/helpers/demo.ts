import { recordBatch } from '../../src/import-format/records.js';
import type { Store } from '../../src/store/store.js';
import { DEMO_RECORDS, DEMO_USERS } from '../../src/cli/demo-data.js';
import { mintToken } from './http-app.js';

export type DemoUser = (typeof DEMO_USERS)[number]['name'];

/** Loads the demo catalogue that `plantstore demo` serves, and mints one token per demo user. */
export async function seedDemo(store: Store): Promise<Record<DemoUser, string>> {
  await store.bulk.importRecords(recordBatch(DEMO_RECORDS));
  const tokens = {} as Record<DemoUser, string>;
  for (const { name } of DEMO_USERS) tokens[name] = (await mintToken(store, name)).token;
  return tokens;
}

/** What carol sees of the demo catalogue, in catalogue order: via her groups, a direct share, public plants and her own. */
export const CAROL_SEES = [
  { name: 'Ficus lyrata', tag: 'tropical' },
  { name: 'Aloe vera', tag: 'succulent' },
  { name: 'Ocimum basilicum', tag: 'herb' },
  { name: 'Mentha spicata', tag: 'herb' },
  { name: 'Sansevieria trifasciata', tag: 'succulent' },
  { name: 'Calathea orbifolia' },
  { name: 'Nephrolepis exaltata', tag: 'fern' },
  { name: 'Lavandula angustifolia', tag: 'herb' },
];
