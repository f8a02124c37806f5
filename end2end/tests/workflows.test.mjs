// A workflow run from the dashboard, in two time zones: the list with the run's progress from
// its counters; the run's page with its graph drawn on the server (readable before the page
// hydrates), each step's wait in a sentence with its deadline in the browser's zone; a signal
// sent with a button starts the waiting step, and the page follows the run live to its end.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots, watchErrors, partnerSignal, moveRunTime } from './helpers.mjs';

// A run whose lock fires at its time (a moment from now), then waits for the partner's final
// whistle until five hours after kickoff, then settles and publishes (the leaderboard even if
// settling failed).
async function game(marker) {
  const kickoff = new Date(Date.now() + 1500);
  const made = await api('POST', '/workflows', {
    name: `game ${marker}`, key: `game:${marker}`, times: { kickoff_at: kickoff.toISOString() },
    steps: [
      { name: 'lock', job: { kind: 'noop' }, at: { time: 'kickoff_at' } },
      { name: 'await_final', job: { kind: 'noop' }, after: [{ step: 'lock' }],
        signal: 'final', deadline: { time: 'kickoff_at', offset_ms: 5 * 3600_000 } },
      { name: 'settle', job: { kind: 'noop' }, after: [{ step: 'await_final' }] },
      { name: 'leaderboard', job: { kind: 'noop' }, after: [{ step: 'settle', on_failure: 'run' }] },
    ],
  });
  assert.equal(made.status, 201, JSON.stringify(made));
  return { id: made.body.run.id, kickoff };
}

