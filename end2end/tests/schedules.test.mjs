// Schedules: an operator creates one in the form (its preview follows the rule and zone being
// typed, in the schedule's zone and the browser's), and watches its runs appear and fire on the
// detail page without a reload; the list shows it with its countdown; pause and run now act.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots, watchErrors } from './helpers.mjs';

const stamp = Date.now();
let browser;
before(async () => { browser = await launch({ timezoneId: 'America/New_York' }); });
after(async () => { await browser?.close(); });

test('a schedule made in the form previews its slots, then its runs appear and fire live', async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/schedules/new');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New schedule' });
  // The zone defaults to the browser's.
  await eventually('the browser zone in the form',
    () => form.getByLabel('Time zone (IANA)').inputValue(), (z) => z === 'America/New_York');

  // A daily 02:30: the preview shows it in New York (EST), and in the browser's time.
  await form.getByLabel(/^Cron expression/).fill('30 2 * * *');
  const preview = form.getByLabel('Preview of the next slots');
  await preview.getByText(/02:30:00 EST/).first().waitFor();
  assert.equal(await preview.locator('li').count(), 5);
  // A bad rule is explained where it is typed.
  await form.getByLabel(/^Cron expression/).fill('30 25 * * *');
  await preview.getByRole('alert').filter({ hasText: 'hour' }).waitFor();
  // In another zone the same rule reads that zone's wall clock.
  await form.getByLabel(/^Cron expression/).fill('30 2 * * *');
  await form.getByLabel('Time zone (IANA)').fill('Australia/Sydney');
  await preview.getByText(/02:30:00 AE[DS]T/).first().waitFor();

  // Every 2 seconds, so that runs fire while we watch.
  const name = `e2e-every-2s-${stamp}`;
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Kind of rule').selectOption('every');
  await form.getByLabel('Every (seconds)').fill('2');
  await preview.getByText('every 2 seconds').waitFor();
  await form.getByLabel('Kind', { exact: true }).fill('noop');
  await form.getByLabel('Queue').fill('default');
  await form.getByLabel('Args (JSON)').fill(`{"look": "${name}"}`);
  // A run that would start over 5 s late is skipped (each run's due time is its slot).
  await form.getByLabel('Seconds after its due time').fill('5');
  await form.getByLabel('What happens to a late start').selectOption('skip');
  await form.getByRole('button', { name: 'Create schedule' }).click();
  await page.waitForURL((url) => url.pathname === `/schedules/${name}`);

  // Its runs appear and complete on this page, with no reload.
  const runs = page.getByRole('table', { name: 'Runs' });
  await runs.locator('.badge.state-completed').first().waitFor({ timeout: 15000 });
  const completedAtFirst = await runs.locator('.badge.state-completed').count();
  await eventually('another run to complete live',
    () => runs.locator('.badge.state-completed').count(), (n) => n > completedAtFirst, 10000);
  assert.ok(await page.getByText('every 2 seconds').count() > 0);

  // The list: its rule in words, a countdown to its next run, its latest run; pause and run now.
  await page.goto(baseUrl + '/schedules');
  await hydrated(page);
  const row = page.locator(`tr[data-schedule="${name}"]`);
  await row.getByText('every 2 seconds').waitFor();
  await row.locator('.countdown').waitFor();
  await row.locator('.badge.state-completed').first().waitFor();
  await page.screenshot({ path: path.join(screenshots, 'schedules.png'), fullPage: true });
  await row.getByRole('button', { name: `Pause schedule ${name}` }).click();
  await row.getByText('paused').waitFor();
  const paused = (await api('GET', `/schedules/${name}`)).body;
  assert.equal(paused.paused, true);
  assert.equal(paused.next_run_at, null);
  await row.getByRole('button', { name: `Run schedule ${name} now` }).click();
  await eventually('the run triggered by hand',
    async () => (await api('GET', `/schedules/${name}/runs?limit=1`)).body.runs[0],
    (run) => run?.meta?.trigger === true && run.state === 'completed');
  assert.deepEqual(errors, []);
  await page.goto(baseUrl + `/schedules/${name}`);
  await hydrated(page);
  await page.screenshot({ path: path.join(screenshots, 'schedule-detail.png'), fullPage: true });
  // The policy is kept in its template, and the edit form starts from it.
  assert.deepEqual((await api('GET', `/schedules/${name}`)).body.job.meta.late, { after_ms: 5000, then: 'skip' });
  const edit = page.getByRole('form', { name: 'Edit schedule' });
  assert.equal(await edit.getByLabel('Seconds after its due time').inputValue(), '5');
  assert.equal(await edit.getByLabel('What happens to a late start').inputValue(), 'skip');
  await page.close();
});
