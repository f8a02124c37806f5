// Alerts, end to end: an admin makes a webhook endpoint for a partner (its secret shown once) and
// an alert rule on discarded webhook calls that notifies that partner; a webhook job whose
// receiver answers 500 is discarded, and the alert appears on the open /alerts page by itself
// (live, no reload), the partner gets a signed `alert.fired`, the calls page finds the 500, and
// the job's page shows the call. The receiver is this test's own server on the port scripts/test
// allowed (KICKOFF_E2E_RECEIVER_PORT).
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { launch, api, hydrated, baseUrl, screenshots, watchErrors, eventually, untilState } from './helpers.mjs';

const port = Number(process.env.KICKOFF_E2E_RECEIVER_PORT ?? 0);
const partner = `http://127.0.0.1:${port}`;
const received = [];
let receiver;
let browser;
before(async () => {
  receiver = http.createServer((req, res) => {
    let body = '';
    req.on('data', (c) => { body += c; });
    req.on('end', () => {
      received.push({ path: req.url, headers: req.headers, body });
      if (req.url === '/fail') {
        res.writeHead(500, { 'content-type': 'text/plain' });
        res.end('the partner is down');
      } else {
        res.end('ok');
      }
    });
  });
  await new Promise((resolve) => receiver.listen(port, '127.0.0.1', resolve));
  browser = await launch();
});
after(async () => {
  await browser?.close();
  receiver?.close();
});

test('a failing webhook makes an alert appear live, notified to a signed endpoint', async () => {
  assert.ok(port > 0, 'KICKOFF_E2E_RECEIVER_PORT is not set: run through scripts/test');
  const page = await browser.newPage();
  const errors = watchErrors(page);

  // The partner's endpoint: its secret is shown once.
  await page.goto(baseUrl + '/webhooks');
  await hydrated(page);
  const endpoint = page.getByRole('form', { name: 'New webhook endpoint' });
  await endpoint.getByLabel('URL prefix').fill(`${partner}/`);
  await endpoint.getByRole('button', { name: 'Make endpoint' }).click();
  assert.match(await page.locator('[data-new-secret]').textContent({ timeout: 15000 }), /^whsec_/);

  // The rule, made on the alerts page.
  await page.goto(baseUrl + '/alerts');
  await hydrated(page);
  const name = `discarded calls ${Date.now().toString(36)}`;
  const form = page.getByRole('form', { name: 'New alert rule' });
  await form.getByLabel('Name').fill(name);
  await form.getByLabel('Fires when').selectOption('job_discarded');
  await form.getByLabel('Queue', { exact: true }).fill('e2e');
  await form.getByLabel('Kind', { exact: true }).fill('webhook');
  await form.getByLabel(/^Notify/).fill(`${partner}/alerts`);
  await form.getByRole('button', { name: 'Make rule' }).click();
  const rule = page.getByRole('table', { name: 'Alert rules' }).getByRole('row', { name: new RegExp(name) });
  await rule.waitFor();
  assert.match(await rule.textContent(), /a webhook job is discarded in queue e2e/);
  assert.match(await rule.textContent(), /127\.0\.0\.1 \(standard\)/);

  // A call the partner refuses, with one attempt: discarded.
  const job = await api('POST', '/jobs', { kind: 'webhook', queue: 'e2e', max_attempts: 1,
    args: { url: `${partner}/fail`, body: { game: 'Bears vs Wolves' } } });
  assert.equal(job.status, 201, JSON.stringify(job.body));
  const id = job.body.job.id;
  await untilState(id, 'discarded');

  // The open page shows it by itself.
  const firing = page.getByRole('table', { name: 'Firing alerts' }).getByRole('row', { name: new RegExp(`job ${id} \\(webhook in queue e2e\\)`) });
  await firing.waitFor({ timeout: 20000 });
  assert.match(await firing.textContent(), /HTTP 500/);
  await page.screenshot({ path: path.join(screenshots, 'alerts.png'), fullPage: true });

  // The partner was told, signed with the endpoint's secret.
  const note = await eventually('the alert notification', () => received.find((r) => r.path === '/alerts'), Boolean, 20000);
  const body = JSON.parse(note.body);
  assert.equal(body.type, 'alert.fired');
  assert.equal(body.data.subject, `job ${id}`);
  assert.match(note.headers['webhook-signature'], /^v1,/);

  // Acknowledged by the admin, by name.
  await firing.getByRole('button', { name: /Acknowledge incident/ }).click();
  await firing.getByText('admin').waitFor();

  // The calls page finds the 500; the job's page shows the call.
  await page.goto(`${baseUrl}/calls?status=5xx`);
  await hydrated(page);
  const call = page.getByRole('table', { name: 'Webhook calls' }).getByRole('row', { name: new RegExp(`job ${id}\\b`) });
  await call.waitFor();
  assert.match(await call.textContent(), /500/);
  await page.screenshot({ path: path.join(screenshots, 'calls.png'), fullPage: true });
  await call.getByRole('link', { name: `job ${id}` }).click();
  await page.waitForURL((url) => url.pathname === `/jobs/${id}`);
  const calls = page.getByRole('list', { name: 'Calls' });
  await calls.waitFor();
  assert.match(await calls.textContent(), /HTTP 500/);
  assert.match(await calls.textContent(), /the partner is down/);
  await page.screenshot({ path: path.join(screenshots, 'job-calls.png'), fullPage: true });
  assert.deepEqual(errors, []);
  await page.close();
});
