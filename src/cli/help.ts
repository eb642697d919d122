import type { Setting } from '../settings.js';
/** The "Examples:" section every command's --help ends with (a test walks the command tree for it). */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  ${l}`).join('\n')}\n`;
}

/** One setting's `--help` line: what it is, its variable and its default. */
export function settingHelp(s: Setting<unknown>): string {
  const shown = s.shownDefault ?? s.default;
  // "required" is no default: the summary says the setting is required.
  const tail = shown === undefined || shown === 'none' || shown === 'required' ? '' : `, default ${shown}`;
  return `${s.summary} (${s.env}${tail})`;
}
