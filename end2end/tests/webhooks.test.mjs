// Webhook endpoints in the dashboard (admins): an endpoint is made, allowing calls and with a
// default header, and its secret shown once; reloaded, the page lists it (the header by name)
// without the secret or the header's value; webhook jobs under it are allowed until a change says
// otherwise; a rotation shows a new secret and says until when the old one signs; deleted, calls
// go unsigned.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, watchErrors, eventually } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('an admin makes an endpoint, sees its secret once, rotates it and deletes it', async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  const prefix = `https://partner-${Date.now().toString(36)}.example/hooks/`;
  await page.goto(baseUrl + '/webhooks');
  await hydrated(page);
  const form = page.getByRole('form', { name: 'New webhook endpoint' });
  const credential = `Bearer e2e-cred-${Date.now().toString(36)}`;
  const hook = { kind: 'webhook', args: { url: `${prefix}goal` }, schedule_in_ms: 3600000 };
  // Nothing allows the partner yet.
  assert.equal((await api('POST', '/jobs', hook)).status, 422);
  await form.getByLabel('URL prefix').fill(prefix);
  await form.getByLabel('Webhook jobs may call URLs under this prefix').check();
  await form.getByLabel('Default headers').fill(`Authorization: ${credential}\nX-Team: blue`);
  await form.getByRole('button', { name: 'Make endpoint' }).click();
  const first = await page.locator('[data-new-secret]').textContent({ timeout: 15000 });
  assert.match(first, /^whsec_[A-Za-z0-9+/]{43}=$/);
  const row = page.locator('tr[data-endpoint]', { hasText: prefix });
  await row.waitFor();
  assert.equal((await row.locator('[data-calls]').textContent()).trim(), 'allowed');
  assert.match(await row.locator('[data-header-names]').textContent(), /Authorization, X-Team with POST/);
  // The form is empty again: the header's value does not stay on the screen.
  assert.equal(await form.getByLabel('Default headers').inputValue(), '');
  await page.screenshot({ path: path.join(screenshots, 'webhooks.png'), fullPage: true });
  const allowed = await api('POST', '/jobs', hook);
  assert.equal(allowed.status, 201, JSON.stringify(allowed.body));
  await api('POST', `/jobs/${allowed.body.job.id}/cancel`);

  // Shown once: not in the API's list, not on the page once reloaded.
  const listed = await api('GET', '/webhook-endpoints');
  assert.ok(listed.body.some((e) => e.url_prefix === prefix));
  assert.ok(!JSON.stringify(listed.body).includes(first.slice(6)));
  await page.reload();
  await hydrated(page);
  await row.waitFor();
  assert.equal(await page.locator('[data-new-secret]').count(), 0);
  assert.ok(!(await page.content()).includes(first.slice(6)));
  assert.ok(!(await page.content()).includes(credential));
  assert.ok(!JSON.stringify(listed.body).includes(credential));

  // Changed to sign only (the box unticked, the headers kept): jobs under it are refused again.
  await row.getByText('Change', { exact: true }).click();
  const change = row.getByRole('form', { name: /Change endpoint/ });
  await change.getByLabel('Webhook jobs may call URLs under this prefix').uncheck();
  // The headers go with PUT too (they are credentials: POST only unless an admin says more).
  await change.getByLabel('Methods the headers go with').fill('post, PUT');
  await change.getByRole('button', { name: /Save endpoint/ }).click();
  await eventually('the row to say signed only',
    async () => (await row.locator('[data-calls]').textContent()).trim(), (t) => t === 'signed only');
  assert.match(await row.locator('[data-header-names]').textContent(), /Authorization, X-Team with POST, PUT/);
  const refused = await api('POST', '/jobs', hook);
  assert.equal(refused.status, 422, JSON.stringify(refused.body));
  assert.match(refused.body.error.message, /no webhook endpoint allows calls under this URL/);

  // Rotated with a two-hour overlap: a new secret, and the row says the old one still signs.
  await row.getByLabel(/Hours the old secret/).fill('2');
  await row.getByRole('button', { name: /Rotate the secret/ }).click();
  await page.getByText('the old one signs too until', { exact: false }).waitFor();
  const second = await page.locator('[data-new-secret]').textContent();
  assert.match(second, /^whsec_/);
  assert.notEqual(second, first);

  await row.getByRole('button', { name: /Delete endpoint/ }).click();
  await row.waitFor({ state: 'detached' });
  assert.ok(!(await api('GET', '/webhook-endpoints')).body.some((e) => e.url_prefix === prefix));
  assert.deepEqual(errors, []);
  await page.close();
});