for (const zone of ['Asia/Kolkata', 'America/New_York']) {
  test(`a run's page in ${zone} draws its graph, says what each step waits for, and a signal sent from it finishes the run`, async () => {
    const marker = `e2e-${zone.split('/')[1]}-${Date.now()}`;
    const { id, kickoff } = await game(marker);
    await eventually('the lock to run and the final whistle to be awaited',
      async () => (await api('GET', `/workflows/${id}`)).body.steps[1].waits ?? '',
      (w) => w.startsWith('waits for the signal'));

    const browser = await launch({ timezoneId: zone });
    try {
      // As the server rendered it, without its WebAssembly (a page of its own: the script's
      // failed load is that page's error): the graph and the sentences are there.
      const bare = await browser.newPage();
      await bare.route('**/pkg/*.wasm', (route) => route.abort());
      await bare.goto(baseUrl + `/workflows/${id}`, { waitUntil: 'domcontentloaded' });
      const served = bare.getByRole('img', { name: "The run's steps and what each waits for" });
      assert.equal(await served.locator('g.wf-node').count(), 4);
      assert.equal(await served.locator('path.wf-edge').count(), 3);
      assert.equal(await served.locator('path.wf-edge.on-run').count(), 1, 'the leaderboard runs anyway: dashed');
      assert.match(await bare.getByRole('row', { name: /await_final/ }).textContent(), /waits for the signal "final" until/);
      assert.match(await bare.getByRole('row', { name: /settle/ }).first().textContent(), /waits for 1 of its 1 dependencies/);
      await bare.close();

      const page = await browser.newPage();
      const errors = watchErrors(page);
      const graph = page.getByRole('img', { name: "The run's steps and what each waits for" });
      await page.goto(baseUrl + `/workflows/${id}`);
      await hydrated(page);
      // The deadline in the browser's zone: five hours after kickoff.
      const deadline = new Date(kickoff.getTime() + 5 * 3600_000);
      const local = new Intl.DateTimeFormat('en-GB', { timeZone: zone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(deadline);
      const waiting = page.getByRole('row', { name: /await_final/ });
      assert.ok((await waiting.textContent()).includes(local), `${await waiting.textContent()} shows ${local}`);
      await page.screenshot({ path: path.join(screenshots, `workflow-waiting-${zone.replace('/', '-')}.png`), fullPage: true });

      await waiting.getByRole('button', { name: 'Send the signal final' }).click();
      const state = page.locator('dd .badge').first();
      await eventually('the run to complete on the page', () => state.textContent(), (t) => t === 'completed');
      await eventually('every step to complete in the graph',
        () => graph.locator('g.wf-node.state-completed').count(), (n) => n === 4);
      const signals = page.getByRole('table', { name: 'Signals' });
      assert.match(await signals.textContent(), /final\s*console:admin/);
      await page.screenshot({ path: path.join(screenshots, `workflow-done-${zone.replace('/', '-')}.png`), fullPage: true });

      assert.deepEqual(errors, []);
      await page.close();

      // The list, in a page of its own (leaving the run's page while it refreshes live would
      // abort its fetch).
      const list = await browser.newPage();
      const listErrors = watchErrors(list);
      await list.goto(baseUrl + '/workflows');
      await hydrated(list);
      const row = list.getByRole('row', { name: new RegExp(`game ${marker}`) });
      assert.match(await row.textContent(), /completed\s*4 of 4 done/);
      assert.deepEqual(listErrors, []);
    } finally {
      await browser.close();
    }
  });
}

test("a map step's tasks show their progress live on the run's page, and the step after it starts with the last", async () => {
  const marker = `e2e-map-${Date.now()}`;
  const made = await api('POST', '/workflows', {
    name: `notify ${marker}`,
    steps: [
      { name: 'notify', job: { kind: 'noop', args: { sleep_ms: 1000 } }, tasks: 40 },
      { name: 'leaderboard', job: { kind: 'noop' }, after: [{ step: 'notify' }] },
    ],
  });
  assert.equal(made.status, 201, JSON.stringify(made));
  assert.equal(made.body.steps[0].tasks.total, 40);
  const id = made.body.run.id;
  const browser = await launch({ timezoneId: 'Europe/Berlin' });
  try {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + `/workflows/${id}`);
    await hydrated(page);
    const row = page.getByRole('table', { name: 'Steps' }).getByRole('row', { name: /^notify/ });
    const bar = page.getByRole('progressbar', { name: 'Tasks of notify' });
    // Live, without a reload: the bar moves while the tasks run, then is full.
    const seen = new Set();
    await eventually('the tasks to finish on the page',
      async () => { const v = Number(await bar.getAttribute('value')); seen.add(v); return v; },
      (v) => v === 40);
    assert.ok([...seen].some((v) => v > 0 && v < 40) || seen.size > 1, `the bar moved: ${[...seen]}`);
    assert.match(await row.textContent(), /40 of 40 tasks/);
    const state = page.locator('dd .badge').first();
    await eventually('the run to complete on the page', () => state.textContent(), (t) => t === 'completed');
    assert.match(await row.textContent(), /"items":0/);
    await page.screenshot({ path: path.join(screenshots, 'workflow-map-step.png'), fullPage: true });
    const detail = (await api('GET', `/workflows/${id}`)).body;
    assert.deepEqual(detail.steps[0].tasks, { total: 40, completed: 40, failed: 0, cancelled: 0, items: 0 });
    assert.equal(detail.steps[1].state, 'completed');
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});

test('a failed step is retried and a waiting step skipped from the run page, each audited', async () => {
  const made = await api('POST', '/workflows', {
    name: 'retry from the page', steps: [
      { name: 'held', job: { kind: 'noop', queue: 'nobody-e2e' } },
      { name: 'flaky', job: { kind: 'noop', max_attempts: 1, args: { fail_attempts: 1 } } },
      { name: 'after', job: { kind: 'noop' }, after: [{ step: 'held' }] },
    ],
  });
  assert.equal(made.status, 201, JSON.stringify(made));
  const id = made.body.run.id;
  await eventually('flaky to fail', async () => (await api('GET', `/workflows/${id}`)).body.run.failed, (n) => n === 1);

  const browser = await launch();
  try {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + `/workflows/${id}`);
    await hydrated(page);
    await page.getByRole('button', { name: 'Skip step held' }).click();
    await eventually('held to be skipped and after to run',
      async () => (await api('GET', `/workflows/${id}`)).body.steps.map((s) => s.state).join(','),
      (s) => s === 'skipped,failed,completed');
    await page.getByRole('button', { name: 'Retry' }).click();
    await eventually('flaky to run again (and fail again: one attempt)',
      async () => (await api('GET', `/workflows/${id}`)).body.steps[1].job_id,
      (job) => job !== made.body.steps[1].job_id);
    await page.goto(baseUrl + '/audit');
    await hydrated(page);
    const log = await page.locator('main').textContent();
    assert.ok(log.includes('workflow.skip') && log.includes('workflow.retry'), log);
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});

for (const zone of ['Europe/London', 'Asia/Tokyo']) {
  test(`in ${zone}, a postponed game is moved from its page, a partner's signed final whistle shows there, and the run is run again from a step`, async () => {
    const marker = `moved-${zone.split('/')[1]}-${Date.now()}`;
    const kickoff = new Date(Date.now() + 3600_000);
    const made = await api('POST', '/workflows', {
      name: 'game', key: `game:${marker}`, times: { kickoff_at: kickoff.toISOString() },
      steps: [
        { name: 'lock', job: { kind: 'noop' }, at: { time: 'kickoff_at' } },
        { name: 'await_final', job: { kind: 'noop' }, signal: 'final',
          deadline: { time: 'kickoff_at', offset_ms: 5 * 3600_000 } },
        { name: 'settle', job: { kind: 'noop', max_attempts: 1, args: { fail_attempts: 1 } },
          after: [{ step: 'await_final' }] },
      ],
    });
    assert.equal(made.status, 201, JSON.stringify(made));
    const id = made.body.run.id;
    const partner = await api('POST', '/webhook-endpoints', {
      url_prefix: `https://scores-${marker.toLowerCase()}.example/`, signal_workflows: ['game'],
    });
    assert.equal(partner.status, 201, JSON.stringify(partner));

    const browser = await launch({ timezoneId: zone });
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      await page.goto(baseUrl + `/workflows/${id}`);
      await hydrated(page);
      // Postponed by 30 minutes: the lock's time and the deadline move with it.
      await moveRunTime(page, '30m');
      const later = new Date(kickoff.getTime() + 30 * 60_000);
      await eventually('kickoff_at to move by 30 minutes',
        async () => (await api('GET', `/workflows/${id}`)).body.run.times.kickoff_at,
        (t) => new Date(t).getTime() === later.getTime());
      const local = new Intl.DateTimeFormat('en-GB', { timeZone: zone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(later);
      await eventually('the page to show the new time in the browser\'s zone',
        () => page.locator('dl.facts').textContent(), (t) => t.includes(local));

      // The partner's signed result: its source and payload on the page, live.
      const sent = await partnerSignal(partner.body.endpoint.id, partner.body.secret,
        { key: `game:${marker}`, name: 'final', payload: { home: 2, away: 1 } });
      assert.equal(sent.status, 201, JSON.stringify(sent));
      const signals = page.getByRole('table', { name: 'Signals' });
      await eventually('the signal on the page', () => signals.textContent().catch(() => ''),
        (t) => t.includes(`endpoint:${partner.body.endpoint.id}`) && t.includes('"home":2'));
      await eventually('settle to fail (its one attempt fails)',
        async () => (await api('GET', `/workflows/${id}`)).body.steps[2].state, (s) => s === 'failed');

      // Cancel the lock's job so the run settles, then run it again from the lock.
      const lockJob = (await api('GET', `/workflows/${id}`)).body.steps[0].job_id;
      await api('POST', `/jobs/${lockJob}/cancel`, {});
      await eventually('the run to settle', async () => (await api('GET', `/workflows/${id}`)).body.run.state,
        (s) => s === 'failed');
      await page.reload();
      await hydrated(page);
      const again = page.getByRole('form', { name: 'Run again from a step' });
      await again.getByRole('combobox').selectOption('lock');
      await again.getByRole('button', { name: 'Run again' }).click();
      const link = page.locator('[data-rerun] a');
      await link.waitFor();
      await link.click();
      await eventually('the new run\'s page', () => page.locator('main').textContent(),
        (t) => t.includes(`run #${id}`) && t.includes('Runs again'));
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });
}
