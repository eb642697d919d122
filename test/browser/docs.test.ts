import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { after, before, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { chromium, type Browser } from 'playwright-core';
import type { Store } from '../../src/store/store.js';
import { BACKENDS, cleanupBackends } from '../helpers/backends.js';
import { CAROL_SEES, seedDemo, type DemoUser } from '../helpers/demo.js';
import { startApp, type RunningApp } from '../helpers/http-app.js';

// The /docs page in a real browser: Debian's Chromium driven by playwright-core (no browser download), with
// every request off this machine blocked, so the page must work from what the service serves itself.

const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
const ARTIFACTS = fileURLToPath(new URL('../../test-artifacts/', import.meta.url));
const missing = !existsSync(CHROMIUM);
// In CI a missing browser is a failure (the test runs and says why); locally it is a skip.
const skip = missing && process.env.CI !== 'true' ? `no Chromium at ${CHROMIUM} (apt-get install chromium, or set CHROMIUM_PATH)` : false;

const isLocal = (url: string): boolean => {
  const { protocol, hostname } = new URL(url);
  if (protocol === 'data:' || protocol === 'blob:') return true;
  return hostname === '127.0.0.1' || hostname === 'localhost' || hostname === '[::1]';
};

describe(`/docs in headless Chromium [${BACKENDS[0]!.name}]`, { skip, timeout: 90_000 }, () => {
  let store: Store;
  let server: RunningApp;
  let tokens: Record<DemoUser, string>;
  let browser: Browser | undefined;

  before(async () => {
    assert.ok(!missing, `CI=true and no Chromium at ${CHROMIUM}: install it (apt-get install chromium) or set CHROMIUM_PATH`);
    store = await BACKENDS[0]!.open();
    tokens = await seedDemo(store);
    server = await startApp(store);
    // Running as root in a container needs --no-sandbox; the page is our own.
    browser = await chromium.launch({ executablePath: CHROMIUM, chromiumSandbox: false, timeout: 30_000 });
  });
  after(async () => {
    await browser?.close();
    await server?.close();
    await store?.close();
    await cleanupBackends();
  });

  it('authorizes with a token, tries GET /plants and shows the plants, with no external request', async () => {
    const context = await browser!.newContext({ viewport: { width: 1280, height: 1600 } });
    const external: string[] = [];
    const problems: string[] = [];
    await context.route('**/*', (route) => {
      const url = route.request().url();
      if (isLocal(url)) return route.continue();
      external.push(url);
      return route.abort('blockedbyclient');
    });
    const page = await context.newPage();
    page.setDefaultTimeout(15_000);
    page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
    page.on('console', (msg) => {
      if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
    });
    page.on('requestfailed', (req) => {
      if (isLocal(req.url())) problems.push(`request failed: ${req.url()} ${req.failure()?.errorText}`);
    });

    try {
      const response = await page.goto(`${server.url}/docs`);
      assert.ok(response?.ok(), `GET /docs answered ${response?.status()}`);
      await page.getByRole('heading', { name: /OpenAPI Plant Store/ }).waitFor();

      await page.locator('.auth-wrapper button.authorize').click();
      const modal = page.locator('.modal-ux');
      await modal.locator('input').first().fill(tokens.carol);
      // The modal's Authorize button is labelled "Apply credentials"; once applied it offers to remove them.
      await modal.getByRole('button', { name: 'Apply credentials' }).click();
      await modal.getByRole('button', { name: 'Remove authorization' }).waitFor();
      await modal.locator('button.btn-done').click();

      const operation = page.locator('#operations-default-listPlants');
      await operation.locator('.opblock-summary').first().click();
      // "Try it out" is already on when the UI is configured with tryItOutEnabled; click it only if shown.
      const tryOut = operation.getByRole('button', { name: 'Try it out' });
      if (await tryOut.isVisible()) await tryOut.click();
      await operation.locator('tr[data-param-name="limit"] input').fill('5');
      await operation.getByRole('button', { name: 'Execute' }).click();

      const body = operation.locator('.live-responses-table .response-col_description pre').first();
      await body.waitFor();
      const shown = await body.innerText();
      const expected = CAROL_SEES.slice(0, 5);
      for (const plant of expected) assert.ok(shown.includes(plant.name), `the response shows ${plant.name}: ${shown}`);
      assert.deepEqual(JSON.parse(shown), expected, 'the rendered response body is what carol may see, limited to 5');
      assert.equal((await operation.locator('.live-responses-table tbody .response-col_status').first().innerText()).trim(), '200');
      // The page sent the token it was given, as a bearer credential.
      const curl = await operation.locator('.curl-command').innerText();
      assert.ok(curl.includes(`Authorization: Bearer ${tokens.carol}`), `curl shows the bearer header: ${curl}`);

      // The operations come first; the error codes are one click away, on the Error schema below them.
      assert.equal(await page.locator('.information-container table').count(), 0, 'no table above the operations');
      const errorSchema = page
        .locator('section.models article')
        .filter({ has: page.locator('.json-schema-2020-12__title', { hasText: /^Error$/ }) });
      await errorSchema.locator('button.json-schema-2020-12-accordion').first().click();
      await errorSchema.getByText('rate_limited').first().waitFor();

      await mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot({ path: `${ARTIFACTS}docs-try-it-out.png`, fullPage: true });
    } finally {
      await context.close();
    }
    assert.deepEqual(external, [], 'the page requested nothing outside this machine');
    assert.deepEqual(problems, [], 'no script error, console error or failed request');
  });
});
