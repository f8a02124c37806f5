// Signing in and out: the dashboard sends a signed-out visitor to the login page and back to
// where they were going; what they do is in the audit log; signing out ends the session.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, untilState, baseUrl, screenshots, adminPassword } from './helpers.mjs';

let browser;
before(async () => { browser = await launch({ signedOut: true }); });
after(async () => { await browser?.close(); });

test('a signed-out visitor signs in, lands where they were going, and signs out', async () => {
  const page = await browser.newPage();
  await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 });
  await page.goto(baseUrl + '/jobs?state=scheduled');
  await page.waitForURL((url) => url.pathname === '/login' && url.searchParams.get('next') === '/jobs?state=scheduled');
  await page.screenshot({ path: path.join(screenshots, 'login.png'), fullPage: true });

  // At once, hydrated or not: a sign-in sent before the script ran goes as a plain form post, and
  // a refused one comes back with the name typed (login_before_hydration.test.mjs holds the script
  // back to make sure of that path).
  await page.getByLabel('Name').fill('admin');
  await page.getByLabel('Password').fill('not the password');
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('alert').filter({ hasText: 'wrong name or password' }).waitFor();

  await page.getByLabel('Password').fill(adminPassword);
  await page.getByRole('button', { name: 'Sign in' }).click();
  // On a time-out (seen once in a full run), say where the page was and what it said.
  await page.waitForURL((url) => url.pathname === '/jobs' && url.searchParams.get('state') === 'scheduled')
    .catch(async (e) => {
      const said = await page.locator('main').innerText({ timeout: 1000 }).catch(() => '(no main)');
      throw new Error(`${e.message}\nat ${page.url()} the page said: ${said}`);
    });
  await hydrated(page);
  await page.getByText('admin · admin').waitFor();

  // Act, then find the action in the audit log.
  const timer = await api('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 });
  const id = timer.body.job.id;
  await page.getByRole('button', { name: `Cancel job ${id}`, exact: true }).click();
  await untilState(id, 'cancelled');
  await page.goto(`${baseUrl}/audit?action=job.`);
  const entry = page.getByRole('table', { name: 'Audit log' }).getByRole('row', { name: new RegExp(`job\\.cancel.*job ${id}\\b`) });
  await entry.waitFor();
  assert.match(await entry.textContent(), /admin/);
  assert.match(await entry.textContent(), /ok/);
  await page.screenshot({ path: path.join(screenshots, 'audit.png'), fullPage: true });

  // The audit filter filters in the page once hydrated (the router's form), into the address.
  await hydrated(page);
  await page.evaluate(() => { window.samePage = true; });
  const filters = page.getByRole('search', { name: 'Filter the audit log' });
  await filters.getByLabel('Action starts with').fill('session.');
  await filters.getByRole('button', { name: 'Filter' }).click();
  await page.waitForURL((url) => url.searchParams.get('action') === 'session.');
  const log = page.getByRole('table', { name: 'Audit log' });
  await log.getByRole('row', { name: /session\.sign_in/ }).first().waitFor();
  assert.equal(await log.getByRole('row', { name: /job\.cancel/ }).count(), 0);
  assert.equal(await page.evaluate(() => window.samePage), true, 'filtering loaded a new page');

  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.waitForURL((url) => url.pathname === '/login');
  // The session is over: the dashboard sends this browser to the login page again. (The new tab
  // opens before the old one closes: Chromium may hang opening a tab while the last one closes.)
  const again = await browser.newPage();
  await page.close();
  await again.goto(baseUrl + '/');
  await again.waitForURL((url) => url.pathname === '/login');
  await again.getByRole('button', { name: 'Sign in' }).waitFor();
  await again.close();
  const res = await fetch(baseUrl + '/_console/overview', { method: 'POST' });
  assert.equal(res.status, 401);
});
