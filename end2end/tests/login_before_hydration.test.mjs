// A sign-in sent before the login page's script has run goes as a plain form post (the form works
// without JavaScript). When it is refused, the page comes back with the reason and with the name
// the operator typed, so the second try needs only the password, and goes on to where they were
// going. The page's WebAssembly is held back here so that the plain post is certain (in CI it
// happened by chance, and the second try, with an empty name, went nowhere).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { launch, baseUrl, adminPassword } from './helpers.mjs';

let browser;
before(async () => { browser = await launch({ signedOut: true }); });
after(async () => { await browser?.close(); });

test('a sign-in refused before the page hydrates keeps the name typed', async () => {
  const page = await browser.newPage();
  let release;
  const held = new Promise((resolve) => { release = resolve; });
  await page.route('**/pkg/*.wasm', async (route) => { await held; await route.continue(); });
  try {
    // Not waiting for `load`: the held WebAssembly is preloaded, and would hold it too.
    await page.goto(`${baseUrl}/login?next=%2Fqueues`, { waitUntil: 'domcontentloaded' });
    await page.getByLabel('Name').fill('admin');
    await page.getByLabel('Password').fill('not the password');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('alert').filter({ hasText: 'wrong name or password' }).waitFor();
    assert.equal(new URL(page.url()).searchParams.get('next'), '/queues');
    assert.equal(await page.getByLabel('Name').inputValue(), 'admin', 'the name typed is kept');
    assert.equal(await page.getByLabel('Password').inputValue(), '', 'never the password');
    assert.equal(new URL(page.url()).search.includes('password'), false);

    // Still without its script: the password alone signs in, and on to the page asked for.
    await page.getByLabel('Password').fill(adminPassword);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.waitForURL((url) => url.pathname === '/queues', { waitUntil: 'commit' });
  } finally {
    release();
  }
  await page.getByText('admin · admin').waitFor();
  await page.close();
});
