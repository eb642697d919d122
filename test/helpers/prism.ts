import { spawn, type ChildProcess } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';

// Stoplight Prism as a validating proxy (`prism proxy --errors`) in front of a real server, for the
// conformance tests that measure the server against an OpenAPI document we did not generate.

/** The `type` of every problem+json body Prism writes itself starts with this. */
export const PRISM_TYPE = 'https://stoplight.io/prism/errors#';

/** Prism's finding for a response status the document does not list for the operation; `statuses` as the document orders them. */
export const undocumentedStatus = (statuses: string): string =>
  `Unable to match the returned status code with those defined in the document: ${statuses}`;

function prismEntry(): string {
  const packageJson = createRequire(import.meta.url).resolve('@stoplight/prism-cli/package.json');
  const { bin } = JSON.parse(readFileSync(packageJson, 'utf8')) as { bin: { prism: string } };
  return join(dirname(packageJson), bin.prism);
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.on('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address() as { port: number };
      probe.close(() => resolve(port));
    });
  });
}

export interface Prism {
  url: string;
  child: ChildProcess;
  output(): string;
}

/** Starts `prism proxy --errors` for the OpenAPI document at `documentPath` in front of `upstream`; resolves once it listens. */
export async function startPrism(documentPath: string, upstream: string): Promise<Prism> {
  const port = await freePort();
  const child = spawn(
    process.execPath,
    [prismEntry(), 'proxy', documentPath, upstream, '--errors', '--host', '127.0.0.1', '--port', String(port)],
    { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, NO_COLOR: '1', FORCE_COLOR: '0' } },
  );
  let out = '';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill();
      reject(new Error(`Prism did not start within 25 s:\n${out}`));
    }, 25_000);
    const onData = (chunk: Buffer) => {
      out += chunk.toString();
      if (out.includes('Prism is listening on')) {
        clearTimeout(timer);
        resolve({ url: `http://127.0.0.1:${port}`, child, output: () => out });
      }
    };
    child.stdout.on('data', onData);
    child.stderr.on('data', onData);
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`Prism exited (${code}) before listening:\n${out}`));
    });
  });
}

/** Stops Prism (if it ever started) and waits for it to exit. */
export async function stopPrism(prism: Prism | undefined): Promise<void> {
  if (prism === undefined || prism.child.exitCode !== null) return;
  const exited = new Promise((resolve) => prism.child.once('exit', resolve));
  prism.child.kill('SIGTERM');
  await exited;
}

export interface Violation {
  location: string[];
  severity: string;
  message: string;
}

export interface Outcome {
  status: number;
  contentType: string;
  body: unknown;
  text: string;
  headers: Headers;
  violations: Violation[];
}

/** Sends one request through Prism and gathers what it found: the `sl-violations` header, or the body of its own 500. */
export async function sendThroughPrism(prism: Prism, path: string, init: RequestInit = {}): Promise<Outcome> {
  const res = await fetch(`${prism.url}${path}`, init);
  const text = await res.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    body = undefined;
  }
  const header = res.headers.get('sl-violations');
  const violations: Violation[] = header === null ? [] : (JSON.parse(header) as Violation[]);
  // A violation Prism turned into its own 500 is listed in the body as well.
  if (res.status === 500 && (body as { type?: string })?.type === `${PRISM_TYPE}VIOLATIONS` && header === null) {
    violations.push(...((body as { validation: Violation[] }).validation ?? []));
  }
  return { status: res.status, contentType: res.headers.get('content-type') ?? '', body, text, headers: res.headers, violations };
}

export const describeOutcome = (o: Outcome): string =>
  `status ${o.status} (${o.contentType}): ${o.text.slice(0, 400)}\nviolations: ${JSON.stringify(o.violations)}`;
