// Queues: pausing a queue from the dashboard stops its jobs on every node until resumed; limits
// across every node set in the form; a job kind paused and resumed on every node; the late-start
// policy of jobs a paused queue held, in each mode.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, stateOf, untilState, watchErrors } from './helpers.mjs';

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
  await row.getByRole('button', { name: 'Set', exact: true }).click();
  await row.getByText('3 (set here)').waitFor();
  assert.equal((await api('GET', '/queues')).body.find((q) => q.name === 'e2e').concurrency, 3);

  await input.fill('');
  await row.getByRole('button', { name: 'Set', exact: true }).click();
  await row.getByText('configured 2').waitFor();
  await page.close();
});

test('limits across every node are set in the form, shown, and refused with a reason', async () => {
  const page = await browser.newPage();
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const row = page.locator('tr[data-queue="e2e"]');
  await row.getByLabel('Rate of queue e2e on all nodes').fill('5/s');
  await row.getByLabel(/counted per/).fill('kind');
  await row.getByLabel('Most executing on all nodes, queue e2e').fill('1');
  await row.getByRole('button', { name: 'Set limits' }).click();
  await row.getByText('5/s per kind, 1 on all nodes (set here)').waitFor();
  const q = (await api('GET', '/queues')).body.find((q) => q.name === 'e2e');
  assert.deepEqual([q.rate_limit, q.rate_period_ms, q.rate_per, q.global_concurrency, q.limits_by],
    [5, 1000, 'kind', 1, 'operator']);
  await shot(page);

  // A refused rate says why and changes nothing.
  await row.getByLabel('Rate of queue e2e on all nodes').fill('fast');
  await row.getByRole('button', { name: 'Set limits' }).click();
  await page.getByText(/is not a rate/).waitFor();
  assert.equal((await api('GET', '/queues')).body.find((q) => q.name === 'e2e').rate_limit, 5);

  // Emptied: no limits.
  await row.getByLabel('Rate of queue e2e on all nodes').fill('');
  await row.getByLabel(/counted per/).fill('');
  await row.getByLabel('Most executing on all nodes, queue e2e').fill('');
  await row.getByRole('button', { name: 'Set limits' }).click();
  await row.locator('td.queue-limits').getByText('none').waitFor();
  await page.close();
});

test('a rate used up shows its window and the jobs it holds, live, and the held job says why', async (t) => {
  t.after(() => api('PATCH', '/queues/e2e', { rate: null }));
  // An hourly window: all of this happens in one window unless the hour is about to turn.
  const msLeft = 3600_000 - (Date.now() % 3600_000);
  if (msLeft < 60_000) await new Promise((r) => setTimeout(r, msLeft + 1000));
  assert.equal((await api('PATCH', '/queues/e2e', { rate: '2/h' })).status, 200);
  const page = await browser.newPage();
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const row = page.locator('tr[data-queue="e2e"]');
  await row.getByText('0 of 2 started', { exact: false }).waitFor();

  const ids = [];
  for (let i = 0; i < 5; i++) ids.push((await api('POST', '/jobs', { kind: 'noop', queue: 'e2e' })).body.job.id);
  await untilState(ids[0], 'completed');
  await untilState(ids[1], 'completed');
  // Shown without a reload: the window used up, three jobs held.
  await row.getByText('2 of 2 started', { exact: false }).waitFor();
  await row.getByText('3 available jobs held by the limits').waitFor();
  for (const id of ids.slice(2)) assert.equal(await stateOf(id), 'available');
  await page.screenshot({ path: path.join(screenshots, 'queues-limit-held.png'), fullPage: true });

  const detail = await browser.newPage();
  await detail.goto(`${baseUrl}/jobs/${ids[4]}`);
  await hydrated(detail);
  await detail.getByText("this window's rate is used up (2 of 2 started); it waits for the next window", { exact: false }).waitFor();
  await detail.close();

  // The limit lifted: the held jobs run, and the page says no limits.
  assert.equal((await api('PATCH', '/queues/e2e', { rate: null })).status, 200);
  for (const id of ids.slice(2)) await untilState(id, 'completed');
  await row.locator('td.queue-limits').getByText('none').waitFor();
  await page.close();
});

test('a paused kind holds its jobs on every node, says so on the job, and runs once resumed', async (t) => {
  t.after(() => api('POST', '/kinds/noop/resume'));
  const page = await browser.newPage();
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const kind = page.locator('tr[data-kind="noop"]');
  await kind.getByRole('button', { name: 'Pause kind noop' }).click();
  await kind.getByText('paused').waitFor();
  await kind.getByText(/by admin/).waitFor();

  const job = await api('POST', '/jobs', { kind: 'noop' });
  const id = job.body.job.id;
  await new Promise((r) => setTimeout(r, 1000));
  assert.equal(await stateOf(id), 'available');
  const detail = await browser.newPage();
  await detail.goto(`${baseUrl}/jobs/${id}`);
  await hydrated(detail);
  await detail.getByText('its kind noop is paused on every node', { exact: false }).waitFor();
  await detail.close();

  await kind.getByRole('button', { name: 'Resume kind noop' }).click();
  await untilState(id, 'completed');
  await kind.getByText('running').waitFor();
  await page.close();
});

test('a job a paused queue held past its late-start limit runs, is skipped or is discarded, as it asked', async () => {
  const paused = await api('POST', '/queues/e2e/pause');
  assert.equal(paused.status, 200);
  const ids = {};
  for (const then of ['run', 'skip', 'discard']) {
    const made = await api('POST', '/jobs', {
      kind: 'noop', queue: 'e2e', args: { e2e: `late-${then}` }, on_late: { after_ms: 1000, then },
    });
    assert.equal(made.status, 201);
    ids[then] = made.body.job.id;
  }
  // The timers page marks them late once a second has passed; the operator resumes the queue.
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/timers');
  await hydrated(page);
  for (const id of Object.values(ids)) {
    await page.locator(`tr[data-job="${id}"] .countdown.late`).waitFor();
  }
  await api('POST', '/queues/e2e/resume');
  await untilState(ids.run, 'completed');
  await untilState(ids.skip, 'cancelled');
  await untilState(ids.discard, 'discarded');
  // Each job's page says what its policy did, and how late it would have started.
  for (const [then, outcome] of [['run', 'completed'], ['skip', 'cancelled'], ['discard', 'discarded']]) {
    await page.goto(`${baseUrl}/jobs/${ids[then]}`);
    await hydrated(page);
    const attempt = page.locator(`li.attempt.outcome-${outcome}`);
    await attempt.locator('.late').filter({ hasText: /after its due time/ }).waitFor();
    if (then === 'run') {
      assert.equal(await attempt.locator('.error-text').count(), 0);
    } else {
      await attempt.locator('.error-text').filter({ hasText: /past its limit of 1000 ms/ }).waitFor();
    }
  }
  assert.deepEqual(errors, []);
  await page.close();
});
