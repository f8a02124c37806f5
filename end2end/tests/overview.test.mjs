// The overview page: server-rendered counts, hydration, and live updates from changes made by
// another process through the API.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const countOf = (page, state) => page.getByLabel(`${state} jobs`, { exact: true }).textContent()
  .then((t) => Number(t.trim()));

test('the overview renders on the server and shows counts per state', async () => {
  // The signed-in browser's cookies, without running the page's scripts.
  const res = await browser.request.get(baseUrl + '/');
  assert.equal(res.status(), 200);
  const html = await res.text();
  assert.match(html, /Jobs by state/);
  assert.match(html, /scheduled jobs/);
});

test('a job created through the API appears and fires without a reload', async () => {
  const page = await browser.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(baseUrl + '/');
  await hydrated(page);
  const scheduledBefore = await countOf(page, 'scheduled');
  const completedBefore = await countOf(page, 'completed');

  const created = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 2000 });
  assert.equal(created.status, 201);
  await eventually('the scheduled count to grow', () => countOf(page, 'scheduled'),
    (n) => n === scheduledBefore + 1);
  await page.screenshot({ path: path.join(screenshots, 'overview.png'), fullPage: true });
  await eventually('the job to fire and complete', () => countOf(page, 'completed'),
    (n) => n === completedBefore + 1);
  assert.equal(await countOf(page, 'scheduled'), scheduledBefore);
  assert.deepEqual(errors, []);
  await page.close();
});
