// Jobs from the operator's side: the new-job form, the detail page, the failures page, the timers
// page, bulk actions on a filter, and the main actions without JavaScript.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import {
  launch, api, eventually, hydrated, baseUrl, screenshots, stateOf, untilState, watchErrors,
} from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const shot = (page, name) => page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: true });

test('a job made with the form appears scheduled, then fires, without a reload', async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/jobs/new');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New job' });
  await form.getByLabel('Kind').selectOption('noop');
  const args = form.getByLabel('Args (JSON object)');
  await args.fill('{"game_id": ');
  await page.getByText(/not valid JSON/).waitFor();
  assert.equal(await form.getByRole('button', { name: 'Create job' }).isDisabled(), true);
  await args.fill('{"game_id": 42, "e2e": "form"}');
  await page.getByText('Valid JSON object.').waitFor();
  await form.getByRole('radio', { name: /in/ }).check();
  await form.getByLabel('Minutes from now').fill('0.05');
  await shot(page, 'new-job');
  await form.getByRole('button', { name: 'Create job' }).click();

  await page.waitForURL(/\/jobs\/\d+$/);
  const id = Number(page.url().split('/').pop());
  await page.getByRole('heading', { name: `Job ${id}` }).waitFor();
  assert.equal(await stateOf(id), 'scheduled');
  await page.locator('.facts .badge', { hasText: 'scheduled' }).waitFor();
  await shot(page, 'job-detail-scheduled');
  // It fires about 3 s after it was made; the page follows without a reload.
  await page.locator('.facts .badge', { hasText: 'completed' }).waitFor({ timeout: 15000 });
  await page.getByRole('list', { name: 'Attempts' }).getByText('completed').waitFor();
  assert.match(await page.getByLabel('Args').textContent(), /"game_id": 42/);
  await shot(page, 'job-detail');
  assert.deepEqual(errors, []);
  await page.close();
});

test('a failed job shows its error on the failures page, and a retry succeeds', async () => {
  const failing = await api('POST', '/jobs', {
    kind: 'noop', max_attempts: 1, args: { fail_attempts: 1, message: 'e2e: the wire is down' },
  });
  const id = failing.body.job.id;
  await untilState(id, 'discarded');

  const page = await browser.newPage();
  await page.goto(baseUrl + '/failures');
  await hydrated(page);
  const row = page.locator(`tr[data-job="${id}"]`);
  await row.getByRole('cell', { name: 'e2e: the wire is down', exact: true }).waitFor();
  await shot(page, 'failures');
  await row.getByRole('button', { name: `Retry job ${id}`, exact: true }).click();
  // Its second attempt succeeds (it fails only its first) and it leaves the failures list.
  await untilState(id, 'completed');
  await row.waitFor({ state: 'detached' });

  // The detail page keeps the failed attempt in its timeline.
  await page.goto(`${baseUrl}/jobs/${id}`);
  const attempts = page.getByRole('list', { name: 'Attempts' });
  await attempts.getByText('e2e: the wire is down').waitFor();
  await attempts.getByText('completed').waitFor();
  await page.close();
});

test('a pending timer counts down on the timers page and is cancelled there', async () => {
  const timer = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { e2e: 'timer' } });
  const id = timer.body.job.id;
  const page = await browser.newPage();
  await page.goto(baseUrl + '/timers');
  await hydrated(page);
  const row = page.locator(`tr[data-job="${id}"]`);
  const countdown = row.locator('.countdown');
  const first = await countdown.textContent();
  assert.match(first, /^in (9|10) min$/);
  await shot(page, 'timers');
  await row.getByRole('button', { name: `Cancel job ${id}`, exact: true }).click();
  await untilState(id, 'cancelled');
  await row.waitFor({ state: 'detached' });
  await page.close();
});

test('a bulk cancel on a filter confirms the count and spares jobs made after the confirmation', async () => {
  const batch = `bulk-${Date.now()}`;
  const ids = [];
  for (let i = 0; i < 5; i++) {
    const r = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { batch, i } });
    ids.push(r.body.job.id);
  }
  const page = await browser.newPage();
  await page.goto(`${baseUrl}/jobs?args=${encodeURIComponent(`batch=${batch}`)}`);
  await hydrated(page);
  await page.getByRole('table', { name: 'Jobs' }).locator('tbody tr').nth(4).waitFor();
  await page.getByLabel('Bulk action', { exact: true }).selectOption('cancel');
  await page.getByRole('button', { name: 'Apply to all matching…' }).click();
  const confirm = page.getByRole('region', { name: 'Confirm bulk action' });
  await confirm.getByText(`Cancel 5 jobs matching args = batch=${batch}?`).waitFor();
  await shot(page, 'bulk-confirm');

  // Made after the operator saw the count: not part of what was confirmed.
  const late = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { batch, i: 5 } });
  await confirm.getByRole('button', { name: 'Yes, cancel' }).click();
  await page.getByRole('status').filter({ hasText: '5 cancelled jobs.' }).waitFor();
  for (const id of ids) assert.equal(await stateOf(id), 'cancelled');
  assert.equal(await stateOf(late.body.job.id), 'scheduled');
  await page.close();
});

