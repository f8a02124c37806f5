// Times typed and shown across daylight saving, in Chromium with emulated zones. The browser's own
// date cannot be moved, so the instants are put on both sides of a switch instead: a game in July
// and one in January, typed from the same (December or June) day. What is stored is read back
// through the REST API; what is shown is read off the page.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, api, eventually, hydrated, baseUrl, watchErrors } from './helpers.mjs';

// Next year's July and the January after it: both ahead, whatever today is.
const Y = new Date().getUTCFullYear() + 1;
const JULY = `${Y}-07-10T19:00`;
const JANUARY = `${Y + 1}-01-10T19:00`;
// The US switches: the second Sunday of March (02:00 → 03:00), the first of November (02:00 → 01:00).
const sunday = (month, from) => {
  const weekday = new Date(Date.UTC(Y, month, from)).getUTCDay();
  return String(from + ((7 - weekday) % 7)).padStart(2, '0');
};
const SKIPPED = `${Y}-03-${sunday(2, 8)}T02:30`;
const REPEATED = `${Y}-11-${sunday(10, 1)}T01:30`;

// What each zone makes of 19:00 on those two days, as stored (UTC).
const EXPECTED = {
  'America/New_York': [`${Y}-07-10T23:00:00.000Z`, `${Y + 1}-01-11T00:00:00.000Z`],
  'Europe/London': [`${Y}-07-10T18:00:00.000Z`, `${Y + 1}-01-10T19:00:00.000Z`],
  'Asia/Kolkata': [`${Y}-07-10T13:30:00.000Z`, `${Y + 1}-01-10T13:30:00.000Z`],
  UTC: [`${Y}-07-10T19:00:00.000Z`, `${Y + 1}-01-10T19:00:00.000Z`],
};
const iso = (t) => new Date(t).toISOString();
// A time as the page shows it (`2027-07-10 19:00:00`).
const shown = (typed) => `${typed.replace('T', ' ')}:00`;

async function withBrowser(zone, body) {
  const browser = await launch({ timezoneId: zone });
  try {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await body(page);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
}

async function newQuestion(page, name, gameTime) {
  await page.goto(baseUrl + '/questions/new');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New question' });
  await form.getByLabel('Game', { exact: true }).fill(name);
  await form.getByLabel('Question').fill('Who scores first?');
  await form.getByLabel('Choices, one per line').fill('Home\nAway');
  await form.getByLabel(/Game time/).fill(gameTime);
  await form.getByRole('button', { name: 'Create question' }).click();
  return form;
}

for (const [zone, [july, january]] of Object.entries(EXPECTED)) {
  test(`a game time typed in ${zone} keeps the offset of its own date, stored and shown`, async () => {
    await withBrowser(zone, async (page) => {
      await newQuestion(page, `Summer game (${zone}) ${Date.now()}`, JULY);
      await page.waitForURL(/\/questions\/\d+$/);
      const id = Number(page.url().split('/').pop());
      assert.equal(iso((await api('GET', `/questions/${id}`)).body.game_time), july);
      const gameTime = page.locator('.facts time').first();
      await eventually('the game time shown in the zone', () => gameTime.locator('.abs').textContent(),
        (t) => t === shown(JULY));
      // Which zone that is, next to the field and on the page, named as the browser names it
      // (Chromium may say Asia/Calcutta for Asia/Kolkata).
      const name = await page.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone);
      await page.locator('.zone-note', { hasText: `Times in ${name}` }).waitFor();
      const move = page.getByLabel('Move game time to');
      assert.match(await move.inputValue(), new RegExp(`^${JULY}(:00)?$`));
      await page.locator('form', { has: move }).locator('.zone', { hasText: name }).waitFor();

      await move.fill(JANUARY);
      await page.getByRole('button', { name: 'Move' }).click();
      await eventually('the game to move to January', async () => iso((await api('GET', `/questions/${id}`)).body.game_time),
        (t) => t === january);
      await eventually('the January time shown in the zone', () => gameTime.locator('.abs').textContent(),
        (t) => t === shown(JANUARY));
    });
  });
}

// The browser's own clock on each side of a switch: what the browser's offset is today must not
// matter, only the offset of the date typed (the old forms sent today's offset). The games are in the
// year after, ahead of both of the browser's days.
for (const [today, label] of [[`${Y}-06-15T16:00:00Z`, 'a summer'], [`${Y}-12-15T17:00:00Z`, 'a winter']]) {
  test(`from ${label} day in New York, games in July and January get the offsets of their own dates`, async () => {
    const games = [
      [`${Y + 1}-01-10T19:00`, `${Y + 1}-01-11T00:00:00.000Z`],
      [`${Y + 1}-07-10T19:00`, `${Y + 1}-07-10T23:00:00.000Z`],
    ];
    await withBrowser('America/New_York', async (page) => {
      await page.clock.setFixedTime(new Date(today));
      for (const [typed, stored] of games) {
        await newQuestion(page, `From ${label} day, ${typed} ${Date.now()}`, typed);
        assert.equal(await page.evaluate(() => new Date().toISOString()), new Date(today).toISOString());
        await page.waitForURL(/\/questions\/\d+$/);
        const id = Number(page.url().split('/').pop());
        assert.equal(iso((await api('GET', `/questions/${id}`)).body.game_time), stored);
      }
    });
  });
}

