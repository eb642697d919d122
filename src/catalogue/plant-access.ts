import { createHash } from 'node:crypto';
import { checkGroupName, checkUserName } from './names.js';

/**
 * Who has access to one plant besides its owner and admins, as its owner sees and changes it (the rule itself is
 * access-rule.ts): the public flag, and the users and groups it is shared with. Names are listed in code-point
 * order, so one access has one form and one version.
 */
export interface PlantAccess {
  public: boolean;
  users: string[];
  groups: string[];
}

/** A user or a group a plant is shared with. */
export type Grantee = { user: string } | { group: string };

/** One change of a plant's access: the whole of it replaced, one grantee added or taken away, or the flag set. */
export type AccessChange =
  { kind: 'replace'; access: PlantAccess } | { kind: 'share' | 'unshare'; grantee: Grantee } | { kind: 'public'; public: boolean };

/**
 * Code-point order, which is also the order of UTF-8's bytes and of the databases' binary collations. UTF-16 code
 * units alone put a character beyond U+FFFF (a surrogate pair, 0xD800-0xDFFF) before U+E000-U+FFFF: at the first
 * unit that differs, surrogates are ranked above the rest of the BMP.
 */
function codePointOrder(a: string, b: string): number {
  const length = Math.min(a.length, b.length);
  for (let i = 0; i < length; i++) {
    const x = a.charCodeAt(i);
    const y = b.charCodeAt(i);
    if (x !== y) return surrogatesLast(x) - surrogatesLast(y);
  }
  return a.length - b.length;
}

const surrogatesLast = (unit: number): number => (unit < 0xd800 ? unit : unit < 0xe000 ? unit + 0x2000 : unit - 0x800);

const sortedNames = (names: Iterable<string>): string[] => [...new Set(names)].sort(codePointOrder);

/** The access in its one form: names sorted, each once. */
export function normalAccess(access: PlantAccess): PlantAccess {
  return { public: access.public, users: sortedNames(access.users), groups: sortedNames(access.groups) };
}

/** The access `change` leaves, from `current`. */
export function changedAccess(current: PlantAccess, change: AccessChange): PlantAccess {
  switch (change.kind) {
    case 'replace':
      return normalAccess(change.access);
    case 'public':
      return { ...current, public: change.public };
    case 'share':
    case 'unshare': {
      const [list, name] =
        'user' in change.grantee ? (['users', change.grantee.user] as const) : (['groups', change.grantee.group] as const);
      const names = change.kind === 'share' ? [...current[list], name] : current[list].filter((n) => n !== name);
      return { ...current, [list]: sortedNames(names) };
    }
    default:
      return change satisfies never;
  }
}

/**
 * The version of an access: a digest of its one form, so that two readers of the same access hold the same
 * version whichever instance answered, and any change, by any writer, gives another. Nothing is stored for it.
 */
export function accessVersion(access: PlantAccess): string {
  const { public: isPublic, users, groups } = normalAccess(access);
  return createHash('sha256')
    .update(JSON.stringify([isPublic, users, groups]))
    .digest('base64url')
    .slice(0, 27);
}

/**
 * Refuses (invalid_input) a grantee's name that no user or group can have: it is never looked up. `.` and `..` pass
 * (checkNewUserName refuses them only to new ones): a user or group stored with either before is still shared with.
 */
export function checkGrantee(grantee: Grantee): void {
  if ('user' in grantee) checkUserName(grantee.user);
  else checkGroupName(grantee.group);
}

/** Refuses (invalid_input) a change that names a grantee no user or group can have, before anything is looked up. */
export function checkAccessChange(change: AccessChange): void {
  for (const grantee of change.kind === 'replace' ? granteesOf(change.access) : change.kind === 'public' ? [] : [change.grantee]) {
    checkGrantee(grantee);
  }
}

/** Every grantee an access names. */
export const granteesOf = (access: PlantAccess): Grantee[] => [
  ...access.users.map((user) => ({ user })),
  ...access.groups.map((group) => ({ group })),
];

/** What an error says of a grantee nobody has: `no user named "bob"`, as everywhere a name is given. */
export const noSuchGrantee = (grantee: Grantee): string =>
  'user' in grantee ? `no user named "${grantee.user}"` : `no group named "${grantee.group}"`;
