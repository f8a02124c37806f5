// Webhook endpoints in the dashboard (admins): an endpoint is made and its secret shown once;
// reloaded, the page lists it without the secret; a rotation shows a new secret and says until
// when the old one signs; deleted, calls go unsigned.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, watchErrors } from './helpers.mjs';

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
  await form.getByLabel('URL prefix').fill(prefix);
  await form.getByRole('button', { name: 'Make endpoint' }).click();
  const first = await page.locator('[data-new-secret]').textContent({ timeout: 15000 });
  assert.match(first, /^whsec_[A-Za-z0-9+/]{43}=$/);
  const row = page.locator('tr[data-endpoint]', { hasText: prefix });
  await row.waitFor();
  await page.screenshot({ path: path.join(screenshots, 'webhooks.png'), fullPage: true });

  // Shown once: not in the API's list, not on the page once reloaded.
  const listed = await api('GET', '/webhook-endpoints');
  assert.ok(listed.body.some((e) => e.url_prefix === prefix));
  assert.ok(!JSON.stringify(listed.body).includes(first.slice(6)));
  await page.reload();
  await hydrated(page);
  await row.waitFor();
  assert.equal(await page.locator('[data-new-secret]').count(), 0);
  assert.ok(!(await page.content()).includes(first.slice(6)));

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
