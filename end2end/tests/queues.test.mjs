// Queues: pausing a queue from the dashboard stops its jobs on every node until resumed.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, stateOf, untilState } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a paused queue holds its jobs until it is resumed', async () => {
  const page = await browser.newPage();
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const row = page.locator('tr[data-queue="e2e"]');
  await row.getByRole('button', { name: 'Pause queue e2e' }).click();
  await row.getByText('paused').waitFor();
  await shot(page);

  const job = await api('POST', '/jobs', { kind: 'noop', queue: 'e2e' });
  const id = job.body.job.id;
  // The producer would claim it within milliseconds if the queue were running.
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(await stateOf(id), 'available');
  await row.getByText('1', { exact: true }).first().waitFor();

  await row.getByRole('button', { name: 'Resume queue e2e' }).click();
  await untilState(id, 'completed');
  await row.getByText('running').waitFor();
  await page.close();
});

function shot(page) {
  return page.screenshot({ path: path.join(screenshots, 'queues.png'), fullPage: true });
}

test('a concurrency being typed survives live updates, and is applied on every node', async () => {
  const page = await browser.newPage();
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const row = page.locator('tr[data-queue="e2e"]');
  const input = row.getByLabel('Concurrency of queue e2e');
  await input.fill('3');
  // A change elsewhere renders the table again while the operator types.
  const refreshed = page.waitForResponse((r) => r.url().includes('/_console/queues'));
  await api('POST', '/jobs', { kind: 'noop', queue: 'e2e' });
  await refreshed;
  assert.equal(await input.inputValue(), '3');
  await row.getByRole('button', { name: 'Set' }).click();
  await row.getByText('3 (set here)').waitFor();
  assert.equal((await api('GET', '/queues')).body.find((q) => q.name === 'e2e').concurrency, 3);

  await input.fill('');
  await row.getByRole('button', { name: 'Set' }).click();
  await row.getByText('configured 2').waitFor();
  await page.close();
});
