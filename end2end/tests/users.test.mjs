// Accounts in the dashboard: an admin adds a user, the user signs in with their role; a token
// is shown once, works against the REST API, and stops at once when revoked; a disabled user is
// signed out at their next click. Every page runs under the nonce-only script policy.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, signIn, hydrated, baseUrl, screenshots, watchErrors, watchPolicy, adminPassword } from './helpers.mjs';

let admin;
before(async () => { admin = await launch(); });
after(async () => { await admin?.close(); });

const stamp = Date.now().toString(36);

test('every page hydrates under the script policy with nothing blocked', async () => {
  const page = await admin.newPage();
  const blocked = watchPolicy(page);
  const errors = watchErrors(page);
  for (const route of ['/', '/jobs', '/timers', '/failures', '/queues', '/questions', '/workflows', '/audit', '/users', '/webhooks', '/calls', '/alerts', '/account', '/jobs/new']) {
    await page.goto(baseUrl + route);
    await hydrated(page);
  }
  assert.deepEqual(blocked, []);
  assert.deepEqual(errors, []);
  await page.close();
});

test('an admin adds an operator, who signs in and acts; disabled, they are signed out', async () => {
  const name = `op-${stamp}`;
  const password = `pw-${stamp}-long-enough`;
  const page = await admin.newPage();
  await page.goto(baseUrl + '/users');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'Add a user' });
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Role').selectOption('operator');
  await form.getByLabel(/^Password/).fill(password);
  await form.getByRole('button', { name: 'Add user' }).click();
  const row = page.getByRole('row', { name: new RegExp(name) });
  await row.waitFor();
  assert.equal(await row.getByLabel(`Role of ${name}`).inputValue(), 'operator');

  // The new operator signs in in a browser of their own; no Users link for them.
  const theirs = await launch({ signedOut: true });
  try {
    await signIn(theirs, name, password);
    const their = await theirs.newPage();
    await their.goto(baseUrl + '/jobs');
    await hydrated(their);
    await their.getByText(`${name} · operator`).waitFor();
    assert.equal(await their.getByRole('link', { name: 'Users' }).count(), 0);

    // Disabled by the admin: their next page load goes to the login page.
    await row.getByRole('button', { name: `Disable ${name}` }).click();
    await row.getByText('disabled').waitFor();
    await page.screenshot({ path: path.join(screenshots, 'users.png'), fullPage: true });
    await their.goto(baseUrl + '/timers');
    await their.waitForURL((url) => url.pathname === '/login');
  } finally {
    await theirs.close();
  }
  await page.close();
});

test('a token is shown once, works, and stops at once when revoked', async () => {
  const page = await admin.newPage();
  await page.goto(baseUrl + '/account');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New API token' });
  await form.getByLabel('Token name').fill(`ci ${stamp}`);
  await form.getByLabel('Scope').selectOption('write');
  await form.getByLabel('Your password (to confirm)').fill(adminPassword);
  await form.getByRole('button', { name: 'Make token' }).click();
  const shown = page.locator('[data-new-token] ');
  await shown.waitFor();
  const token = (await shown.textContent()).trim();
  assert.match(token, /^ko_[0-9a-f]{64}$/);
  await page.screenshot({ path: path.join(screenshots, 'account.png'), fullPage: true });

  const call = (method, route, body) => fetch(`${baseUrl}/api/v1${route}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  assert.equal((await call('POST', '/jobs', { kind: 'noop', schedule_in_ms: 600_000 })).status, 201);

  await page.getByRole('button', { name: `Revoke token ci ${stamp}` }).click();
  await page.getByRole('row', { name: new RegExp(`ci ${stamp}`) }).getByText('revoked').waitFor();
  assert.equal((await call('GET', '/jobs')).status, 401);

  // Shown once: a fresh load of the page lists the token without its text.
  await page.reload();
  await hydrated(page);
  assert.equal(await page.getByText(token).count(), 0);
  await page.close();
});
