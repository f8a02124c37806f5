// The attempts' history: the History page's charts (server-rendered, readable without scripts,
// live once hydrated), the overview's lateness panel and the Queues page's sparklines.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import path from 'node:path';
import { launch, api, eventually, hydrated, baseUrl, screenshots, watchErrors } from './helpers.mjs';

let browser;
before(async () => { browser = await launch(); });
after(async () => { await browser?.close(); });

test('the history page is drawn on the server, readable without scripts', async () => {
  const res = await browser.request.get(baseUrl + '/history?range=24h&by=kind');
  assert.equal(res.status(), 200);
  const html = await res.text();
  assert.match(html, /Completed per 1 h/);
  assert.match(html, /role="img"/);
  assert.match(html, /Lateness p50 and p99/);
});

test('a history chart changes when jobs complete, without a reload', async () => {
  const page = await browser.newPage();
  const errors = watchErrors(page);
  await page.goto(baseUrl + '/history?range=1h&by=kind&kind=noop');
  await hydrated(page);
  const chart = page.getByRole('img', { name: /^Completed per 1 min/ });
  const completed = async () => {
    const label = (await chart.getAttribute('aria-label')) ?? '';
    const m = label.match(/noop: (\d+) jobs? in all/);
    return m ? Number(m[1]) : 0;
  };
  const before = await completed();
  for (let i = 0; i < 3; i++) {
    const made = await api('POST', '/jobs', { kind: 'noop' });
    assert.equal(made.status, 201, JSON.stringify(made));
  }
  await eventually('the chart to count the three jobs', completed, (n) => n >= before + 3);
  await page.screenshot({ path: path.join(screenshots, 'history.png'), fullPage: true });
  // The same series through the API.
  const series = (await api('GET', '/stats/history?kind=noop')).body.series;
  const total = series[0].points.reduce((n, p) => n + p.completed, 0);
  assert.ok(total >= before + 3, `${total} completed through the API`);

  // The overview's lateness panel and the queues' sparklines read the same rollups.
  await page.goto(baseUrl + '/');
  await hydrated(page);
  assert.match(await page.locator('[data-lateness]').textContent(),
    /Half of the attempts started within \d+(\.\d)? (ms|s) of their due time, 99 % within/);
  await page.goto(baseUrl + '/queues');
  await hydrated(page);
  const spark = page.getByRole('img', { name: /attempts ended in the last 24 hours in queue default$/ });
  assert.match(await spark.getAttribute('aria-label'), /^[1-9]\d* attempts/);
  assert.deepEqual(errors, []);
  await page.close();
});