test('selected jobs are retried in bulk without leaving the page, and the result replaces the question', async () => {
  const ids = [];
  for (let i = 0; i < 2; i++) {
    const r = await api('POST', '/jobs', { kind: 'noop', max_attempts: 1, args: { fail_attempts: 1, sel: i } });
    ids.push(r.body.job.id);
  }
  for (const id of ids) await untilState(id, 'discarded');
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/jobs?state=discarded');
  await hydrated(page);
  // Gone if anything below loads a new document.
  await page.evaluate(() => { window.samePage = true; });
  for (const id of ids) await page.getByLabel(`Select job ${id}`, { exact: true }).check();
  await page.getByLabel('Bulk action', { exact: true }).selectOption('retry');
  await page.getByRole('button', { name: 'Apply to selected…' }).click();
  const confirm = page.getByRole('region', { name: 'Confirm bulk action' });
  await confirm.getByText('Retry the 2 selected jobs?').waitFor();
  assert.equal(await page.evaluate(() => window.samePage), true, 'the confirmation loaded a new page');
  await confirm.getByRole('button', { name: 'Yes, retry' }).click();
  // On a time-out, say what the page showed instead.
  await page.getByRole('status').filter({ hasText: '2 retried jobs.' }).waitFor().catch(async (e) => {
    const shown = await page.locator('main').innerText({ timeout: 1000 }).catch(() => '(no main)');
    const states = await Promise.all(ids.map(stateOf));
    throw new Error(`${e.message}\nthe page showed: ${shown}\nat ${page.url()}; the jobs are ${states}`);
  });
  // The question is gone, also from the address: a reload cannot ask (and act) again.
  assert.equal(await confirm.count(), 0);
  assert.equal(new URL(page.url()).searchParams.get('bulk'), null);
  assert.equal(await page.evaluate(() => window.samePage), true, 'the action loaded a new page');
  for (const id of ids) await untilState(id, 'completed');
  assert.deepEqual(errors, []);
  await page.close();
});

test('without JavaScript a bulk action ends on its result, not on its question again', async () => {
  const noScript = await launch({ javaScriptEnabled: false });
  try {
    const batch = `nojs-bulk-${Date.now()}`;
    const ids = [];
    for (let i = 0; i < 3; i++) {
      const r = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { batch, i } });
      ids.push(r.body.job.id);
    }
    const page = await noScript.newPage();
    await page.goto(`${baseUrl}/jobs?args=${encodeURIComponent(`batch=${batch}`)}`);
    await page.getByLabel('Bulk action', { exact: true }).selectOption('cancel');
    await page.getByRole('button', { name: 'Apply to all matching…' }).click();
    const confirm = page.getByRole('region', { name: 'Confirm bulk action' });
    await confirm.getByText(`Cancel 3 jobs matching args = batch=${batch}?`).waitFor();
    await confirm.getByRole('button', { name: 'Yes, cancel' }).click();
    await page.getByRole('status').filter({ hasText: '3 cancelled jobs.' }).waitFor();
    assert.equal(await confirm.count(), 0, 'the question came back after the action');
    assert.equal(new URL(page.url()).searchParams.get('args'), `batch=${batch}`);
    for (const id of ids) assert.equal(await stateOf(id), 'cancelled');
    await page.close();
  } finally {
    await noScript.close();
  }
});

test('without JavaScript the lists render and a job is cancelled through its form', async () => {
  const noScript = await launch({ javaScriptEnabled: false });
  try {
    const timer = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 });
    const id = timer.body.job.id;
    const page = await noScript.newPage();
    await page.goto(`${baseUrl}/jobs?state=scheduled`);
    await page.getByRole('button', { name: `Cancel job ${id}`, exact: true }).click();
    // The form posts to the server function, which sends the browser back to the list.
    await page.waitForURL(/\/jobs\?state=scheduled/);
    assert.equal(await stateOf(id), 'cancelled');
    await page.goto(`${baseUrl}/jobs/${id}`);
    await page.locator('.facts .badge', { hasText: 'cancelled' }).waitFor();
    await page.close();
  } finally {
    await noScript.close();
  }
});

