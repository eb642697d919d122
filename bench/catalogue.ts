import type { CatalogueRecord } from '../src/import-format/records.js';

/** The shape of a generated catalogue; the same spec and seed always give the same records. */
export interface CatalogueSpec {
  plants: number;
  users: number;
  groups: number;
  /** Fraction of plants shared with one random user. */
  sharedWithUser: number;
  /** Fraction of plants shared with one random group. */
  sharedWithGroup: number;
  /** Fraction of plants that are public. */
  public: number;
  /** Groups each user belongs to. */
  groupsPerUser: number;
  seed: number;
}

export const DEFAULT_SPEC: CatalogueSpec = {
  plants: 100_000,
  users: 1_000,
  groups: 50,
  sharedWithUser: 0.3,
  sharedWithGroup: 0.1,
  public: 0.05,
  groupsPerUser: 2,
  seed: 42,
};

/** mulberry32: tiny, fast and good enough to make the same catalogue on every run. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const GENERA = ['Monstera', 'Ficus', 'Aloe', 'Calathea', 'Pilea', 'Sansevieria', 'Philodendron', 'Begonia', 'Echeveria', 'Hoya'];
const TAGS = ['tropical', 'succulent', 'herb', 'fern', 'cactus', 'orchid', 'climber'];

export const userName = (i: number): string => `user${i}`;
export const groupName = (i: number): string => `group${i}`;

/** Users (user0 is the admin), groups with their members, then plants in catalogue order. */
export function* generateCatalogue(spec: CatalogueSpec): Generator<CatalogueRecord> {
  const random = prng(spec.seed);
  const pick = (n: number) => Math.floor(random() * n);
  for (let u = 0; u < spec.users; u++) yield { type: 'user', name: userName(u), admin: u === 0 };
  const members: string[][] = Array.from({ length: spec.groups }, () => []);
  for (let u = 1; u < spec.users && spec.groups > 0; u++) {
    for (let k = 0; k < spec.groupsPerUser; k++) members[pick(spec.groups)]!.push(userName(u));
  }
  for (let g = 0; g < spec.groups; g++) yield { type: 'group', name: groupName(g), members: [...new Set(members[g])] };
  for (let p = 0; p < spec.plants; p++) {
    const sharedWith: string[] = [];
    if (random() < spec.sharedWithUser) sharedWith.push(userName(1 + pick(spec.users - 1)));
    if (spec.groups > 0 && random() < spec.sharedWithGroup) sharedWith.push(`group:${groupName(pick(spec.groups))}`);
    const tagged = random() < 0.7;
    yield {
      type: 'plant',
      name: `${GENERA[pick(GENERA.length)]} #${p}`,
      ...(tagged ? { tag: TAGS[pick(TAGS.length)]! } : {}),
      owner: userName(1 + pick(spec.users - 1)),
      public: random() < spec.public,
      sharedWith,
    };
  }
}

/** Users in many groups, each group with a few plants spread through the catalogue (see manyGroupsCatalogue). */
export const MANY_GROUPS = {
  groups: 200,
  plantsPerGroup: 5,
  /** The users in every one of those groups: as many as the bench's typical users whose tokens rotate. */
  members: Array.from({ length: 100 }, (_, i) => `crowd${i}`),
};

/**
 * The catalogue of `spec`, plus MANY_GROUPS.members, each in every one of MANY_GROUPS.groups groups (`many0`, …),
 * and each of those groups given MANY_GROUPS.plantsPerGroup plants evenly spread through the catalogue.
 */
export function* manyGroupsCatalogue(spec: CatalogueSpec): Generator<CatalogueRecord> {
  const shared = MANY_GROUPS.groups * MANY_GROUPS.plantsPerGroup;
  const step = Math.max(1, Math.floor(spec.plants / shared));
  let plant = 0;
  let added = false;
  for (const record of generateCatalogue(spec)) {
    if (record.type === 'group' && !added) {
      for (const name of MANY_GROUPS.members) yield { type: 'user', name, admin: false };
      for (let g = 0; g < MANY_GROUPS.groups; g++) yield { type: 'group', name: `many${g}`, members: MANY_GROUPS.members };
      added = true;
    }
    if (record.type === 'plant') {
      if (plant % step === 0 && plant / step < shared) (record.sharedWith ??= []).push(`group:many${(plant / step) % MANY_GROUPS.groups}`);
      plant++;
    }
    yield record;
  }
}

/** The tags of the tag rows: one held by 1 plant in 10,000, one by half the catalogue (see withBenchTags). */
export const BENCH_TAGS = { rare: 'rare-10000', half: 'half' } as const;

/** `records` with every 10,000th plant tagged BENCH_TAGS.rare and every other plant BENCH_TAGS.half. */
export function* withBenchTags(records: Iterable<CatalogueRecord>): Generator<CatalogueRecord> {
  let plant = 0;
  for (const record of records) {
    if (record.type === 'plant') {
      const tag = plant % 10_000 === 0 ? BENCH_TAGS.rare : plant % 2 === 1 ? BENCH_TAGS.half : record.tag;
      plant++;
      yield { ...record, ...(tag === undefined ? {} : { tag }) };
    } else {
      yield record;
    }
  }
}
