// The game's workflow in the browser (issue 49): a game's questions and players' predictions, its
// run started, locked at kickoff, settled by the partner's signed final result (signed here with
// Node's own crypto, as Standard Webhooks says), the leaderboard on the run's page, followed live,
// in two time zones; a postponed game moved from its run's page and by its question, as one; its
// players told in pages through the webhooks queue's rate, the notify step's progress live; and a
// partner that never answers: the settle fails at its deadline and the alert page says so; and a
// partner that does not call us: its result API asked by the run, from the new question form.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots, watchErrors, partnerSignal, moveRunTime } from './helpers.mjs';

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
    // Once locked (a move of the run moves the game's open questions with it, and a question
    // refuses a game time in the past), the kickoff three minutes back, as a game moved by
    // hand: its deadline, a minute after, passed.
    await eventually('the lock at kickoff', async () => (await api('GET', `/workflows/${run}`)).body.steps[0].state,
      (s) => s === 'completed');
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

// The receiver scripts/test lets webhooks call (KICKOFF_E2E_RECEIVER_PORT).
const port = Number(process.env.KICKOFF_E2E_RECEIVER_PORT ?? 0);

test("in Australia/Sydney, a postponed game moves as one, and its players are told in pages at the webhooks queue's rate, the notify step's progress live", async () => {
  assert.ok(port > 0, 'KICKOFF_E2E_RECEIVER_PORT is not set: run through scripts/test');
  const received = [];
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      received.push({ at: Date.now(), path: req.url, body: JSON.parse(body || 'null') });
      res.end('ok');
    });
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const limited = await api('PATCH', '/queues/webhooks', { rate: '2/s' });
  assert.equal(limited.status, 200, JSON.stringify(limited));
  const browser = await launch({ timezoneId: 'Australia/Sydney' });
  try {
    const name = `Kites vs Emus ${Date.now()}`;
    const at = new Date(Date.now() + 3600_000);
    const q = await api('POST', '/questions', { game: name, prompt: 'Who wins?', choices: ['Kites', 'Emus'], game_time: at.toISOString() });
    assert.equal(q.status, 201, JSON.stringify(q));
    const players = Array.from({ length: 9 }, (_, i) => `fan-${i}`);
    for (const [i, player] of players.entries()) {
      const made = await api('POST', `/questions/${q.body.id}/predictions`, { player, choice: i % 3 === 0 ? 'Kites' : 'Emus' });
      assert.equal(made.status, 201, JSON.stringify(made));
    }
    const started = await api('POST', `/games/${encodeURIComponent(name)}/workflow`,
      { notify_url: `http://127.0.0.1:${port}/players`, notify_tasks: 2, notify_batch: 2 });
    assert.equal(started.status, 201, JSON.stringify(started));
    const run = started.body.run.id;
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + `/workflows/${run}`);
    await hydrated(page);
    const localTime = (t) => new Intl.DateTimeFormat('en-GB', { timeZone: 'Australia/Sydney', hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(t);

    // Postponed by 30 minutes from the run's page: its question moves with it.
    await moveRunTime(page, '30m');
    await eventually('the question to move with its run', async () => (await api('GET', `/questions/${q.body.id}`)).body.game_time,
      (t) => new Date(t).getTime() === at.getTime() + 30 * 60_000);
    // Brought forward by its question: the run follows, live on its page.
    const soon = new Date(Date.now() + 2500);
    const moved = await api('PATCH', `/questions/${q.body.id}`, { game_time: soon.toISOString() });
    assert.equal(moved.status, 200, JSON.stringify(moved));
    assert.equal(new Date((await api('GET', `/workflows/${run}`)).body.run.times.kickoff_at).getTime(), soon.getTime());
    await eventually('the run page to show the new kickoff in the browser\'s zone',
      () => page.locator('dl.facts').textContent(), (t) => t.includes(localTime(soon)));

    // Locked at the new time; the final result from an operator; every player told once, in
    // pages of two, no faster than two calls a second.
    await eventually('the lock', async () => (await api('GET', `/workflows/${run}`)).body.steps[0].state, (s) => s === 'completed');
    const signal = await api('POST', `/workflows/${run}/signals`, { name: 'final', payload: { answers: { [q.body.id]: 'Kites' } } });
    assert.equal(signal.status, 201, JSON.stringify(signal));
    const bar = page.getByRole('progressbar', { name: 'Tasks of notify' });
    await eventually('the notify step\'s tasks done on the page', async () => Number(await bar.getAttribute('value')), (v) => v === 2);
    const row = page.getByRole('table', { name: 'Steps' }).getByRole('row', { name: /^notify/ });
    await eventually('the players counted on the page', () => row.textContent(), (t) => /2 of 2 tasks/.test(t) && /9 items/.test(t));
    const told = () => received.filter((r) => r.path === '/players').flatMap((r) => r.body.players);
    await eventually('every player told', async () => told().length, (n) => n >= players.length);
    assert.deepEqual(told().map((p) => p.player).sort(), players);
    for (const p of told()) {
      assert.equal(p.correct, Number(players.indexOf(p.player) % 3 === 0), JSON.stringify(p));
    }
    const calls = received.filter((r) => r.path === '/players');
    assert.ok(calls.every((c) => c.body.type === 'game.players' && c.body.players.length <= 2), JSON.stringify(calls));
    // At least five calls (two shares of nine in pages of two) at two a second: three windows.
    assert.ok(calls.length >= 5, `${calls.length} calls`);
    const spread = calls[calls.length - 1].at - calls[0].at;
    assert.ok(spread > 800, `the calls took ${spread} ms: faster than the rate`);
    const state = page.locator('dd .badge').first();
    await eventually('the run to complete on the page', () => state.textContent(), (t) => t === 'completed');
    await page.screenshot({ path: path.join(screenshots, 'game-players-told.png'), fullPage: true });
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    await api('PATCH', '/queues/webhooks', { rate: null });
    server.close();
  }
});

