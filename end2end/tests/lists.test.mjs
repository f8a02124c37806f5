// The jobs and questions pages: a failing job shows its error under its state's filter (reached
// from the overview's count), and a question created through the API is listed.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('a failed job shows its error under the discarded filter, reached from the overview', async () => {
  const created = await api('POST', '/jobs', {
    kind: 'noop', max_attempts: 1, args: { fail_attempts: 1, message: 'kickoff e2e failure' },
  });
  assert.equal(created.status, 201);
  const id = created.body.job.id;
  await eventually('the job to be discarded', async () => (await api('GET', `/jobs/${id}`)).body.state,
    (s) => s === 'discarded');

  const page = await browser.newPage();
  await page.goto(baseUrl + '/');
  await hydrated(page);
  await page.getByRole('link', { name: /discarded/ }).click();
  await page.waitForURL(/\/jobs\?state=discarded/);
  const table = page.getByRole('table', { name: 'Jobs' });
  await table.getByRole('cell', { name: 'kickoff e2e failure', exact: true }).waitFor();
  await page.screenshot({ path: path.join(screenshots, 'jobs.png'), fullPage: true });
  await page.close();
});

test('a question created through the API is listed with its status', async () => {
  const gameTime = new Date(Date.now() + 3600_000).toISOString();
  const created = await api('POST', '/questions', {
    game: 'Lions vs Tigers (e2e)', prompt: 'Who scores first?', choices: ['Lions', 'Tigers'], game_time: gameTime,
  });
  assert.equal(created.status, 201);
  const page = await browser.newPage();
  await page.goto(baseUrl + '/questions');
  const row = page.getByRole('row', { name: /Lions vs Tigers \(e2e\)/ });
  await row.waitFor();
  assert.match(await row.textContent(), /open/);
  await page.screenshot({ path: path.join(screenshots, 'questions.png'), fullPage: true });
  await page.close();
});

test('a pending timer is cancelled, and a failed job retried, from the jobs list', async () => {
  const timer = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 });
  const failing = await api('POST', '/jobs', {
    kind: 'noop', max_attempts: 1, args: { fail_attempts: 1, message: 'fails once' },
  });
  const timerId = timer.body.job.id;
  const failingId = failing.body.job.id;
  await eventually('the failing job to be discarded',
    async () => (await api('GET', `/jobs/${failingId}`)).body.state, (s) => s === 'discarded');

  const page = await browser.newPage();
  await page.goto(baseUrl + '/jobs?state=scheduled');
  await hydrated(page);
  await page.getByRole('button', { name: `Cancel job ${timerId}`, exact: true }).click();
  await eventually('the timer to be cancelled', async () => (await api('GET', `/jobs/${timerId}`)).body.state,
    (s) => s === 'cancelled');
  await page.getByRole('button', { name: `Cancel job ${timerId}`, exact: true }).waitFor({ state: 'detached' });

  await page.goto(baseUrl + '/jobs?state=discarded');
  await hydrated(page);
  await page.getByRole('button', { name: `Retry job ${failingId}`, exact: true }).click();
  // Its second attempt succeeds (it fails only its first).
  await eventually('the retried job to complete', async () => (await api('GET', `/jobs/${failingId}`)).body.state,
    (s) => s === 'completed');
  await page.close();
});
