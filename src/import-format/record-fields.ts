import { invalidInput } from '../catalogue/errors.js';
import { granteeFromText } from '../catalogue/names.js';

// Runtime helpers of the catalogue format that need no validator: the stores load this, not TypeBox, so a
// CLI command that never reads a file starts without it.

/** An entry of a plant record's `sharedWith`: a user name, `user:NAME` or `group:NAME`. */
export function parseSharedWith(entry: string): { kind: 'user' | 'group'; name: string } {
  const grantee = granteeFromText(entry);
  return 'group' in grantee ? { kind: 'group', name: grantee.group } : { kind: 'user', name: grantee.user };
}

/** The import error for a reference to a user or group that is neither earlier in the file nor stored. */
export function unknownName(what: 'user' | 'group', name: string, line: number): Error {
  return invalidInput(`line ${line}: no ${what} named "${name}" (define it on an earlier line)`);
}