test('the detail page reschedules, clones and deletes a job', async () => {
  const made = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { detail: 'e2e' } });
  const id = made.body.job.id;
  const page = await browser.newPage();
  await page.goto(`${baseUrl}/jobs/${id}`);
  await hydrated(page);

  // Two hours from now, typed in the browser's zone (the same machine's zone here).
  const later = new Date(Date.now() + 2 * 3600_000);
  const p = (n) => String(n).padStart(2, '0');
  const local = `${later.getFullYear()}-${p(later.getMonth() + 1)}-${p(later.getDate())}T${p(later.getHours())}:${p(later.getMinutes())}:${p(later.getSeconds())}`;
  await page.getByLabel('Reschedule to').fill(local);
  await page.getByRole('button', { name: 'Reschedule' }).click();
  await eventually('the job to move', async () => (await api('GET', `/jobs/${id}`)).body.scheduled_at,
    (at) => Math.floor(new Date(at).getTime() / 1000) === Math.floor(later.getTime() / 1000));
  await page.locator('.facts .countdown', { hasText: /in (1 h 59 min|2 h)/ }).waitFor();

  await page.getByRole('button', { name: 'Clone as a new job' }).click();
  await page.waitForURL((url) => /\/jobs\/\d+$/.test(url.pathname) && !url.pathname.endsWith(`/${id}`));
  const copy = Number(page.url().split('/').pop());
  const cloned = (await api('GET', `/jobs/${copy}`)).body;
  assert.deepEqual(cloned.args, { detail: 'e2e' });

  await page.goto(`${baseUrl}/jobs/${id}`);
  await hydrated(page);
  await page.getByText('Delete…').click();
  await page.getByRole('button', { name: `Yes, delete job ${id}` }).click();
  await page.waitForURL((url) => url.pathname === '/jobs');
  assert.equal((await api('GET', `/jobs/${id}`)).status, 404);
  await page.close();
});

test('a running attempt shows its log live, and an opened log stays open as the page follows it', async () => {
  const made = await api('POST', '/jobs', { kind: 'noop', args: { sleep_ms: 9000, e2e: 'live-log' } });
  assert.equal(made.status, 201);
  const id = made.body.job.id;
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(`${baseUrl}/jobs/${id}`);
  await hydrated(page);
  await page.locator('.facts .badge', { hasText: 'executing' }).waitFor();
  const running = page.locator('li.attempt.outcome-running');
  // Its node writes the line once the attempt ran a beat; the page reads it every 2 s.
  const log = running.locator('details.logs');
  await log.locator('summary', { hasText: 'Log (1 line)' }).waitFor({ timeout: 10000 });
  await log.locator('summary').click();
  await log.getByText(/sleeping sleep_ms=9000/).waitFor();
  // Two reads later it is still open, while the job still runs.
  for (let i = 0; i < 2; i++) {
    await page.waitForResponse((r) => new URL(r.url()).pathname === '/_console/job');
  }
  assert.equal(await stateOf(id), 'executing');
  assert.equal(await log.getAttribute('open'), '');
  await log.getByText(/sleeping sleep_ms=9000/).waitFor();
  await shot(page, 'job-running-log');
  // Ended, its record holds both lines, and the log the operator opened is still open.
  const done = page.locator('li.attempt.outcome-completed details.logs');
  await done.locator('summary', { hasText: 'Log (2 lines)' }).waitFor({ timeout: 15000 });
  assert.equal(await done.getAttribute('open'), '');
  await done.getByText('awake').waitFor();
  assert.deepEqual(errors, []);
  await page.close();
});

test('the new-job form sets a late-start policy, kept in the job\'s meta', async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/jobs/new');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New job' });
  await form.getByLabel('Kind').selectOption('noop');
  await form.getByLabel('Args (JSON object)').fill('{"e2e": "late-policy"}');
  await form.getByRole('radio', { name: /in/ }).check();
  await form.getByLabel('Minutes from now').fill('60');
  await form.getByLabel('Seconds after its due time').fill('30');
  await form.getByLabel('What happens to a late start').selectOption('skip');
  await form.getByRole('button', { name: 'Create job' }).click();
  await page.waitForURL(/\/jobs\/\d+$/);
  const id = Number(page.url().split('/').pop());
  const job = (await api('GET', `/jobs/${id}`)).body;
  assert.deepEqual(job.meta.late, { after_ms: 30000, then: 'skip' });
  assert.match(await page.getByLabel('Meta').textContent(), /"after_ms": 30000/);
  // Skip without saying after how long is refused, and nothing is made.
  await page.goto(baseUrl + '/jobs/new');
  await hydrated(page);
  await form.getByLabel('Kind').selectOption('noop');
  await form.getByLabel('Args (JSON object)').fill('{"e2e": "late-policy-refused"}');
  await form.getByLabel('What happens to a late start').selectOption('discard');
  await form.getByRole('button', { name: 'Create job' }).click();
  await page.getByRole('alert').getByText(/late: say after how many seconds/).waitFor();
  const listed = await api('GET', '/jobs?kind=noop&limit=200');
  assert.ok(!JSON.stringify(listed.body).includes('late-policy-refused'));
  await api('DELETE', `/jobs/${id}`);
  assert.deepEqual(errors, []);
  await page.close();
});
