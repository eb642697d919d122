import type { CatalogueRecord } from '../import-format/records.js';

/** A small catalogue that shows every access path: admin, owner, public, shared with a user, with a group. */
export const DEMO_USERS = [
  { name: 'ada', note: 'admin: sees every plant' },
  { name: 'bob', note: 'owns the tropical plants; in gardeners' },
  { name: 'carol', note: 'in gardeners and herbalists; one plant shared with her directly' },
  { name: 'dave', note: 'no plants, no groups: sees only public plants' },
] as const;

export const DEMO_RECORDS: CatalogueRecord[] = [
  { type: 'user', name: 'ada', admin: true },
  { type: 'user', name: 'bob' },
  { type: 'user', name: 'carol' },
  { type: 'user', name: 'dave' },
  { type: 'group', name: 'gardeners', members: ['bob', 'carol'] },
  { type: 'group', name: 'herbalists', members: ['carol'] },
  { type: 'plant', name: 'Monstera deliciosa', tag: 'tropical', owner: 'bob', public: false },
  { type: 'plant', name: 'Ficus lyrata', tag: 'tropical', owner: 'bob', public: false, sharedWith: ['group:gardeners'] },
  { type: 'plant', name: 'Aloe vera', tag: 'succulent', owner: 'ada', public: true },
  { type: 'plant', name: 'Ocimum basilicum', tag: 'herb', owner: 'ada', public: false, sharedWith: ['group:herbalists'] },
  { type: 'plant', name: 'Mentha spicata', tag: 'herb', owner: 'ada', public: false, sharedWith: ['group:herbalists', 'bob'] },
  { type: 'plant', name: 'Sansevieria trifasciata', tag: 'succulent', owner: 'carol', public: true },
  { type: 'plant', name: 'Calathea orbifolia', owner: 'bob', public: false, sharedWith: ['carol'] },
  { type: 'plant', name: 'Nephrolepis exaltata', tag: 'fern', owner: 'carol', public: false },
  { type: 'plant', name: 'Echeveria elegans', tag: 'succulent', owner: 'ada', public: false },
  { type: 'plant', name: 'Lavandula angustifolia', tag: 'herb', owner: 'carol', public: true },
];
