import { invalidInput } from '../catalogue/errors.js';

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000, w: 604_800_000 } as const;

/** The longest duration taken: a date this far ahead is still one (a JavaScript Date ends in the year 275760). */
const MAX_DAYS = 36_500;

/** Parses `90s`, `15m`, `12h`, `30d`, `2w` into milliseconds, up to 100 years; `0` (with a unit or without) is 0. */
export function parseDuration(text: string): number {
  if (text.trim() === '0') return 0;
  const match = /^([0-9]{1,9})([smhdw])$/.exec(text.trim());
  if (!match) throw invalidInput(`invalid duration "${text}": use a number and a unit, e.g. 90s, 15m, 12h, 30d, 2w`);
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  if (ms > MAX_DAYS * UNIT_MS.d) throw invalidInput(`invalid duration "${text}": at most ${MAX_DAYS}d (100 years)`);
  return ms;
}
