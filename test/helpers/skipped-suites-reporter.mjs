// A reporter beside spec: one closing line for the suites skipped as a whole (a service that is not there), which
// the runner's own count of skipped tests leaves out. Plain JavaScript: the runner loads reporters without tsx.

/**
 * @param {AsyncIterable<{ type: string, data: { name: string, skip?: string | boolean, details?: { type?: string } } }>} source
 * @returns {AsyncGenerator<string>}
 */
export default async function* skippedSuites(source) {
  /** @type {string[]} */
  const skipped = [];
  for await (const { type, data } of source) {
    const suite = data.details?.type === 'suite';
    if ((type === 'test:pass' || type === 'test:fail') && suite && data.skip !== undefined && data.skip !== false) {
      skipped.push(typeof data.skip === 'string' ? `${data.name}: ${data.skip}` : data.name);
    }
  }
  yield `ℹ suites skipped ${skipped.length}\n${skipped.map((line) => `  ${line}\n`).join('')}`;
}
