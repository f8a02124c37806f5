// Shared by the end-to-end tests: Debian's Chromium through playwright-core, the server under test
// (started by scripts/test, which passes KICKOFF_E2E_URL and KICKOFF_E2E_TOKEN), and web-first waits.
import { chromium } from 'playwright-core';
import { spawn, spawnSync } from 'node:child_process';
import { createServer } from 'node:net';
import { mkdtempSync, mkdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';

export const baseUrl = process.env.KICKOFF_E2E_URL ?? 'http://127.0.0.1:3000';
const token = process.env.KICKOFF_E2E_TOKEN ?? '';
export const screenshots = path.join(import.meta.dirname, '..', 'screenshots');
mkdirSync(screenshots, { recursive: true });

export const adminPassword = process.env.KICKOFF_E2E_ADMIN_PASSWORD ?? '';

// A browser profile of its own, signed in as the admin unless `signedOut` is set.
export async function launch({ signedOut = false, ...options } = {}) {
  const browser = new Browser(signedOut, options);
  await browser.start();
  return browser;
}

// Waits for `promise` at most `ms`; then rejects, saying `what`.
function within(ms, what, promise) {
  let timer;
  const late = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no answer within ${ms / 1000} s`)), ms);
  });
  return Promise.race([promise, late]).finally(() => clearTimeout(timer));
}

// A Chromium profile, as the tests use it (`newPage`, `request`, `close`), that does not let
// Chromium itself hang a test file: opening a tab and closing a tab or the browser have no
// time-out of their own in Playwright, and Chromium was seen (in CI, and in a fifth full run of
// this session's) to never answer one, the whole file timing out after 3 minutes with no word.
// A tab that does not open within 20 s gets a fresh browser (signed in again as it was); a close
// that does not end within 10 s is left behind (the browser's is killed).
class Browser {
  constructor(signedOut, options) {
    this.signedOut = signedOut;
    this.options = options;
  }

  async start() {
    const { context, userDataDir } = await launchProfile(this.options);
    this.context = context;
    this.userDataDir = userDataDir;
    // On the profile itself: a tab that does not open here fails the start, it does not loop.
    if (!this.signedOut) await within(60_000, 'signing in', signIn(this.context));
  }

  get request() {
    return this.context.request;
  }

  async newPage() {
    for (let attempt = 1; ; attempt++) {
      try {
        const page = await within(20_000, 'Chromium opening a tab', this.context.newPage());
        const close = page.close.bind(page);
        page.close = (...args) => within(10_000, 'Chromium closing a tab', close(...args))
          .catch((e) => console.error(`${e.message}: left open`));
        return page;
      } catch (e) {
        if (attempt >= 2) throw e;
        console.error(`${e.message}: starting a fresh browser`);
        await this.close();
        await this.start();
      }
    }
  }

  async close() {
    await within(10_000, 'Chromium closing', this.context.close()).catch((e) => {
      console.error(`${e.message}: killing it`);
      spawnSync('pkill', ['-KILL', '-f', this.userDataDir]);
    });
    removeProfile(this.userDataDir);
  }
}

// A profile is a few megabytes of files in the temporary directory: each is removed when its
// browser is done (185 were found left behind by a day of full runs).
// Best effort: a Chromium killed a moment ago may still be writing into it (ENOTEMPTY), and a
// profile left behind must not fail the test that is closing its browser.
function removeProfile(userDataDir) {
  try {
    rmSync(userDataDir, { recursive: true, force: true, maxRetries: 3 });
  } catch (e) {
    console.error(`could not remove the browser profile ${userDataDir}: ${e.message}`);
  }
}

// Signs in through the login form (it works with and without JavaScript).
export async function signIn(context, name = 'admin', password = adminPassword) {
  const page = await context.newPage();
  await page.goto(baseUrl + '/login');
  await page.getByLabel('Name').fill(name);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.waitForURL((url) => url.pathname === '/');
  // Left open (on a blank page when the dashboard's own navigation does not get there first):
  // closing a tab and opening the next one at once can hang a persistent Chromium context (seen in
  // CI), and the context closes every tab at the end anyway.
  await page.goto('about:blank').catch(() => {});
}

async function launchProfile(options) {
  // A browser that does not come up within a minute is an infrastructure failure, not the
  // product's (a start that never ended was seen once in CI, the whole file timing out with no
  // word): say so, and try a fresh profile once more.
  for (let attempt = 1; ; attempt++) {
    // A new profile each time; the flags keep Chromium off the network this machine does not have.
    const userDataDir = mkdtempSync(path.join(tmpdir(), 'kickoff-chromium-'));
    try {
      const context = await chromium.launchPersistentContext(userDataDir, {
        timeout: 60_000,
        ...options,
        executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
        headless: true,
        args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
          '--disable-background-networking', '--disable-component-update', '--disable-sync'],
      });
      return { context, userDataDir };
    } catch (e) {
      spawnSync('pkill', ['-KILL', '-f', userDataDir]);
      removeProfile(userDataDir);
      if (attempt >= 2) throw e;
      console.error(`Chromium did not start (${e.message.split('\n')[0]}): trying a fresh profile`);
    }
  }
}

// Calls the REST API as another process would.
export async function api(method, route, body) {
  const res = await fetch(`${baseUrl}/api/v1${route}`, {
    method,
    headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : null };
}

// Waits until `read()` returns something `ok` accepts (a web-first assertion), or fails with the
// last value seen.
export async function eventually(what, read, ok, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs;
  let last;
  while (Date.now() < deadline) {
    last = await read();
    if (ok(last)) return last;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}; last value: ${JSON.stringify(last)}`);
}

