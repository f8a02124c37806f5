// Kickoff served under a path (`KICKOFF_BASE_PATH=/kickoff`), as behind a proxy that forwards a
// path of its site, or mounted in an application's router: in Chromium, the sign-in sends the
// browser back to the page it asked for, the page hydrates (its live stream under the path), the
// navigation, a filter and an action stay under the path, nothing the page asks for fails,
// signing out lands on the login page under the path, and a browser in another time zone sees a
// job's time in its zone. A server of its own (scripts/test passes
// KICKOFF_BIN, the server it built, and KICKOFF_TEST_DATABASE_URL, its cluster).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { launch, hydrated, watchErrors, eventually, freePort, newDatabase, startProcess, watchFailures } from './helpers.mjs';

const siteRoot = path.join(import.meta.dirname, '..', '..', 'target', 'site');
const cleanups = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

// `kickoff serve` under /kickoff, on a database of its own in the tests' cluster.
async function serverUnderPath() {
  const bin = process.env.KICKOFF_BIN;
  assert.ok(bin, 'KICKOFF_BIN must name the kickoff binary (scripts/test sets it)');
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kickoff-base-path-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const token = `base-path-${Date.now()}`;
  const password = `base-path-admin-${Date.now()}`;
  const env = { ...process.env, DATABASE_URL: newDatabase('base_path'),
    KICKOFF_BASE_PATH: '/kickoff', KICKOFF_DATA_DIR: dataDir, LEPTOS_SITE_ADDR: `127.0.0.1:${port}`,
    LEPTOS_SITE_ROOT: siteRoot, KICKOFF_ADMIN_PASSWORD: password, KICKOFF_API_TOKEN: token,
    KICKOFF_QUEUES: 'default:2', RUST_LOG: 'warn' };
  delete env.KICKOFF_NODE_ID;
  const server = await startProcess(bin, ['serve'], env, `${origin}/kickoff/readyz`);
  cleanups.push(server.stop);
  const api = async (method, route, body) => {
    const res = await fetch(`${origin}/kickoff/api/v1${route}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: res.status, body: await res.json() };
  };
  return { origin, password, api, output: server.output };
}

test('the dashboard under a path signs in, hydrates, navigates, filters and acts under it, in two time zones', async () => {
  const server = await serverUnderPath();
  const { origin, api } = server;
  assert.match(server.output(), new RegExp(`listening on ${origin}/kickoff`));
  const made = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000, args: { game: 'Bears' } });
  assert.equal(made.status, 201, JSON.stringify(made.body));
  const id = made.body.job.id;

  const browser = await launch({ signedOut: true });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  const errors = watchErrors(page);
  // Everything the page asks for answers (its script, its module, its stylesheet, its stream).
  const failed = watchFailures(page, origin);

  await page.goto(`${origin}/kickoff/timers`);
  await page.waitForURL((url) => url.pathname === '/kickoff/login' && url.searchParams.get('next') === '/timers');
  await page.getByLabel('Name').fill('admin');
  await page.getByLabel('Password').fill(server.password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((url) => url.pathname === '/kickoff/timers');
  await hydrated(page);
  await page.locator(`tr[data-job="${id}"]`).waitFor();

  // The router's links, under the path, without loading a page.
  await page.evaluate(() => { window.__samePage = true; });
  await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Jobs', exact: true }).click();
  await page.waitForURL((url) => url.pathname === '/kickoff/jobs');
  await page.getByRole('link', { name: String(id), exact: true }).waitFor();
  // A filter: the query under the path.
  const filters = page.getByRole('search', { name: 'Filter jobs' });
  await filters.getByLabel('Kind').fill('noop');
  await filters.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL((url) => url.pathname === '/kickoff/jobs' && url.searchParams.get('kind') === 'noop');
  await page.getByRole('link', { name: String(id), exact: true }).click();
  await page.waitForURL((url) => url.pathname === `/kickoff/jobs/${id}`);
  assert.equal(await page.evaluate(() => window.__samePage), true, 'a link loaded a new page');
  // An action: the server function under the path.
  await page.getByRole('button', { name: `Cancel job ${id}`, exact: true }).click();
  await eventually(`job ${id} to be cancelled`, async () => (await api('GET', `/jobs/${id}`)).body.state,
    (s) => s === 'cancelled');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL((url) => url.pathname === '/kickoff/login');
  assert.deepEqual(errors, []);
  assert.deepEqual(failed, []);

  // In another time zone (India's, half an hour off the hour): a job due at 19:00 there next
  // July is shown at 19:00, hydrated, the zone named, under the path.
  const year = new Date().getUTCFullYear() + 1;
  const july = await api('POST', '/jobs', { kind: 'noop', scheduled_at: `${year}-07-10T13:30:00Z`, args: { game: 'Tigers' } });
  assert.equal(july.status, 201, JSON.stringify(july.body));
  const inIndia = await launch({ signedOut: true, timezoneId: 'Asia/Kolkata' });
  cleanups.push(() => inIndia.close());
  const there = await inIndia.newPage();
  const errorsThere = watchErrors(there);
  const failedThere = watchFailures(there, origin);
  await there.goto(`${origin}/kickoff/jobs/${july.body.job.id}`);
  await there.waitForURL((url) => url.pathname === '/kickoff/login');
  await there.getByLabel('Name').fill('admin');
  await there.getByLabel('Password').fill(server.password);
  await there.getByRole('button', { name: 'Sign in' }).click();
  await there.waitForURL((url) => url.pathname === `/kickoff/jobs/${july.body.job.id}`);
  await hydrated(there);
  const zone = await there.evaluate(() => Intl.DateTimeFormat().resolvedOptions().timeZone);
  assert.match(zone, /^Asia\/(Kolkata|Calcutta)$/);
  await there.locator('.zone-note', { hasText: `Times in ${zone}` }).waitFor();
  await there.locator('time .abs', { hasText: `${year}-07-10 19:00:00` }).first().waitFor();
  assert.deepEqual(errorsThere, []);
  assert.deepEqual(failedThere, []);
});
