// The dashboard as an operator first sees it: every page opened unfiltered, signed in, in browser
// time zones on both sides of the date line and of daylight saving. Each page is read as the
// server rendered it (its WebAssembly held back), then again once it has hydrated and taken its
// first live refresh: the rows the server sent are still there, and no error shows.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { launch, api, eventually, hydrated, baseUrl, watchErrors } from './helpers.mjs';

const ZONES = ['UTC', 'Europe/London', 'America/New_York', 'Asia/Kolkata'];
const marker = `first-look-${Date.now()}`;
let mine;

before(async () => {
  // Rows of our own, settled before any page is read (the database is shared by every test file).
  const waiting = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 3 * 3600_000, args: { look: marker } });
  const failing = await api('POST', '/jobs', {
    kind: 'noop', max_attempts: 1, args: { fail_attempts: 1, message: `${marker} failed` },
  });
  const question = await api('POST', '/questions', {
    game: `${marker} game`, prompt: 'Who kicks off?', choices: ['Home', 'Away'],
    game_time: new Date(Date.now() + 2 * 3600_000).toISOString(),
  });
  const schedule = await api('POST', '/schedules', {
    name: `${marker}-daily`, cron: '0 6 * * *', time_zone: 'Europe/London',
    job: { kind: 'noop', args: { look: marker } },
  });
  const run = await api('POST', '/workflows', {
    name: `${marker} run`, times: { kickoff_at: new Date(Date.now() + 2 * 3600_000).toISOString() },
    steps: [
      { name: 'lock', job: { kind: 'noop' }, at: { time: 'kickoff_at' } },
      { name: 'await_final', job: { kind: 'noop' }, after: [{ step: 'lock' }], signal: 'final',
        deadline: { time: 'kickoff_at', offset_ms: 5 * 3600_000 } },
    ],
  });
  assert.equal(waiting.status, 201);
  assert.equal(question.status, 201);
  assert.equal(schedule.status, 201);
  assert.equal(run.status, 201);
  await eventually('the failing job to be discarded',
    async () => (await api('GET', `/jobs/${failing.body.job.id}`)).body.state, (s) => s === 'discarded');
  mine = { waiting: waiting.body.job.id, failed: failing.body.job.id, question: question.body.id, run: run.body.run.id };
});

// Every page of the dashboard, unfiltered; `refresh` is the server function a live refresh calls
// (none: the page does not refetch on live changes); `shows` is text of our own rows it must show.
function pages() {
  return [
    { path: '/', refresh: 'overview', shows: ['default'] },
    { path: '/jobs', refresh: 'jobs', shows: [marker, `${marker} failed`] },
    { path: `/jobs/${mine.waiting}`, refresh: 'job', shows: [marker, 'Reschedule', 'by (bootstrap token)'] },
    { path: `/jobs/${mine.failed}`, refresh: 'job', shows: ['Attempt 1', 'discarded', 'after its due time'] },
    { path: '/jobs/new', refresh: null, shows: ['Create job'] },
    { path: '/failures', refresh: 'jobs', shows: [`${marker} failed`] },
    { path: '/timers', refresh: 'timers', shows: [`${mine.waiting}`] },
    { path: '/history', refresh: 'history', shows: ['Completed per 1 min', 'Lateness p50 and p99', 'default'] },
    { path: '/queues', refresh: 'queues', shows: ['default'] },
    { path: '/schedules', refresh: 'schedules', shows: [`${marker}-daily`, '06:00'] },
    { path: `/schedules/${marker}-daily`, refresh: 'schedule', shows: [`${marker}-daily`, 'Next slots', 'Europe/London'] },
    { path: '/schedules/new', refresh: null, shows: ['Create schedule'] },
    { path: '/questions', refresh: 'questions', shows: [`${marker} game`] },
    { path: `/questions/${mine.question}`, refresh: 'question', shows: [`${marker} game`, 'Home', 'Away'] },
    { path: '/questions/new', refresh: null, shows: ['Create question'] },
    { path: '/workflows', refresh: 'workflows', shows: [`${marker} run`, '0 of 2 done'] },
    { path: `/workflows/${mine.run}`, refresh: 'workflow', shows: [`${marker} run`, 'waits for its time', 'waits for 1 of its 1 dependencies'] },
    { path: '/audit', refresh: 'audit', shows: ['session.sign_in'] },
    { path: '/users', refresh: null, shows: ['admin'] },
    { path: '/account', refresh: null, shows: ['admin'] },
    { path: '/webhooks', refresh: null, shows: ['Webhook endpoints'] },
    { path: '/calls', refresh: 'webhook_calls', shows: ['Webhook calls'] },
    { path: '/alerts', refresh: 'alerts', shows: ['Firing', 'Rules'] },
  ];
}