// A `datetime-local` value in the machine's zone (the browser runs on the same machine).
/** `date` as a `datetime-local` field holds it in time zone `zone` (the browser's). */
function localValueIn(date, zone) {
  const parts = Object.fromEntries(new Intl.DateTimeFormat('en-CA', {
    timeZone: zone, hourCycle: 'h23', year: 'numeric', month: '2-digit', day: '2-digit',
    hour: '2-digit', minute: '2-digit', second: '2-digit',
  }).formatToParts(date).map((p) => [p.type, p.value]));
  return `${parts.year}-${parts.month}-${parts.day}T${parts.hour}:${parts.minute}:${parts.second}`;
}

for (const zone of ['America/Sao_Paulo', 'Asia/Tokyo']) test(`in ${zone}, a partner that does not call us: the question form starts its game's run asking the partner's result API, whose final answer settles the game on the run's page`, async () => {
  assert.ok(port > 0, 'KICKOFF_E2E_RECEIVER_PORT is not set: run through scripts/test');
  let answer = { final: false };
  const asked = [];
  const server = http.createServer((req, res) => {
    asked.push({ method: req.method, path: req.url });
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify(answer));
  });
  await new Promise((resolve) => server.listen(port, '127.0.0.1', resolve));
  const browser = await launch({ timezoneId: zone });
  try {
    const name = `Kites vs Emus polled ${zone} ${Date.now()}`;
    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(baseUrl + '/questions/new');
    await hydrated(page);
    const form = page.getByRole('form', { name: 'New question' });
    await form.getByLabel('Game', { exact: true }).fill(name);
    await form.getByLabel('Question').fill('Who wins?');
    await form.getByLabel('Choices, one per line').fill('Kites\nEmus');
    // The game's time as the operator reads it on their clock: the browser's zone, to the second.
    const kickoff = new Date(Math.ceil((Date.now() + 8000) / 1000) * 1000);
    await form.getByLabel(/Game time/).fill(localValueIn(kickoff, zone));
    await form.getByRole('checkbox', { name: /Start its game's workflow now/ }).check();
    await form.getByLabel(/Result asked at/).fill(`http://127.0.0.1:${port}/result/kites`);
    await form.getByRole('button', { name: 'Create question' }).click();
    await page.waitForURL(/\/questions\/\d+$/);
    const id = Number(page.url().split('/').pop());
    const made = (await api('GET', `/questions/${id}`)).body;
    assert.equal(new Date(made.game_time).getTime(), kickoff.getTime(), `the form read ${zone}'s clock: ${made.game_time}`);
    // The partner's result is final before kickoff: the first poll, at the lock, brings it.
    answer = { final: true, answers: { [id]: 'Kites' } };
    assert.equal((await api('POST', `/questions/${id}/predictions`, { player: 'ana', choice: 'Kites' })).status, 201);
    const run = (await api('GET', '/workflows?limit=200')).body.runs.find((r) => r.key === `game:${name}`);
    assert.ok(run, 'the game\'s run started with its question');
    await page.goto(baseUrl + `/workflows/${run.id}`);
    await hydrated(page);
    const state = page.locator('dd .badge').first();
    await eventually('the run to complete on the page', () => state.textContent(), (t) => t === 'completed', 30000);
    const poll = page.getByRole('table', { name: 'Steps' }).getByRole('row', { name: /^poll/ });
    assert.match(await poll.textContent(), /completed/);
    const signals = page.getByRole('table', { name: 'Signals' });
    assert.match(await signals.textContent(), /polled 127\.0\.0\.1/);
    assert.equal((await api('GET', `/questions/${id}`)).body.status, 'settled');
    assert.ok(asked.length >= 1 && asked.every((a) => a.method === 'GET' && a.path === '/result/kites'), JSON.stringify(asked));
    if (zone === 'America/Sao_Paulo') {
      await page.screenshot({ path: path.join(screenshots, 'game-result-polled.png'), fullPage: true });
    }
    assert.deepEqual(errors, []);
  } finally {
    await browser.close();
    // The port is the next test's: closed with the connections the server's client keeps.
    await new Promise((resolve) => { server.close(resolve); server.closeAllConnections(); });
  }
});