test('a job rescheduled and a job made for a time in New York get the offset of that date', async () => {
  const [july, january] = EXPECTED['America/New_York'];
  await withBrowser('America/New_York', async (page) => {
    const made = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 3 * 3600_000 });
    const id = made.body.job.id;
    await page.goto(`${baseUrl}/jobs/${id}`);
    await hydrated(page);
    await page.getByLabel('Reschedule to').fill(JULY);
    await page.getByRole('button', { name: 'Reschedule' }).click();
    await eventually('the job to move to July', async () => iso((await api('GET', `/jobs/${id}`)).body.scheduled_at),
      (t) => t === july);
    await eventually('its due time shown in New York time', () => page.locator('.facts time .abs').first().textContent(),
      (t) => t === shown(JULY));

    await page.goto(baseUrl + '/jobs/new');
    await hydrated(page);
    const form = page.getByRole('form', { name: 'New job' });
    await form.getByLabel('Kind').selectOption('noop');
    await form.getByRole('radio', { name: 'at', exact: true }).check();
    await form.getByLabel('Date and time').fill(JANUARY);
    await form.locator('.zone', { hasText: 'America/New_York' }).waitFor();
    await form.getByRole('button', { name: 'Create job' }).click();
    await page.waitForURL(/\/jobs\/\d+$/);
    const created = Number(page.url().split('/').pop());
    assert.equal(iso((await api('GET', `/jobs/${created}`)).body.scheduled_at), january);
  });
});

test('the due-time filter reads each bound in the offset of its own date', async () => {
  const [july, january] = EXPECTED['America/New_York'];
  const batch = `dst-filter-${Date.now()}`;
  const summer = (await api('POST', '/jobs', { kind: 'noop', scheduled_at: july, args: { batch } })).body.job.id;
  const winter = (await api('POST', '/jobs', { kind: 'noop', scheduled_at: january, args: { batch } })).body.job.id;
  await withBrowser('America/New_York', async (page) => {
    await page.goto(baseUrl + '/jobs');
    await hydrated(page);
    // Gone if filtering loads a new document (the router's form filters in the page).
    await page.evaluate(() => { window.samePage = true; });
    const ids = async () => page.getByRole('table', { name: 'Jobs' }).locator('tbody tr')
      .evaluateAll((rows) => rows.map((r) => Number(r.dataset.job)));
    for (const [day, expected] of [[JULY, summer], [JANUARY, winter]]) {
      const filters = page.getByRole('search', { name: 'Filter jobs' });
      await filters.getByLabel('Args contain').fill(`batch=${batch}`);
      // 18:30 to 19:30 on the day, around the job's 19:00.
      await filters.getByLabel('Due from').fill(day.replace('19:00', '18:30'));
      await filters.getByLabel('to', { exact: true }).fill(day.replace('19:00', '19:30'));
      await filters.getByRole('button', { name: 'Filter' }).click();
      await page.waitForURL((url) => url.searchParams.get('from') === day.replace('19:00', '18:30'));
      await eventually(`only the job due at 19:00 on ${day.slice(0, 10)}`, ids, (shownIds) => shownIds.length === 1 && shownIds[0] === expected);
      assert.equal(await page.getByRole('alert').count(), 0);
    }
    assert.equal(await page.evaluate(() => window.samePage), true, 'filtering loaded a new page');
  });
});

test('a time in the skipped hour is refused, saying why', async () => {
  await withBrowser('America/New_York', async (page) => {
    const name = `Skipped hour ${Date.now()}`;
    await newQuestion(page, name, SKIPPED);
    const wall = SKIPPED.replace('T', ' ');
    await page.getByRole('alert').filter({
      hasText: `${wall} does not exist in America/New_York: the clocks go forward from 02:00 to 03:00`,
    }).waitFor();
    assert.match(page.url(), /\/questions\/new$/);
  });
});

test('a time in the repeated hour asks which one is meant, and stores the one chosen', async () => {
  await withBrowser('America/New_York', async (page) => {
    const made = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 3 * 3600_000 });
    const id = made.body.job.id;
    await page.goto(`${baseUrl}/jobs/${id}`);
    await hydrated(page);
    await page.getByLabel('Reschedule to').fill(REPEATED);
    const which = page.getByLabel(/happens twice in America\/New_York/);
    await which.waitFor();
    const wall = REPEATED.replace('T', ' ');
    assert.match(await page.locator('label.which').textContent(),
      new RegExp(`${wall} happens twice in America/New_York \\(the clocks go back\\): first at UTC-04:00 \\(05:30 UTC\\), then at UTC-05:00 \\(06:30 UTC\\)`));
    await which.selectOption({ label: `${wall} at UTC-05:00 (06:30 UTC), the second` });
    await page.getByRole('button', { name: 'Reschedule' }).click();
    await eventually('the job to move to the second 01:30', async () => iso((await api('GET', `/jobs/${id}`)).body.scheduled_at),
      (t) => t === `${REPEATED.slice(0, 10)}T06:30:00.000Z`);
  });
});