// What the main part of the page shows, times left out (they switch from UTC to the browser's zone
// on hydration, and relative ones tick): the heading, each table row, the empty-list notes, and
// any error.
async function snapshot(page) {
  return page.evaluate(() => {
    const text = (el) => {
      const copy = el.cloneNode(true);
      copy.querySelectorAll('time, .countdown').forEach((t) => t.remove());
      return copy.textContent.replace(/\s+/g, ' ').trim();
    };
    const main = document.querySelector('main');
    return {
      heading: text(main.querySelector('h1') ?? main),
      rows: [...main.querySelectorAll('tbody tr')].map(text),
      empty: [...main.querySelectorAll('.empty')].map(text),
      errors: [...main.querySelectorAll('[role=alert], .error')].map(text).filter((t) => t !== ''),
      text: text(main),
    };
  });
}

// Two animation frames: whatever the last response made the page render is on screen by then.
const painted = (page) => page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r))));

for (const zone of ZONES) {
  test(`every page opened unfiltered in ${zone} keeps the rows the server rendered once hydrated`, async () => {
    const browser = await launch({ timezoneId: zone });
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      // The WebAssembly is held back until the page as the server rendered it has been read.
      let gate = Promise.resolve();
      await page.route('**/pkg/*.wasm', async (route) => {
        await gate;
        await route.continue();
      });
      const notes = [];
      for (const { path, refresh, shows } of pages()) {
        let open;
        gate = new Promise((r) => { open = r; });
        await page.goto(baseUrl + path, { waitUntil: 'domcontentloaded' });
        const served = await snapshot(page);
        assert.deepEqual(served.errors, [], `${path} as served`);
        for (const s of shows) assert.ok(served.text.includes(s), `${path} as served lacks ${s}`);

        const refreshed = refresh === null ? null
          : page.waitForResponse((r) => new URL(r.url()).pathname === `/_console/${refresh}`);
        open();
        await hydrated(page);
        if (refreshed !== null) {
          const response = await refreshed;
          await response.finished();
        }
        await painted(page);
        const shown = await snapshot(page);
        assert.deepEqual(shown.errors, [], `${path} (${zone}) once hydrated`);
        assert.equal(shown.heading, served.heading, path);
        for (const row of served.rows) assert.ok(shown.rows.includes(row), `${path} (${zone}) lost the row ${row}`);
        assert.deepEqual(shown.empty, served.empty, path);
        for (const s of shows) assert.ok(shown.text.includes(s), `${path} (${zone}) lacks ${s}`);
        // The page says which zone its times are in.
        notes.push([path, await page.locator('.zone-note').textContent({ timeout: 5000 }).catch(() => null)]);
      }
      // The name the browser gives its zone (Chromium may say Asia/Calcutta for Asia/Kolkata).
      const name = await page.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone);
      assert.deepEqual(notes, pages().map(({ path }) => [path, `Times in ${name}`]));
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });
}

test('the unfiltered jobs list confirms a bulk action on everything and acts on a selection', async () => {
  const browser = await launch({ timezoneId: 'America/New_York' });
  try {
    const made = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 3 * 3600_000, args: { look: `${marker} bulk` } });
    const id = made.body.job.id;
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + '/jobs');
    await hydrated(page);
    const bulk = page.getByRole('form', { name: 'Bulk actions' });
    await bulk.getByLabel('Bulk action', { exact: true }).selectOption('cancel');
    // Everything matching no filter: counted first, in the browser (not confirmed here: the
    // database is shared).
    await bulk.getByRole('button', { name: 'Apply to all matching…' }).click();
    const confirm = page.getByRole('region', { name: 'Confirm bulk action' });
    await confirm.getByText(/^Cancel \d+ jobs matching every job\?$/).waitFor();
    assert.equal(await confirm.getByRole('alert').count(), 0);
    await confirm.getByRole('link', { name: 'Back', exact: true }).click();
    await page.waitForURL((url) => url.pathname === '/jobs' && url.search === '');

    await page.getByLabel(`Select job ${id}`, { exact: true }).check();
    await bulk.getByLabel('Bulk action', { exact: true }).selectOption('cancel');
    await bulk.getByRole('button', { name: 'Apply to selected…' }).click();
    await confirm.getByText('Cancel the 1 selected jobs?').waitFor();
    await confirm.getByRole('button', { name: 'Yes, cancel' }).click();
    await page.getByRole('status').filter({ hasText: '1 cancelled jobs' }).waitFor();
    assert.equal((await api('GET', `/jobs/${id}`)).body.state, 'cancelled');
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
