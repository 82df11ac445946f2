// Drives headless Chromium through the dashboard.  Usage:
//   node dashboard.mjs URL RO_URL VIEWER_URL VIEWER_TOKEN JOB_ID STUCK_ID SHOT_DIR
// Prints one observation per line for the calling script to check against
// SQL: "row QUEUE KIND available running completed discarded cancelled",
// "rate QUEUE KIND LAST COMPLETED DISCARDED POINTS" (the throughput table and
// the number of points of its sparkline), "breaker KIND STATE", "finding
// KIND PID", "retried ID STATE", "job-page STATE", "ro-buttons N", the
// strip ("strip-state", "strip ITEM", "strip-link IDS"), an idle worker
// ("workers-row CELLS", "idle-link JOB IDS HASH"), a deep link
// ("deep-link STATE QUEUE JOB ROWS"), the refresh control ("auto-refresh
// WHEN STATE"), a viewer ("viewer-role", "viewer-buttons", "viewer-post
// STATUS"), the phone's width ("phone-width PX") and the screenshots
// ("screenshot PATH"); exits non-zero on any error (a missing element or a
// timeout included).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createRequire } from 'node:module';
import { execFileSync } from 'node:child_process';

const require = createRequire(process.env.SKL_NPM_DIR + '/');
const { chromium } = require('playwright-core');
const [url, roUrl, viewerUrl, viewerToken, jobId, stuckId, shots] = process.argv.slice(2);
const STATES = ['available', 'running', 'completed', 'discarded', 'cancelled'];
// The command and the database, to make things happen while the page is open.
const skl = (...args) => execFileSync(process.env.SKL_BIN, [...args, '--url', process.env.SKL_URL],
  { encoding: 'utf8' }).trim();
const sql = text => execFileSync('psql', ['-X', '-qAt', '-c', text, process.env.SKL_DIRECT_URL],
  { encoding: 'utf8' }).trim();
const sleep = ms => new Promise(r => setTimeout(r, ms));
const failedTotal = p => p.$eval('#chart-counts path[data-series="failed"]', e => Number(e.dataset.total));

