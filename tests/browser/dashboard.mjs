// Drives headless Chromium through the dashboard.  Usage:
//   node dashboard.mjs URL RO_URL VIEWER_URL VIEWER_TOKEN JOB_ID STUCK_ID SHOT_DIR
// Prints one observation per line for the calling script to check against
// SQL: "row QUEUE KIND available running completed discarded cancelled",
// "rate QUEUE KIND LAST COMPLETED DISCARDED POINTS" (the throughput table and
// the number of points of its sparkline), "breaker KIND STATE", "finding
// KIND PID", "retried ID STATE", "job-page STATE", "ro-buttons N", the
// strip ("strip-state", "strip ITEM", "strip-link IDS"), a deep link
// ("deep-link STATE QUEUE JOB ROWS"), the refresh control ("auto-refresh
// WHEN STATE"), a viewer ("viewer-role", "viewer-buttons", "viewer-post
// STATUS"), the phone's width ("phone-width PX") and the screenshots
// ("screenshot PATH"); exits non-zero on any error (a missing element or a
// timeout included).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';

const require = createRequire(process.env.SKL_NPM_DIR + '/');
const { chromium } = require('playwright-core');
const [url, roUrl, viewerUrl, viewerToken, jobId, stuckId, shots] = process.argv.slice(2);
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

  await page.click(`#jobs a[data-job="${jobId}"]`);
  await page.waitForSelector('#job:not([hidden]) dd[data-field="state"]');
  console.log('job-page ' + await page.textContent('#job dd[data-field="state"]'));

  // The strip: the stuck job (its lease expired an hour into its attempt).
  console.log('strip-state ' + await page.getAttribute('#now', 'data-state'));
  for (const r of await page.$$eval('#problems li', lis => lis.map(li =>
    li.dataset.problem + ' ' + li.textContent)))
    console.log('strip ' + r);
  await page.goto(url + '#');
  await page.waitForSelector('body[data-loaded="true"]');
  await page.click('#problems li[data-problem="lease-expired"] a');
  await page.waitForFunction(id => [...document.querySelectorAll('#jobs tbody tr')]
    .map(tr => tr.dataset.id).join(' ') === id, stuckId);
  console.log('strip-link ' + (await page.$$eval('#jobs tbody tr', trs =>
    trs.map(tr => tr.dataset.id))).join(' ') + ' ' + await page.evaluate(() => location.hash));
  await page.screenshot({ path: shots + '/desktop.png', fullPage: true });
  console.log('screenshot ' + shots + '/desktop.png');

  // A deep link in a fresh page restores the filters and the open job.
  const deep = await ctx.newPage();
  await deep.goto(url + `#state=discarded&queue=mail&job=${jobId}`);
  await deep.waitForSelector('body[data-loaded="true"]');
  await deep.waitForSelector('#job:not([hidden])');
  console.log('deep-link ' + await deep.inputValue('#filters [name=state]') + ' ' +
    await deep.inputValue('#filters [name=queue]') + ' ' + await deep.textContent('#job-id') + ' ' +
    (await deep.$$eval('#jobs tbody tr', trs => trs.map(tr => tr.dataset.id))).join(','));

  // The refresh control: picking a row stops it, unpicking starts it.
  console.log('auto-refresh start ' + await deep.getAttribute('body', 'data-auto-refresh'));
  await deep.check('#jobs tbody input[type=checkbox]');
  console.log('auto-refresh picked ' + await deep.getAttribute('body', 'data-auto-refresh'));
  await deep.uncheck('#jobs tbody input[type=checkbox]');
  console.log('auto-refresh unpicked ' + await deep.getAttribute('body', 'data-auto-refresh'));
  await deep.selectOption('#refresh', '0');
  console.log('auto-refresh paused ' + await deep.getAttribute('body', 'data-auto-refresh'));
  await deep.close();

  await page.goto(roUrl);
  await page.waitForSelector('body[data-loaded="true"]');
  console.log('ro-buttons ' + await page.locator('#jobs button[data-action]').count());
  console.log('ro-mode ' + await page.textContent('#mode'));

  // A phone, 390 px wide, in the dark: the strip and lists fit the width.
  const pp = await ctx.newPage();
  pp.setDefaultTimeout(20000);
  await pp.setViewportSize({ width: 390, height: 844 });
  await pp.emulateMedia({ colorScheme: 'dark' });
  await pp.goto(url + '#state=running');
  await pp.waitForSelector('body[data-loaded="true"]');
  console.log('phone-width ' + await pp.evaluate(() => document.documentElement.scrollWidth));
  await pp.screenshot({ path: shots + '/phone.png', fullPage: true });
  console.log('screenshot ' + shots + '/phone.png');
  await pp.close();

  // A viewer's token: the page knows its role, draws no action, and the
  // server refuses a POST even with the page's CSRF token.
  const vp = await ctx.newPage();
  vp.setDefaultTimeout(20000);
  await vp.setExtraHTTPHeaders({ Authorization: 'Bearer ' + viewerToken });
  await vp.goto(viewerUrl);
  await vp.waitForSelector('body[data-loaded="true"]');
  console.log('viewer-role ' + await vp.getAttribute('body', 'data-role') + ' ' +
    await vp.textContent('#mode'));
  console.log('viewer-buttons ' + await vp.locator('#jobs button[data-action]').count());
  console.log('viewer-post ' + await vp.evaluate(async id => (await fetch(`/api/jobs/${id}/retry`,
    { method: 'POST', headers: { 'X-CSRF-Token':
      document.querySelector('meta[name="csrf-token"]').content } })).status, jobId));
  await vp.close();
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
