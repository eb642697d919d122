/** The "Examples:" section every command's --help ends with (a test walks the command tree for it). */
export function examples(...lines: string[]): string {
  return `\nExamples:\n${lines.map((l) => `  ${l}`).join('\n')}\n`;
}
