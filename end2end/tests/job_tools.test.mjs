// The operator's tools on many jobs, in the browser: a waiting job edited on its page (typing
// survives live updates), a filter's autocomplete, a postponed game moved on the list with its
// count confirmed, and the list exported as the filter shows it.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, watchErrors } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

const shot = (page, name) => page.screenshot({ path: path.join(screenshots, `${name}.png`), fullPage: true });

test('a waiting job is edited on its page, and a postponed game is moved and exported from the list', async () => {
  const game = Date.now();
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const r = await api('POST', '/jobs', {
      kind: 'noop', schedule_in_ms: 3_600_000 + i * 60_000, tags: ['e2e-tools'], args: { game_id: game, i },
    });
    ids.push(r.body.job.id);
  }
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(`${baseUrl}/jobs/${ids[0]}`);
  await hydrated(page);
  const form = page.getByRole('form', { name: 'Edit job' });
  // The form's ranges are the engine's, sent by the server (the UI keeps no copy of them).
  const priority = form.getByLabel('Priority (0 highest)');
  assert.deepEqual([await priority.getAttribute('min'), await priority.getAttribute('max')], ['0', '9']);
  const attempts = form.getByLabel('Max attempts');
  assert.deepEqual([await attempts.getAttribute('min'), await attempts.getAttribute('max')], ['1', '1000']);
  await priority.fill('2');
  // Another job changing sends a live update: what is typed stays.
  await api('POST', '/jobs', { kind: 'noop', args: { e2e: 'live-update' } });
  await form.getByLabel('Tags (separated by commas)').fill('e2e-tools, edited');
  await shot(page, 'job-edit');
  await form.getByRole('button', { name: 'Save changes' }).click();
  await page.locator('.facts dd', { hasText: 'e2e-tools, edited' }).waitFor();
  const edited = await api('GET', `/jobs/${ids[0]}`);
  assert.equal(edited.body.priority, 2);
  assert.deepEqual(edited.body.tags, ['e2e-tools', 'edited']);

  // The list's filters suggest what recent jobs carry.
  await page.goto(`${baseUrl}/jobs?args=${encodeURIComponent(`game_id=${game}`)}`);
  await hydrated(page);
  await page.locator('datalist#suggest-tags option[value="e2e-tools"]').waitFor({ state: 'attached' });
  await page.locator('datalist#suggest-args option[value="game_id="]').waitFor({ state: 'attached' });

  // The game moves an hour later: counted, confirmed, moved.
  const before = await Promise.all(ids.map(async (id) => Date.parse((await api('GET', `/jobs/${id}`)).body.scheduled_at)));
  await page.getByLabel('Bulk action', { exact: true }).selectOption('shift');
  await page.getByRole('button', { name: 'Apply to all matching…' }).click();
  const confirm = page.getByRole('region', { name: 'Confirm bulk action' });
  await confirm.getByText(`Move in time 3 jobs matching args = game_id=${game}?`).waitFor();
  await confirm.getByLabel('Move by').fill('1h');
  await shot(page, 'bulk-shift');
  await confirm.getByRole('button', { name: 'Yes, move in time' }).click();
  await page.getByRole('status').filter({ hasText: '3 moved jobs.' }).waitFor();
  for (const [n, id] of ids.entries()) {
    const after = Date.parse((await api('GET', `/jobs/${id}`)).body.scheduled_at);
    assert.equal(after - before[n], 3_600_000);
  }

  // The export link downloads what the filter shows.
  const href = await page.getByRole('link', { name: 'Export CSV' }).getAttribute('href');
  assert.match(href, /^\/jobs\/export\?args=/);
  const res = await page.request.get(baseUrl + href);
  assert.equal(res.status(), 200);
  const lines = (await res.text()).trim().split('\n');
  assert.equal(lines.length, 4);
  assert.match(lines[0], /^id,queue,kind,state/);
  assert.deepEqual(errors, []);
  await page.close();
});
