// After signing in, the login page sends the browser on to its `next`, but only to a page of this
// site: browsers drop tabs and newlines from URLs, so `/%09/evil.example` would be
// `//evil.example`, another site. With and without JavaScript (a plain form post).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { launch, baseUrl, adminPassword } from './helpers.mjs';

let withScripts;
let withoutScripts;
before(async () => {
  withScripts = await launch({ signedOut: true });
  withoutScripts = await launch({ signedOut: true, javaScriptEnabled: false });
});
after(async () => {
  await withScripts?.close();
  await withoutScripts?.close();
});

const cases = [
  ['/%09/evil.example', '/'],
  ['/%0a/evil.example', '/'],
  ['/%5Cevil.example', '/'],
  // A page of this site is where the browser goes.
  ['/jobs%3Fstate%3Dscheduled', '/jobs?state=scheduled'],
];

for (const [how, browser] of [['with JavaScript', () => withScripts], ['without JavaScript', () => withoutScripts]]) {
  test(`signing in goes on to next only within this site (${how})`, async () => {
    for (const [next, expected] of cases) {
      const page = await browser().newPage();
      await page.goto(`${baseUrl}/login?next=${next}`);
      await page.getByLabel('Name').fill('admin');
      await page.getByLabel('Password').fill(adminPassword);
      await page.getByRole('button', { name: 'Sign in' }).click();
      await page.waitForURL((url) => url.pathname !== '/login', { waitUntil: 'commit' });
      assert.equal(page.url(), `${baseUrl}${expected}`, next);
      await page.getByText('admin · admin').waitFor();
      await page.goto('about:blank');
    }
  });
}
