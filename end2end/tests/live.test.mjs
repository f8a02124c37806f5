// Live behaviour: a list being read announces new jobs instead of jumping, the live toggle holds
// updates until resumed, and the dashboard reads on a phone and in dark mode.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a list with a selection shows "N new" instead of jumping, and shows them on request', async () => {
  const batch = `live-${Date.now()}`;
  const first = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { batch } });
  const page = await browser.newPage();
  await page.goto(`${baseUrl}/jobs?args=${encodeURIComponent(`batch=${batch}`)}`);
  await hydrated(page);
  await page.getByLabel(`Select job ${first.body.job.id}`, { exact: true }).check();

  const second = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { batch } });
  const banner = page.getByRole('button', { name: '1 new job: show' });
  await banner.waitFor();
  const newRow = page.locator(`tr[data-job="${second.body.job.id}"]`);
  assert.equal(await newRow.count(), 0);
  await banner.click();
  await newRow.waitFor();
  await banner.waitFor({ state: 'detached' });
  await page.close();
});

// Issue 46, point 7: a stream the server refused once (a 503 while it was busy) closed for good
// in the browser, and the page said "Connecting…" until it was reloaded.
test('the live stream comes up after the server refused it once', async () => {
  const page = await browser.newPage();
  let tries = 0;
  await page.route('**/events', (route) => (tries++ === 0
    ? route.fulfill({
      status: 503,
      headers: { 'retry-after': '1', 'content-type': 'application/json' },
      body: '{"error":{"code":"busy","message":"too many live streams: try again shortly"}}',
    })
    : route.continue()));
  await page.goto(baseUrl + '/');
  await hydrated(page);
  assert.ok(tries >= 2, `the stream was asked for ${tries} time(s)`);
  await page.close();
});

test('pausing live updates holds changes until resumed', async () => {
  const page = await browser.newPage();
  await page.goto(baseUrl + '/');
  await hydrated(page);
  const scheduled = () => page.getByLabel('scheduled jobs', { exact: true }).textContent().then(Number);
  const before = await scheduled();
  await page.getByRole('button', { name: 'Pause live updates' }).click();
  await page.getByRole('status').filter({ hasText: 'Paused' }).waitFor();

  await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 });
  await page.getByRole('status').filter({ hasText: /Paused \(\d+ changes?\)/ }).waitFor();
  assert.equal(await scheduled(), before);

  await page.getByRole('button', { name: 'Resume live updates' }).click();
  await eventually('the held change to show', scheduled, (n) => n === before + 1);
  await page.close();
});

test('the dashboard fits a phone screen and has a dark theme', async () => {
  const page = await browser.newPage();
  await page.setViewportSize({ width: 390, height: 844 });
  for (const route of ['/', '/jobs', '/timers', '/queues']) {
    await page.goto(baseUrl + route);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 1, `${route} is ${overflow}px wider than the phone`);
  }
  await page.goto(baseUrl + '/jobs');
  await page.screenshot({ path: path.join(screenshots, 'phone-jobs.png'), fullPage: false });
  await page.emulateMedia({ colorScheme: 'dark' });
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(baseUrl + '/');
  const background = await page.evaluate(() => getComputedStyle(document.documentElement).backgroundColor);
  assert.equal(background, 'rgb(17, 20, 24)');
  await page.screenshot({ path: path.join(screenshots, 'overview-dark.png'), fullPage: true });
  await page.close();
});
