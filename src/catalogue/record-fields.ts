import { invalidInput } from '../errors.js';
import type { GroupRecord, PlantRecord, UserRecord } from './records.js';

// Runtime helpers of the catalogue format that need no validator: the stores load this, not TypeBox, so a
// CLI command that never reads a file starts without it.

export type SharedWith = { user: string } | { group: string };

export function parseSharedWith(entry: string): SharedWith {
  if (entry.startsWith('group:')) return { group: entry.slice('group:'.length) };
  if (entry.startsWith('user:')) return { user: entry.slice('user:'.length) };
  return { user: entry };
}

/** Builds export records in the one canonical shape both backends emit (absent, not empty, optional fields). */
export const exportRecord = {
  user: (name: string, admin: boolean): UserRecord => (admin ? { type: 'user', name, admin: true } : { type: 'user', name }),
  group: (name: string, members: string[]): GroupRecord => (members.length > 0 ? { type: 'group', name, members } : { type: 'group', name }),
  plant(name: string, tag: string | null, owner: string, isPublic: boolean, users: string[], groups: string[]): PlantRecord {
    const sharedWith = [...users, ...groups.map((g) => `group:${g}`)];
    return {
      type: 'plant',
      name,
      ...(tag === null ? {} : { tag }),
      owner,
      public: isPublic,
      ...(sharedWith.length > 0 ? { sharedWith } : {}),
    };
  },
};

/** The import error for a reference to a user or group that is neither earlier in the file nor stored. */
export function unknownName(what: 'user' | 'group', name: string, line: number): Error {
  return invalidInput(`line ${line}: no ${what} named "${name}" (define it on an earlier line)`);
}
