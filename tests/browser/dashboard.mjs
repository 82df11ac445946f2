// Drives headless Chromium through the dashboard.  Usage:
//   node dashboard.mjs URL RO_URL JOB_ID SCREENSHOT
// Prints one observation per line for the calling script to check against
// SQL: "row QUEUE KIND available running completed discarded cancelled",
// "rate QUEUE KIND LAST COMPLETED DISCARDED POINTS" (the throughput table and
// the number of points of its sparkline), "breaker KIND STATE", "finding
// KIND PID", "retried ID STATE", "job-page STATE", "ro-buttons N"; exits
// non-zero on any error (a missing element or a timeout included).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(process.env.SKL_NPM_DIR + '/');
const { chromium } = require('playwright-core');
const [url, roUrl, jobId, shot] = process.argv.slice(2);
const STATES = ['available', 'running', 'completed', 'discarded', 'cancelled'];

async function rows(page) {
  return page.$$eval('#queues tbody tr', trs => trs.map(tr =>
    [...tr.children].map(td => td.textContent).join(' ')));
}

const profile = mkdtempSync(join(tmpdir(), 'skl-chromium.'));
const ctx = await chromium.launchPersistentContext(profile, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
try {
  const page = ctx.pages()[0] || await ctx.newPage();
  page.setDefaultTimeout(20000);
  await page.goto(url);
  await page.waitForSelector('body[data-loaded="true"]');
  for (const r of await rows(page)) console.log('row ' + r);
  const total = await page.$$eval('#totals td[data-state]', tds =>
    tds.map(td => td.dataset.state + '=' + td.textContent).join(' '));
  console.log('total ' + total);
  for (const r of await page.$$eval('#throughput tbody tr', trs => trs.map(tr =>
    [tr.dataset.queue, tr.dataset.kind,
     ...['last', 'completed', 'discarded'].map(f => tr.querySelector(`td[data-field="${f}"]`).textContent),
     tr.querySelector('svg.spark polyline').getAttribute('points').split(' ').length].join(' '))))
    console.log('rate ' + r);
  for (const r of await page.$$eval('#breakers tbody tr', trs => trs.map(tr =>
    tr.dataset.kind + ' ' + tr.querySelector('td[data-field="state"]').textContent)))
    console.log('breaker ' + r);
  for (const r of await page.$$eval('#findings tbody tr', trs => trs.map(tr =>
    tr.querySelector('td[data-field="kind"]').textContent + ' ' + tr.dataset.pid)))
    console.log('finding ' + r);

  // The retry's own refresh renders every table at once (app.js), so once
  // the job shows as available, the counts come from after the retry too.
  const gen = await page.evaluate(() => Number(document.body.dataset.generation));
  await page.click(`#jobs button[data-action="retry"][data-id="${jobId}"]`);
  const cell = `#jobs tr[data-id="${jobId}"] td[data-field="state"]`;
  await page.waitForFunction(([sel, g]) => Number(document.body.dataset.generation) > g &&
    document.querySelector(sel)?.textContent === 'available', [cell, gen]);
  console.log(`retried ${jobId} ` + await page.textContent(cell));
  for (const r of await rows(page)) console.log('after ' + r);

  await page.click(`#jobs a[href="#job/${jobId}"]`);
  await page.waitForSelector('#job:not([hidden]) dd[data-field="state"]');
  console.log('job-page ' + await page.textContent('#job dd[data-field="state"]'));
  await page.screenshot({ path: shot, fullPage: true });

  await page.goto(roUrl);
  await page.waitForSelector('body[data-loaded="true"]');
  console.log('ro-buttons ' + await page.locator('#jobs button[data-action]').count());
  console.log('ro-mode ' + await page.textContent('#mode'));
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