async function rows(page) {
  return page.$$eval('#queues tbody tr', trs => trs.map(tr =>
    [...tr.children].slice(0, 7).map(td => td.textContent).join(' ')));
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
  for (const r of await page.$$eval('#waits tbody tr', trs => trs.map(tr => tr.dataset.queue + ' ' +
    [...tr.querySelectorAll('td[data-field]')].map(td => td.dataset.field + '=' + td.textContent).join(' '))))
    console.log('wait ' + r);
  for (const r of await page.$$eval('#limits tbody tr', trs => trs.map(tr => [tr.dataset.kind,
    ...['running', 'starts', 'waiting'].map(f => tr.querySelector(`td[data-field="${f}"]`).textContent)].join(' '))))
    console.log('limit ' + r);
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
  console.log('after-sql ' + sql(process.env.SQL_ROWS).split('\n').join('\nafter-sql '));

  await page.click(`#jobs a[data-job="${jobId}"]`);
  await page.waitForSelector('#job:not([hidden]) dd[data-field="state"]');
  console.log('job-page ' + await page.textContent('#job dd[data-field="state"]'));
  // a waiting job's page says what it waits for; then back to the retried job
  await page.evaluate(id => { location.hash = 'job=' + id; }, process.env.HELD_CHILD);
  await page.waitForSelector(`#job-id:text-is("${process.env.HELD_CHILD}")`);
  await page.waitForSelector('#job:not([hidden]) dd[data-field="waits_for"]');
  console.log('child-waits ' + await page.textContent('#job dd[data-field="waits_for"]'));
  await page.evaluate(id => { location.hash = 'job=' + id; }, String(jobId));
  await page.waitForSelector(`#job-id:text-is("${jobId}")`);

  // The chart: failed attempts made now appear in it (each refresh reads it).
  const f0 = await failedTotal(page);
  skl('enqueue', 'flaky', '--queue', 'flaky', '--max-attempts', '2');
  await page.waitForFunction(f => Number(document.querySelector(
    '#chart-counts path[data-series="failed"]').dataset.total) >= f + 2, f0, { timeout: 30000 });
  console.log('chart-failed ' + f0 + ' ' + await failedTotal(page) + ' ' +
    await page.$$eval('#chart-counts rect.hit', r => r.length) + ' ' +
    (await page.$$eval('#chart-counts rect.hit title', t => t.filter(x =>
      / [1-9][0-9]* failed attempts/.test(x.textContent)).length) > 0 ? 'hover' : 'no-hover'));

  // Bulk retry of every discarded job of kind bulk while the worker runs:
  // the count, the dialog stating it, the answer, the action log.  The 500
  // jobs were discarded a minute ago.
  sql(`INSERT INTO skiplock.finished_jobs (queue, kind, state, attempt, max_attempts, run_at,
         attempted_at, finished_at, errors, expires_at)
       SELECT 'bulk', 'bulk', 'discarded', 1, 1, now() - interval '61 seconds',
              now() - interval '61 seconds', now() - interval '60 seconds',
              jsonb_build_array(jsonb_build_object('attempt', 1, 'at', now() - interval '60 seconds',
                                                   'error', 'down')), now() + interval '7 days'
         FROM generate_series(1, 500)`);
  await page.goto(url + '#state=discarded&kind=bulk');
  await page.waitForSelector('body[data-loaded="true"]');
  await page.click('#bulk-matching button[data-bulk="retry"]');
  await page.waitForSelector('#confirm[open]');
  console.log('bulk-dialog ' + await page.textContent('#confirm-text'));
  await page.click('#confirm-yes');
  // Read in the same turn as it is seen: a refresh rewrites the status line.
  const answer = await page.waitForFunction(() => {
    const t = document.getElementById('status').textContent;
    return /^retry: /.test(t) && t;
  }, null, { timeout: 60000 });
  console.log('bulk-answer ' + await answer.jsonValue());
  // The bulk retry's row (single-job retries are logged too, by id).
  const bulkRow = () => [...document.querySelectorAll('#actions tbody tr[data-action="retry"]')]
    .find(tr => tr.textContent.includes('"kind":"bulk"'));
  await page.waitForFunction(bulkRow, null, { timeout: 30000 });
  console.log('bulk-log ' + await page.evaluate(() => {
    const tr = [...document.querySelectorAll('#actions tbody tr[data-action="retry"]')]
      .find(r => r.textContent.includes('"kind":"bulk"'));
    return [...tr.children].map(td => td.textContent).slice(1).join(' | ');
  }));

  // A filter that matches every job (a time field without a bound): the
  // dialog says EVERY job, and "yes" stays disabled until the box is ticked.
  await page.goto(url + '#time=created');
  await page.waitForSelector('body[data-loaded="true"]');
  await page.click('#bulk-matching button[data-bulk="cancel"]');
  await page.waitForSelector('#confirm[open]');
  console.log('every-dialog ' + /^cancel EVERY job \(\d+\): the filter names no subset \(a time field without a bound\)/
    .test(await page.textContent('#confirm-text')) + ' ' + await page.isDisabled('#confirm-yes') + ' ' +
    await page.isVisible('#confirm-all'));
  await page.check('#confirm-all');
  console.log('every-box ' + await page.isDisabled('#confirm-yes'));
  await page.click('#confirm-no');

  // Pause queue pz: a job enqueued there stays available while the worker
  // runs; the row and the strip say paused; resume and it is claimed.
  await page.goto(url + '#');
  await page.waitForSelector('body[data-loaded="true"]');
  await page.click('#queues tr[data-queue="pz"] button[data-pause="pause-queue"]');
  await page.waitForSelector('#queues tr[data-queue="pz"] button[data-pause="resume-queue"]');
  const pz = skl('enqueue', 'pzk', '--queue', 'pz');
  await sleep(2000);
  console.log('paused-job ' + sql(`SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = ${pz}`) +
    ' ' + await page.textContent('#queues tr[data-queue="pz"] td[data-field="paused"]') + ' ' +
    (await page.$$eval('#problems li[data-problem="paused"]', l => l.map(x => x.textContent))).join(';'));
  await page.click('#queues tr[data-queue="pz"] button[data-pause="resume-queue"]');
  for (let i = 0; i < 100 && sql(`SELECT state FROM skiplock.all_jobs WHERE id = ${pz}`) !== 'completed'; i++)
    await sleep(100);
  console.log('resumed-job ' + sql(`SELECT state || ' ' || attempt FROM skiplock.all_jobs WHERE id = ${pz}`));

  // The worker stops (an idle worker rescues expired leases); then the
  // stuck job: running for an hour, its lease expired a minute ago.
  const bulkDone = () => sql(`SELECT count(*) FROM skiplock.all_jobs WHERE kind = 'bulk' AND state = 'completed'`);
  for (let i = 0; i < 1200 && bulkDone() !== '500'; i++) await sleep(100);
  process.kill(Number(process.env.W2_PID), 'SIGTERM');
  const running = pid => { // not gone and not a zombie (its parent, the script, reaps it)
    try { return !/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
  };
  for (let i = 0; i < 300 && running(process.env.W2_PID); i++) await sleep(100);
  sql(`UPDATE skiplock.jobs SET state = 'running', attempt = 1, fencing = fencing + 1,
         lease_owner = 'gone', attempted_at = now() - interval '1 hour',
         lease_expires_at = now() - interval '1 minute' WHERE id = ${process.env.STUCK}`);
  // An idle worker: a claim of kind pzk in queue pz (raw SQL, as any
  // client claims) takes nothing while a job of kind nobody is due there.
  const idleJob = sql(`SELECT skiplock.enqueue('nobody', '{}', 'pz', now() - interval '1 minute')`);
  sql(`SELECT count(*) FROM skiplock.claim('browser-idle', ARRAY['pzk'], ARRAY['pz'])`);
  await page.reload();
  await page.waitForSelector('body[data-loaded="true"]');

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
  // The idle worker: its row in the Workers table, and its strip item's
  // link lists the job it left behind.
  console.log('workers-row ' + await page.$eval('#workers tr[data-owner="browser-idle"]',
    tr => [...tr.children].map(td => td.textContent).filter((t, i) => i !== 3).join(' | ')));
  await page.goto(url + '#');
  await page.waitForSelector('body[data-loaded="true"]');
  await page.locator('#problems li[data-problem="idle-workers"] a', { hasText: 'of queue pz wait' }).click();
  await page.waitForFunction(id => [...document.querySelectorAll('#jobs tbody tr')]
    .map(tr => tr.dataset.id).join(' ') === id, idleJob);
  console.log('idle-link ' + idleJob + ' ' + (await page.$$eval('#jobs tbody tr', trs =>
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
  console.log('viewer-act-buttons ' + await vp.locator('button[data-bulk], button[data-pause], ' +
    'button[data-breaker], button[data-schedule]').count());
  console.log('viewer-pause ' + await vp.evaluate(async () => (await fetch('/api/pause?queue=pz',
    { method: 'POST', headers: { 'X-CSRF-Token':
      document.querySelector('meta[name="csrf-token"]').content } })).status));
  console.log('viewer-post ' + await vp.evaluate(async id => (await fetch(`/api/jobs/${id}/retry`,
    { method: 'POST', headers: { 'X-CSRF-Token':
      document.querySelector('meta[name="csrf-token"]').content } })).status, jobId));
  await vp.close();
} finally {
  await ctx.close();
  rmSync(profile, { recursive: true, force: true });
}