// Waits until the page has hydrated (the live badge only turns on in the browser).
export async function hydrated(page) {
  await page.getByRole('status').filter({ hasText: 'Live' }).waitFor({ timeout: 30000 });
}

// The state of a job, read through the API.
export async function stateOf(id) {
  return (await api('GET', `/jobs/${id}`)).body.state;
}

// Waits until the job reaches `state`.
export async function untilState(id, state, timeoutMs) {
  return eventually(`job ${id} to be ${state}`, () => stateOf(id), (s) => s === state, timeoutMs);
}

// Fails the test on any script error in the page.
export function watchErrors(page) {
  const errors = [];
  page.on('pageerror', (e) => errors.push(e.message));
  return errors;
}

// Collects what the page's Content-Security-Policy blocked (Chromium reports it on the console).
export function watchPolicy(page) {
  const blocked = [];
  page.on('console', (m) => {
    if (/Content Security Policy/i.test(m.text())) blocked.push(m.text());
  });
  return blocked;
}

// A partner's signed call sending a workflow signal (`body`: key, name, payload), signed as
// Standard Webhooks says (HMAC-SHA256 of `id.timestamp.body` with the endpoint's secret, base64)
// with Node's own crypto: no Kickoff code signs it.
export async function partnerSignal(endpoint, secret, body) {
  const { createHmac } = await import('node:crypto');
  const text = JSON.stringify(body);
  const id = `msg_${Date.now()}_${Math.random()}`;
  const at = Math.floor(Date.now() / 1000).toString();
  const key = Buffer.from(secret.replace(/^whsec_/, ''), 'base64');
  const signature = 'v1,' + createHmac('sha256', key).update(`${id}.${at}.${text}`).digest('base64');
  const res = await fetch(`${baseUrl}/api/v1/inbound/${endpoint}/signals`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'webhook-id': id, 'webhook-timestamp': at, 'webhook-signature': signature },
    body: text,
  });
  return { status: res.status, body: await res.json() };
}

// Moves the workflow run's (shown on `page`) first time by `by` (`30m`, `-3m`) with its form.
export async function moveRunTime(page, by) {
  const form = page.getByRole('form', { name: 'Move a time' });
  await form.getByLabel('By how much').fill(by);
  await form.getByRole('button', { name: 'Move' }).click();
}

// A port free on the loopback now (for a server a test starts of its own).
export function freePort() {
  return new Promise((resolve, reject) => {
    const probe = createServer();
    probe.once('error', reject);
    probe.listen(0, '127.0.0.1', () => {
      const { port } = probe.address();
      probe.close(() => resolve(port));
    });
  });
}

// Starts `bin` with `args` and `env` (a server of a test's own), its output kept; resolves once
// `readyUrl` answers (within `timeoutMs`), with the output so far and `stop()`, which ends it
// (SIGTERM, then SIGKILL after 30 s). A process that exits first fails the wait with its output.
export async function startProcess(bin, args, env, readyUrl, timeoutMs = 60_000) {
  const child = spawn(bin, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  child.stdout.setEncoding('utf8').on('data', (s) => { output += s; });
  child.stderr.setEncoding('utf8').on('data', (s) => { output += s; });
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(timer);
    }
  };
  try {
    await eventually(`${path.basename(bin)} to answer at ${readyUrl}`, async () => {
      if (child.exitCode !== null) throw new Error(`${bin} exited (${child.exitCode}):\n${output}`);
      return fetch(readyUrl).then((r) => r.ok, () => false);
    }, (ok) => ok, timeoutMs);
  } catch (e) {
    await stop();
    throw e;
  }
  return { output: () => output, stop };
}

// A database of its own in the tests' cluster (KICKOFF_TEST_DATABASE_URL, which scripts/test
// sets): its URL.
export function newDatabase(prefix) {
  const cluster = process.env.KICKOFF_TEST_DATABASE_URL;
  if (!cluster) throw new Error('KICKOFF_TEST_DATABASE_URL must be set (scripts/test sets it)');
  const name = `${prefix}_${Date.now()}`;
  const made = spawnSync('psql', [cluster, '-qc', `CREATE DATABASE ${name}`], { encoding: 'utf8' });
  if (made.status !== 0) throw new Error(`CREATE DATABASE ${name}: ${made.stderr}`);
  return `${cluster.slice(0, cluster.lastIndexOf('/'))}/${name}`;
}

// Collects the answers of `origin` a page got that failed (4xx, 5xx): its scripts, its module,
// its stylesheet, its stream, its calls.
export function watchFailures(page, origin) {
  const failed = [];
  page.on('response', (r) => { if (r.url().startsWith(origin) && r.status() >= 400) failed.push(`${r.status()} ${r.url()}`); });
  return failed;
}
