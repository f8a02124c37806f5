// Questions from the dashboard: create one with its lock job (and its game's workflow), watch
// predictions arrive live, and move its game time (the same lock job, and the game's run, move
// with it).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots, watchErrors } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

// A `datetime-local` value in the machine's zone (the browser runs on the same machine).
function localValue(date) {
  const p = (n) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${p(date.getMonth() + 1)}-${p(date.getDate())}T${p(date.getHours())}:${p(date.getMinutes())}:${p(date.getSeconds())}`;
}

test("a question made with the form starts its game's run, shows predictions live and moves its lock job and its run", async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/questions/new');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New question' });
  await form.getByLabel('Game', { exact: true }).fill('Owls vs Hawks (e2e)');
  await form.getByLabel('Question').fill('Who wins the toss?');
  await form.getByLabel('Choices, one per line').fill('Owls\nHawks');
  const gameTime = new Date(Date.now() + 3600_000);
  await form.getByLabel(/Game time/).fill(localValue(gameTime));
  await form.getByRole('checkbox', { name: /Start its game's workflow now/ }).check();
  await page.screenshot({ path: path.join(screenshots, 'new-question.png'), fullPage: true });
  await form.getByRole('button', { name: 'Create question' }).click();

  await page.waitForURL(/\/questions\/\d+$/);
  const id = Number(page.url().split('/').pop());
  const question = (await api('GET', `/questions/${id}`)).body;
  assert.equal(question.status, 'open');
  // The game time round-trips through the browser's zone to the same instant (to the second).
  assert.equal(Math.floor(new Date(question.game_time).getTime() / 1000), Math.floor(gameTime.getTime() / 1000));
  const lockJob = question.lock_job_id;
  await page.getByRole('link', { name: `#${lockJob}` }).waitFor();
  const gameRun = async () => (await api('GET', '/workflows?limit=200')).body.runs
    .find((r) => r.key === 'game:Owls vs Hawks (e2e)' && r.state === 'running');
  const run = await gameRun();
  assert.ok(run, 'the game\'s run started with its question');
  assert.equal(new Date(run.times.kickoff_at).getTime(), new Date(question.game_time).getTime());

  const predicted = await api('POST', `/questions/${id}/predictions`, { player: 'ana', choice: 'Hawks' });
  assert.ok(predicted.status < 300, JSON.stringify(predicted));
  const hawks = page.getByRole('row', { name: /Hawks/ });
  await eventually('the prediction to show', () => hawks.textContent(), (t) => /Hawks\s*1\s*100%/.test(t));
  await page.screenshot({ path: path.join(screenshots, 'question-detail.png'), fullPage: true });

  const later = new Date(gameTime.getTime() + 1800_000);
  await page.getByLabel('Move game time to').fill(localValue(later));
  await page.getByRole('button', { name: 'Move' }).click();
  await eventually('the lock job to move', async () => (await api('GET', `/jobs/${lockJob}`)).body.scheduled_at,
    (at) => Math.floor(new Date(at).getTime() / 1000) === Math.floor(later.getTime() / 1000));
  assert.equal((await api('GET', `/questions/${id}`)).body.lock_job_id, lockJob);
  const moved = await gameRun();
  assert.equal(moved.id, run.id);
  assert.equal(Math.floor(new Date(moved.times.kickoff_at).getTime() / 1000), Math.floor(later.getTime() / 1000), 'the run followed its question');
  assert.deepEqual(errors, []);
  await page.close();
});

test("a locked question proves its lock: how late after game time, by which node, and the lock job's attempt record", async () => {
  const gameTime = new Date(Date.now() + 1500);
  const made = await api('POST', '/questions', {
    game: 'Foxes vs Bears (e2e lock)', prompt: 'First to score?', choices: ['Foxes', 'Bears'],
    game_time: gameTime.toISOString(),
  });
  assert.equal(made.status, 201, JSON.stringify(made));
  const id = made.body.id;
  await api('POST', `/questions/${id}/predictions`, { player: 'bo', choice: 'Bears' });
  await eventually('the question to lock', async () => (await api('GET', `/questions/${id}`)).body.status,
    (s) => s === 'locked');
  const lockJob = (await api('GET', `/questions/${id}`)).body.lock_job_id;
  await eventually('the lock attempt to be recorded', async () => (await api('GET', `/jobs/${lockJob}/attempts`)).body,
    (a) => Array.isArray(a) && a.some((r) => r.outcome === 'completed'));

  // A prediction after the lock is refused, and counted on the question.
  const late = await api('POST', `/questions/${id}/predictions`, { player: 'cy', choice: 'Foxes' });
  assert.equal(late.status, 409, JSON.stringify(late));
  assert.equal((await api('GET', `/questions/${id}`)).body.refused_predictions, 1);

  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + `/questions/${id}`);
  await hydrated(page);
  assert.equal(await page.locator('[data-refused]').textContent(), '1 refused after the lock');
  const proof = page.locator('.lock-proof');
  await proof.waitFor();
  assert.match(await proof.textContent(), /^\d+(\.\d)? (ms|s) after game time by node \S+$/);
  await page.screenshot({ path: path.join(screenshots, 'question-lock-proof.png'), fullPage: true });

  // The lock job's page: the attempt's lateness, its output (collapsed until opened).
  await page.getByRole('link', { name: `#${lockJob}` }).click();
  await page.waitForURL(new RegExp(`/jobs/${lockJob}$`));
  await hydrated(page);
  const attempt = page.getByRole('list', { name: 'Attempts' }).locator('li.outcome-completed');
  assert.match(await attempt.textContent(), /after its due time/);
  const output = attempt.getByLabel('Output');
  assert.equal(await output.isVisible(), false);
  await attempt.getByText('Output', { exact: true }).click();
  assert.match(await output.textContent(), /"predictions_frozen": 1/);
  await page.screenshot({ path: path.join(screenshots, 'job-attempt-record.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});
