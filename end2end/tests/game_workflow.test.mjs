// The game's workflow in the browser (issue 49): a game's questions and players' predictions, its
// run started, locked at kickoff, settled by the partner's signed final result (signed here with
// Node's own crypto, as Standard Webhooks says), the leaderboard on the run's page, followed live,
// in two time zones; and a partner that never answers: the settle fails at its deadline and the
// alert page says so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { launch, api, eventually, hydrated, baseUrl, watchErrors, partnerSignal, moveRunTime } from './helpers.mjs';

// A game two seconds from now with two questions and three players; its run started.
async function game(name, settings = {}) {
  const at = new Date(Date.now() + 2000).toISOString();
  const ask = async (prompt, choices) => {
    const made = await api('POST', '/questions', { game: name, prompt, choices, game_time: at });
    assert.equal(made.status, 201, JSON.stringify(made));
    return made.body.id;
  };
  const first = await ask('Who scores first?', ['Lions', 'Bears']);
  const over = await ask('Over 40 points?', ['Yes', 'No']);
  for (const [player, a, b] of [['ana', 'Lions', 'Yes'], ['ben', 'Bears', 'Yes'], ['cem', 'Lions', 'No']]) {
    assert.equal((await api('POST', `/questions/${first}/predictions`, { player, choice: a })).status, 201);
    assert.equal((await api('POST', `/questions/${over}/predictions`, { player, choice: b })).status, 201);
  }
  const started = await api('POST', `/games/${encodeURIComponent(name)}/workflow`, settings);
  assert.equal(started.status, 201, JSON.stringify(started));
  return { run: started.body.run.id, first, over };
}

for (const zone of ['Asia/Kolkata', 'America/Los_Angeles']) {
  test(`in ${zone}, a game locks at kickoff, settles on the partner's signed result and its leaderboard shows on the run's page`, async () => {
    const name = `Lions vs Bears ${zone} ${Date.now()}`;
    const partner = await api('POST', '/webhook-endpoints', {
      url_prefix: `https://scores-${Date.now()}.example/`, signal_workflows: ['game'],
    });
    assert.equal(partner.status, 201, JSON.stringify(partner));
    const { run, first, over } = await game(name);
    const browser = await launch({ timezoneId: zone });
    try {
      const page = await browser.newPage();
      const errors = watchErrors(page);
      await page.goto(baseUrl + `/workflows/${run}`);
      await hydrated(page);
      const stepRows = page.getByRole('table', { name: 'Steps' });
      const settle = stepRows.getByRole('row', { name: /^settle/ });
      await eventually('the lock at kickoff, then the settle waiting for the final result',
        () => settle.textContent(), (t) => /waits for the signal "final" until/.test(t));
      // The deadline, five hours after kickoff, in the browser's zone.
      const detail = (await api('GET', `/workflows/${run}`)).body;
      const deadline = new Date(detail.steps[1].deadline_at);
      const local = new Intl.DateTimeFormat('en-GB', { timeZone: zone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(deadline);
      assert.ok((await settle.textContent()).includes(local), `${await settle.textContent()} shows ${local}`);
      for (const id of [first, over]) {
        assert.equal((await api('GET', `/questions/${id}`)).body.status, 'locked');
      }

      const sent = await partnerSignal(partner.body.endpoint.id, partner.body.secret, {
        key: `game:${name}`, name: 'final', payload: { answers: { [first]: 'Lions', [over]: 'Yes' } },
      });
      assert.equal(sent.status, 201, JSON.stringify(sent));
      const state = page.locator('dd .badge').first();
      await eventually('the run to complete on the page', () => state.textContent(), (t) => t === 'completed');
      const board = stepRows.getByRole('row', { name: /^leaderboard/ });
      await eventually('the leaderboard on the page', () => board.textContent(),
        (t) => t.includes('"player":"ana"') && t.includes('"rank":1'));
      const signals = page.getByRole('table', { name: 'Signals' });
      assert.match(await signals.textContent(), new RegExp(`endpoint:${partner.body.endpoint.id}`));
      for (const id of [first, over]) {
        assert.equal((await api('GET', `/questions/${id}`)).body.status, 'settled');
      }
      assert.deepEqual(errors, []);
    } finally {
      await browser.close();
    }
  });
}

test('a partner that never answers: the settle fails at its deadline, nothing after it runs, and the alert says so', async () => {
  const rule = await api('POST', '/alert-rules', { name: `deadline ${Date.now()}`, condition: 'workflow_deadline', workflow: 'game' });
  assert.equal(rule.status, 201, JSON.stringify(rule));
  const name = `Wolves vs Hawks ${Date.now()}`;
  const { run } = await game(name, { deadline_ms: 60_000 });
  const browser = await launch({ timezoneId: 'Europe/Berlin' });
  try {
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + `/workflows/${run}`);
    await hydrated(page);
    // The kickoff three minutes back (as a game moved by hand): its deadline, a minute after,
    // passed.
    await moveRunTime(page, '-3m');
    const state = page.locator('dd .badge').first();
    await eventually('the run to fail on the page', () => state.textContent(), (t) => t === 'failed');
    const steps = (await api('GET', `/workflows/${run}`)).body.steps.map((s) => `${s.name}:${s.state}`);
    assert.deepEqual(steps, ['lock:completed', 'settle:failed', 'leaderboard:failed']);
    assert.match(await page.getByRole('table', { name: 'Steps' }).getByRole('row', { name: /^settle/ }).textContent(),
      /passed without the signal "final"/);
    await page.goto(baseUrl + '/alerts');
    await hydrated(page);
    await eventually('the alert on its page', () => page.locator('main').textContent(),
      (t) => t.includes(`(game:${name}): step settle had no signal final by its deadline`));
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
  }
});
