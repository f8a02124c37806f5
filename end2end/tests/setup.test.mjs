// A fresh install, as `scripts/serve` makes one on a fresh machine: a server of its own with its
// embedded PostgreSQL in an empty data directory and no admin password. It prints a one-time setup
// link; opening it in the browser creates the first admin, who lands signed in on the overview;
// then the link is dead. With JavaScript and without (a plain form post), each on a fresh install
// of its own. (scripts/test passes KICKOFF_BIN, the server it built.)
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { launch, hydrated, watchErrors, freePort, startProcess } from './helpers.mjs';

const siteRoot = path.join(import.meta.dirname, '..', '..', 'target', 'site');
const linkPattern = /http:\/\/127\.0\.0\.1:\d+\/setup\?code=[0-9a-f]{48}\b/;
const cleanups = [];
after(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup();
});

// Starts `kickoff serve` with nothing configured on an empty data directory; resolves once it
// answers, with its output so far and its setup link (if it printed one).
async function freshInstall() {
  const bin = process.env.KICKOFF_BIN;
  assert.ok(bin, 'KICKOFF_BIN must name the kickoff binary (scripts/test sets it)');
  const dataDir = mkdtempSync(path.join(tmpdir(), 'kickoff-fresh-'));
  cleanups.push(() => rmSync(dataDir, { recursive: true, force: true }));
  const port = await freePort();
  const origin = `http://127.0.0.1:${port}`;
  const env = { ...process.env, KICKOFF_DATA_DIR: dataDir, LEPTOS_SITE_ADDR: `127.0.0.1:${port}`,
    LEPTOS_SITE_ROOT: siteRoot, RUST_LOG: 'warn' };
  for (const name of ['DATABASE_URL', 'KICKOFF_ADMIN_PASSWORD', 'KICKOFF_API_TOKEN', 'KICKOFF_NODE_ID']) delete env[name];
  // The first start makes the embedded cluster (initdb): give it time. What the server prints at
  // start is on its output before it answers.
  const server = await startProcess(bin, ['serve'], env, `${origin}/readyz`, 120_000);
  cleanups.push(server.stop);
  return { origin, output: server.output, link: server.output().match(linkPattern)?.[0] };
}

test('the setup link of a fresh install creates the first admin, signed in, once', async () => {
  const install = await freshInstall();
  assert.ok(install.link, `no setup link in the server's output:\n${install.output()}`);
  assert.doesNotMatch(install.output(), /stop the server/);
  const { origin, link } = install;

  const browser = await launch({ signedOut: true });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  const errors = watchErrors(page);
  // The login page of a fresh install points to the link in the server's output.
  await page.goto(origin + '/login');
  await page.getByRole('note').filter({ hasText: 'setup link' }).waitFor();
  // Without the code there is no setup page.
  assert.equal((await page.goto(origin + '/setup')).status(), 404);
  assert.equal((await page.goto(origin + '/setup?code=' + '0'.repeat(48))).status(), 404);

  assert.equal((await page.goto(link)).status(), 200);
  const password = 'the first admin of this place';
  const fill = async (again) => {
    await page.getByLabel('Name').fill('alice');
    await page.getByLabel('Password', { exact: true }).fill(password);
    await page.getByLabel('Password again').fill(again);
  };
  // The hydrated form says what is wrong in place.
  await untilHydratedAnswer(page, () => fill('something else entirely'), 'the two passwords differ');
  await fill(password);
  await page.getByRole('button', { name: 'Create admin' }).click();

  await page.waitForURL((url) => url.origin === origin && url.pathname === '/');
  await hydrated(page);
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByText('alice · admin').waitFor();
  await page.goto(origin + '/users');
  await page.getByRole('table', { name: 'Users' }).getByRole('row', { name: /alice/ }).waitFor();
  assert.deepEqual(errors, []);

  // Spent: the link is a 404 now, in any browser, and the login page no longer points to it.
  const other = await launch({ signedOut: true });
  cleanups.push(() => other.close());
  const again = await other.newPage();
  assert.equal((await again.goto(link)).status(), 404);
  await again.goto(origin + '/login');
  await again.getByRole('button', { name: 'Sign in' }).waitFor();
  assert.equal(await again.getByRole('note').filter({ hasText: 'setup link' }).count(), 0);
});

test('the setup link works without JavaScript (a plain form post)', async () => {
  const install = await freshInstall();
  assert.ok(install.link, `no setup link in the server's output:\n${install.output()}`);
  const { origin, link } = install;
  const browser = await launch({ signedOut: true, javaScriptEnabled: false });
  cleanups.push(() => browser.close());
  const page = await browser.newPage();
  assert.equal((await page.goto(link)).status(), 200);
  const password = 'no scripts needed for this';
  await page.getByLabel('Name').fill('bob');
  await page.getByLabel('Password', { exact: true }).fill(password);
  await page.getByLabel('Password again').fill(password);
  await page.getByRole('button', { name: 'Create admin' }).click();
  await page.waitForURL((url) => url.origin === origin && url.pathname === '/');
  await page.getByRole('heading', { name: 'Overview' }).waitFor();
  await page.getByText('bob · admin').waitFor();
  assert.equal((await page.goto(link)).status(), 404);
});

// Fills and submits the form until the hydrated page shows `alert`. The setup page has no live
// part that tells when it is hydrated: a click before that is a plain form post, which comes back
// to the page (without the message), and is then tried again.
async function untilHydratedAnswer(page, fill, alert) {
  for (let attempt = 0; attempt < 10; attempt++) {
    await fill();
    const reloaded = page.waitForNavigation({ waitUntil: 'load' }).then(() => false, () => false);
    const shown = page.getByRole('alert').filter({ hasText: alert }).waitFor().then(() => true, () => false);
    await page.getByRole('button', { name: 'Create admin' }).click();
    if (await Promise.race([shown, reloaded])) return;
    await page.waitForLoadState('networkidle');
  }
  throw new Error(`the page never showed "${alert}"`);
}
