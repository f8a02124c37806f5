// The example game server (examples/game_server: Kickoff embedded in a Rust application, its
// dashboard mounted under /kickoff) in Chromium: a game saved through the application's own route
// with its kick-off job and its question; the mounted dashboard signs in under /kickoff, hydrates,
// lists the application's kind among the kinds a new job may have and shows its job, which runs at
// the game's time; behind an authenticating proxy's sign-in (the application's own, a header), its
// staff use the dashboard without Kickoff's accounts. (scripts/test builds the example beside KICKOFF_BIN and passes
// KICKOFF_TEST_DATABASE_URL, its cluster.)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { launch, hydrated, watchErrors, eventually, freePort, newDatabase, startProcess, watchFailures } from './helpers.mjs';

const siteRoot = path.join(import.meta.dirname, '..', '..', 'target', 'site');
const cleanups = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

async function gameServer(extraEnv = {}) {
  const kickoff = process.env.KICKOFF_BIN;
  assert.ok(kickoff, 'KICKOFF_BIN must name the kickoff binary (scripts/test sets it)');
  const bin = path.join(path.dirname(kickoff), 'examples', 'game_server');
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const password = `game-admin-${Date.now()}`;
  const env = { ...process.env, DATABASE_URL: newDatabase('game_server'),
    GAME_SERVER_ADDR: `127.0.0.1:${port}`, LEPTOS_SITE_ROOT: siteRoot, KICKOFF_ADMIN_PASSWORD: password,
    RUST_LOG: 'warn', ...extraEnv };
  const server = await startProcess(bin, [], env, `${origin}/kickoff/readyz`);
  cleanups.push(server.stop);
  return { origin, password, output: server.output };
}

test("the game server's mounted dashboard hydrates and shows the application's kind and job", async () => {
  const { origin, password } = await gameServer();
  const starts = new Date(Date.now() + 4000).toISOString();
  const res = await fetch(`${origin}/games`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'Bears vs Wolves', starts_at: starts,
      question: { prompt: 'First goal?', choices: ['Bears', 'Wolves'] } }),
  });
  const game = await res.json();
  assert.equal(res.status, 201, JSON.stringify(game));
  // The application's own page is its own.
  assert.match(await (await fetch(origin)).text(), /A game server with Kickoff inside/);

  const browser = await launch({ signedOut: true });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  const errors = watchErrors(page);
  const failed = watchFailures(page, origin);
  await page.goto(`${origin}/kickoff/jobs/new`);
  await page.waitForURL((url) => url.pathname === '/kickoff/login');
  await page.getByLabel('Name').fill('admin');
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((url) => url.pathname === '/kickoff/jobs/new');
  await hydrated(page);
  const kinds = await page.getByRole('form', { name: 'New job' }).getByLabel('Kind').locator('option').allTextContents();
  assert.ok(kinds.includes('game.kick_off'), `the kinds offered: ${kinds}`);

  // The game's kick-off job, on its page under /kickoff, runs at the game's time.
  await page.goto(`${origin}/kickoff/jobs/${game.kick_off_job}`);
  await page.getByRole('heading', { name: `Job ${game.kick_off_job}` }).waitFor();
  assert.match(await page.locator('main').textContent(), /game\.kick_off/);
  await eventually('the game to start', async () => (await (await fetch(`${origin}/games/${game.id}`)).json()).started_at,
    (at) => at !== null, 20_000);
  await page.reload();
  await hydrated(page);
  await page.getByRole('list', { name: 'Attempts' }).getByText('completed').waitFor();
  assert.deepEqual(errors, []);
  assert.deepEqual(failed, []);
});

test("behind a proxy's sign-in, the game's staff use the mounted dashboard without Kickoff's", async () => {
  const token = `game-token-${Date.now()}`;
  const { origin } = await gameServer({
    GAME_SERVER_USER_HEADER: 'x-forwarded-user', GAME_SERVER_ADMINS: 'alice',
    KICKOFF_SECRET_KEY: randomBytes(32).toString('base64'), KICKOFF_API_TOKEN: token,
  });
  const res = await fetch(`${origin}/games`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name: 'Lions vs Tigers', starts_at: new Date(Date.now() + 600_000).toISOString() }),
  });
  const game = await res.json();
  assert.equal(res.status, 201, JSON.stringify(game));
  // Nobody named by the proxy: no page.
  assert.equal((await fetch(`${origin}/kickoff/jobs`)).status, 401);

  // Every request of this browser carries the name, as the proxy would set it.
  const browser = await launch({ signedOut: true, extraHTTPHeaders: { 'x-forwarded-user': 'alice' } });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  const errors = watchErrors(page);
  const failed = watchFailures(page, origin);
  await page.goto(`${origin}/kickoff/jobs/${game.kick_off_job}`);
  await hydrated(page);
  await page.getByRole('link', { name: 'Your account' }).filter({ hasText: 'alice · admin' }).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Sign out' }).count(), 0);
  // An action: the caller's own form token, from the dashboard's own origin.
  await page.getByRole('button', { name: `Cancel job ${game.kick_off_job}`, exact: true }).click();
  await eventually('the kick-off job to be cancelled', async () => {
    const r = await fetch(`${origin}/kickoff/api/v1/jobs/${game.kick_off_job}`, { headers: { authorization: `Bearer ${token}` } });
    return (await r.json()).state;
  }, (s) => s === 'cancelled');
  // The admin's pages: the caller is an account here, in the role the proxy's side said.
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Users' }).click();
  await page.getByRole('rowheader', { name: 'alice (you)' }).waitFor();
  assert.deepEqual(errors, []);
  assert.deepEqual(failed, []);
});
