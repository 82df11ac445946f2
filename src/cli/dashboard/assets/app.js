// skiplock dashboard: reads the JSON endpoints under /api/ and renders the
// tables.  Every value goes in through textContent, never as markup.
//
// The URL's hash holds the view: the job list's filters and the open job,
// as a query string ("#state=discarded&kind=mail&job=12"), so a pasted link
// opens the same view.  A hash without "=" ("#locks-section") only scrolls.
'use strict';

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const body = document.body;
const role = body.dataset.role;
const canAct = role === 'operator';
const hidePayloads = body.dataset.hidePayloads === 'true';
const stuckAfterMs = Number(body.dataset.stuckAfterMs);
const STATES = ['available', 'running', 'completed', 'discarded', 'cancelled'];
const FILTERS = ['state', 'queue', 'kind', 'payload', 'error', 'time', 'from', 'to'];
// What makes the strip red: a due job waiting this long, and a failure
// rate this high over at least this many failed attempts.
const DUE_BAD_MS = 5 * 60000;
const RATE_BAD = 0.2;
const RATE_MIN_ERRORS = 3;
const STUCK_LIMIT = 100;

function el(tag, text, attrs) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

function row(cells) {
  const tr = document.createElement('tr');
  for (const c of cells) tr.appendChild(c instanceof Node ? c : el('td', c));
  return tr;
}

function fill(id, rows, part) {
  const b = document.querySelector('#' + id + ' ' + (part || 'tbody'));
  b.replaceChildren(...rows);
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: 'same-origin'}, opts));
  const doc = await r.json().catch(() => ({error: 'HTTP ' + r.status}));
  if (!r.ok) throw new Error(doc.error || 'HTTP ' + r.status);
  return doc;
}

function say(text) { document.getElementById('status').textContent = text; }

// ---- the view in the URL ----

let view = new URLSearchParams();

function readHash() {
  const h = location.hash.slice(1);
  const legacy = /^job\/(\d+)$/.exec(h);
  if (legacy) view = new URLSearchParams({job: legacy[1]});
  else if (h.includes('=') || h === '') view = new URLSearchParams(h);
  else return false;             // an anchor: the view stays
  const form = document.getElementById('filters');
  for (const f of FILTERS) form.elements[f].value = view.get(f) || '';
  document.getElementById('chart-range').value = view.get('range') || '1h';
  return true;
}

function viewHash(changes) {
  const q = new URLSearchParams(view);
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === '') q.delete(k);
    else q.set(k, v);
  }
  return '#' + q;
}

function jobsPath() {
  const q = new URLSearchParams();
  for (const f of FILTERS) if (view.get(f)) q.set(f, view.get(f));
  return '/api/jobs?' + q;
}

// The chart follows the list's queue and kind, over the hash's range.
function chartPath() {
  const q = new URLSearchParams({range: view.get('range') || '1h'});
  for (const f of ['queue', 'kind']) if (view.get(f)) q.set(f, view.get(f));
  return '/api/chart?' + q;
}

function duration(ms) {
  if (ms === null || ms === undefined) return '-';
  if (ms < 60000) return Math.round(ms / 1000) + ' s';
  if (ms < 3600000) return Math.round(ms / 60000) + ' min';
  return (ms / 3600000).toFixed(1) + ' h';
}

// A duration as the API reads it: "15m", else milliseconds.
function apiDuration(ms) {
  return ms % 60000 === 0 ? ms / 60000 + 'm' : ms + 'ms';
}

function percent(rate) {
  return rate === null || rate === undefined ? '-' : Math.round(rate * 100) + ' %';
}

// ---- what is wrong now ----

function link(text, hash, attrs) {
  return el('a', text, Object.assign({href: hash}, attrs || {}));
}

function problem(key, text, hash) {
  const li = el('li', null, {'data-problem': key});
  li.appendChild(link(text, hash));
  return li;
}

function rateBad(q, w) {
  return q['failure_rate_' + w] !== null && q['failure_rate_' + w] >= RATE_BAD &&
    q['recent_errors_' + w] >= RATE_MIN_ERRORS;
}

function queueProblems(qs) {
  const out = [];
  const expired = qs.reduce((a, q) => a + q.lease_expired, 0);
  if (expired) out.push(problem('lease-expired', expired + ' running job(s) whose lease expired',
    '#state=running&time=lease&to=0s'));
  for (const q of qs) {
    const sel = 'queue=' + encodeURIComponent(q.queue) + '&kind=' + encodeURIComponent(q.kind);
    if (q.oldest_due_age_ms !== null && q.oldest_due_age_ms >= DUE_BAD_MS)
      out.push(problem('due', q.queue + '/' + q.kind + ': the oldest due job has waited ' +
        duration(q.oldest_due_age_ms), '#' + sel + '&state=available&time=run&to=0s'));
    for (const w of ['5m', '60m'])
      if (rateBad(q, w))
        out.push(problem('failures', q.queue + '/' + q.kind + ': ' + percent(q['failure_rate_' + w]) +
          ' of attempts failed in the last ' + (w === '5m' ? '5' : '60') + ' minutes',
          '#' + sel + '&time=attempted&from=' + (w === '5m' ? '5m' : '60m')));
  }
  return out;
}

// Idle workers, grouped by the queues they claim from: each group looked
// and took nothing while due jobs of those queues waited.
function workerProblems(ws) {
  const groups = new Map();
  for (const w of ws.filter(w => w.waiting > 0)) {
    const key = JSON.stringify(w.queues);
    if (!groups.has(key)) groups.set(key, []);
    groups.get(key).push(w);
  }
  return [...groups.values()].map(g => {
    const queues = g[0].queues;
    const union = f => [...new Set(g.flatMap(w => w[f]))].sort().join(', ');
    const most = Math.max(...g.map(w => w.waiting));
    const where = queues === null ? 'any queue'
      : (queues.length === 1 ? 'queue ' : 'queues ') + queues.join(', ');
    const sel = queues !== null && queues.length === 1
      ? 'queue=' + encodeURIComponent(queues[0]) + '&' : '';
    return problem('idle-workers', g.length + ' worker(s) idle while ' +
      (most >= 1000 ? '1000+' : most) + ' due job(s) of ' + where +
      ' wait: kinds they take: ' + union('kinds') + '; waiting: ' + union('waiting_kinds'),
      '#' + sel + 'state=available&time=run&to=0s');
  });
}

function stuckPath() {
  return 'state=running&time=attempted&to=' + apiDuration(stuckAfterMs);
}

function renderStrip(qs, stuck, breakers, locks, workers, maint) {
  const items = queueProblems(qs).concat(pauseProblems(), workerProblems(workers));
  if (stuck.length)
    items.push(problem('stuck', (stuck.length > STUCK_LIMIT ? STUCK_LIMIT + '+' : stuck.length) +
      ' job(s) running for more than ' + duration(stuckAfterMs), '#' + stuckPath()));
  for (const b of breakers.filter(b => b.state !== 'closed'))
    items.push(problem('breaker', 'breaker ' + b.kind + ' is ' + b.state.replace('_', '-') +
      ': its jobs wait', '#kind=' + encodeURIComponent(b.kind) + '&state=available'));
  if (locks.findings.length)
    items.push(problem('locks', locks.findings.length + ' lock-doctor finding(s)', '#locks-section'));
  // Maintenance (partitions of finished jobs) that has not run while jobs
  // did: the sentence of `skiplock doctor maintenance`; its lease is listed
  // under Leases.
  for (const f of maint.findings)
    items.push(problem('maintenance', f.message, '#leases-section'));
  document.getElementById('problems').replaceChildren(...items);
  const verdict = document.getElementById('verdict');
  verdict.textContent = items.length ? items.length + ' thing(s) need attention'
    : 'Nothing is wrong: no expired leases, no stuck jobs, no old due jobs, no failures, ' +
      'breakers closed, no lock findings, no workers idle while jobs wait, maintenance running.';
  document.getElementById('now').dataset.state = items.length ? 'bad' : 'ok';
  fill('health', qs.map(q => {
    const sel = '#queue=' + encodeURIComponent(q.queue) + '&kind=' + encodeURIComponent(q.kind);
    const cell = (text, bad, hash, field) => {
      const td = el('td', null, {class: 'num' + (bad ? ' bad' : ''), 'data-field': field});
      td.appendChild(hash ? link(text, hash) : document.createTextNode(text));
      return td;
    };
    const tr = row([q.queue, q.kind,
      cell(duration(q.oldest_due_age_ms), q.oldest_due_age_ms >= DUE_BAD_MS,
        q.oldest_due_age_ms === null ? null : sel + '&state=available&time=run&to=0s', 'due'),
      cell(q.lease_expired, q.lease_expired > 0,
        q.lease_expired ? sel + '&state=running&time=lease&to=0s' : null, 'expired'),
      cell(percent(q.failure_rate_5m), rateBad(q, '5m'), sel + '&time=attempted&from=5m', 'rate5'),
      cell(percent(q.failure_rate_60m), rateBad(q, '60m'), sel + '&time=attempted&from=60m',
        'rate60')]);
    tr.dataset.queue = q.queue;
    tr.dataset.kind = q.kind;
    return tr;
  }));
}

// ---- the tables ----

function count(n, state, queue, kind) {
  const attrs = {class: 'num', 'data-state': state};
  if (queue !== undefined) { attrs['data-queue'] = queue; attrs['data-kind'] = kind; }
  return el('td', n, attrs);
}

function renderQueues(qs) {
  const total = Object.fromEntries(STATES.map(s => [s, 0]));
  fill('queues', qs.map(q => {
    STATES.forEach(s => { total[s] += q[s]; });
    const tr = row([q.queue, q.kind, ...STATES.map(s => count(q[s], s, q.queue, q.kind)),
      ...pauseCells(q)]);
    tr.dataset.queue = q.queue;
    tr.dataset.kind = q.kind;
    return tr;
  }));
  const foot = row([el('td', 'total', {colspan: 2}), ...STATES.map(s => count(total[s], s)),
    el('td', null, {colspan: 2})]);
  foot.id = 'totals';
  fill('queues', [foot], 'tfoot');
}

const SVG = 'http://www.w3.org/2000/svg';

// An inline SVG line of the counts (oldest first), scaled to its maximum.
function sparkline(counts, label) {
  const w = 180, h = 28, max = Math.max(1, ...counts);
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('class', 'spark');
  svg.setAttribute('role', 'img');
  svg.setAttribute('aria-label', label);
  const line = document.createElementNS(SVG, 'polyline');
  const step = counts.length > 1 ? w / (counts.length - 1) : w;
  line.setAttribute('points', counts.map((c, i) =>
    (i * step).toFixed(1) + ',' + (h - 2 - (c / max) * (h - 4)).toFixed(1)).join(' '));
  svg.appendChild(line);
  return svg;
}

function renderThroughput(t) {
  const sum = v => v.reduce((a, b) => a + b, 0);
  fill('throughput', t.queues.map(q => {
    const spark = el('td');
    spark.appendChild(sparkline(q.completed, 'completed per minute, ' + q.queue + ' ' + q.kind));
    const last = q.completed[q.completed.length - 1];
    const tr = row([q.queue, q.kind, spark, el('td', last, {class: 'num', 'data-field': 'last'}),
      el('td', sum(q.completed), {class: 'num', 'data-field': 'completed'}),
      el('td', sum(q.discarded), {class: 'num', 'data-field': 'discarded'})]);
    tr.dataset.queue = q.queue;
    tr.dataset.kind = q.kind;
    return tr;
  }));
}

function actionButton(job, action) {
  const b = el('button', action, {'data-action': action, 'data-id': job.id, type: 'button'});
  b.addEventListener('click', () => act(job.id, action));
  return b;
}

// Rows picked with their check box, by job id; auto-refresh stops while
// any is picked, so the list does not move under the operator's hand.
const selected = new Set();

function pickBox(j) {
  const box = el('input', null, {type: 'checkbox', 'aria-label': 'select job ' + j.id,
    'data-id': j.id});
  box.checked = selected.has(String(j.id));
  box.addEventListener('change', () => {
    if (box.checked) selected.add(String(j.id)); else selected.delete(String(j.id));
    showSelection();
  });
  const td = el('td', null, {class: 'pick'});
  td.appendChild(box);
  return td;
}

function jobRow(j) {
  const idCell = el('td');
  idCell.appendChild(link(j.id, viewHash({job: j.id}), {'data-job': j.id}));
  const actions = el('td', null, {class: 'actions'});
  if (canAct) {
    if (['discarded', 'cancelled', 'available'].includes(j.state))
      actions.appendChild(actionButton(j, 'retry'));
    if (['available', 'running'].includes(j.state))
      actions.appendChild(actionButton(j, 'cancel'));
  }
  const tr = row([pickBox(j), idCell, j.queue, j.kind,
    el('td', j.state, {class: 'state-' + j.state, 'data-field': 'state'}),
    el('td', j.attempt + '/' + j.max_attempts, {class: 'opt'}), el('td', j.run_at, {class: 'opt'}),
    el('td', j.last_error || '', {class: 'error', title: j.last_error || ''}), actions]);
  tr.dataset.id = j.id;
  return tr;
}

function renderJobs(jobs) {
  const shown = new Set(jobs.map(j => String(j.id)));
  for (const id of [...selected]) if (!shown.has(id)) selected.delete(id);
  fill('jobs', jobs.map(jobRow));
  showSelection();
}

function renderSchedules(list) {
  fill('schedules', list.map(s =>
    Object.assign(row([s.name, s.expression, s.zone, s.kind, s.queue,
      el('td', s.enabled ? 'yes' : 'paused', {'data-field': 'enabled'}),
      s.last_fire || '-', s.next_fire || '-', scheduleCell(s)]), {id: 'schedule-' + s.name})));
}

function renderLeases(list) {
  fill('leases', list.map(l =>
    row([l.name, l.owner, el('td', l.fencing === null ? '-' : l.fencing, {class: 'num'}),
         l.live ? 'yes' : 'expired',
         l.expires_at])));
}

function renderBreakers(list) {
  fill('breakers', list.map(b => {
    const tr = row([b.kind, el('td', b.state, {class: 'state-' + b.state, 'data-field': 'state'}),
      el('td', b.calls + ' / ' + b.failures, {class: 'num'}),
      el('td', b.state === 'half_open' ? b.probes_left : '-', {class: 'num'}),
      b.open_for_ms === null || b.open_for_ms === undefined ? '-'
        : b.open_for_ms < 0 ? 'until closed' : Math.ceil(b.open_for_ms / 1000) + ' s',
      b.changed_at || '-', breakerCell(b)]);
    tr.dataset.kind = b.kind;
    return tr;
  }));
}

// The waits per queue, one row each, a column per reason (0 when none);
// 10000 means at least that many (the summary's cap per queue).
const WAIT_REASONS = ['dependency', 'scheduled', 'paused', 'breaker', 'limit', 'worker'];

function renderWaits(waits) {
  const byQueue = new Map();
  for (const w of waits) {
    if (!byQueue.has(w.queue)) byQueue.set(w.queue, {});
    byQueue.get(w.queue)[w.reason] = w.jobs;
  }
  fill('waits', [...byQueue].map(([queue, n]) => {
    const tr = row([queue, ...WAIT_REASONS.map(r => el('td', n[r] || 0,
      {class: 'num', 'data-field': r}))]);
    tr.dataset.queue = queue;
    return tr;
  }));
}

function renderLimits(limits) {
  const of = (used, max) => max === null ? '-' : (used === null ? '?' : used) + ' / ' + max;
  fill('limits', limits.map(l => {
    const tr = row([l.kind, l.key_field || '-',
      el('td', of(l.running, l.max_running), {class: 'num', 'data-field': 'running'}),
      el('td', l.rate === null ? '-' : of(l.started, l.rate) + ' per ' + (l.per_ms % 1000 ? l.per_ms + ' ms' : l.per_ms / 1000 + ' s'),
        {class: 'num', 'data-field': 'starts'}),
      el('td', l.waiting, {class: 'num', 'data-field': 'waiting'}),
      l.changed_at + ' by ' + l.changed_by]);
    tr.dataset.kind = l.kind;
    return tr;
  }));
}

function renderWorkers(ws) {
  const list = v => v === null ? '*' : v.join(', ');
  fill('workers', ws.map(w => {
    const tr = row([w.owner, list(w.queues), list(w.kinds),
      el('td', duration(w.empty_age_ms) + ' ago', {title: w.empty_at, 'data-field': 'empty'}),
      el('td', w.waiting ? (w.waiting >= 1000 ? '1000+' : w.waiting) + ' (' +
        w.waiting_kinds.join(', ') + ')' : '0',
      {class: 'num' + (w.waiting ? ' bad' : ''), 'data-field': 'waiting'})]);
    tr.dataset.owner = w.owner;
    return tr;
  }));
}

function age(ms) {
  return ms === null || ms === undefined ? '-' : (ms / 1000).toFixed(0) + ' s';
}

function renderLocks(doc) {
  fill('findings', doc.findings.map(f => {
    const s = f.session;
    const tr = row([el('td', f.kind, {'data-field': 'kind'}), el('td', s.pid, {class: 'num'}),
      s.state || '-', age(s.state_age_ms), s.application_name || '-', s.client_addr || 'local',
      f.holds || '-', f.blocked.length ? f.blocked.join(', ') : '-']);
    tr.dataset.pid = s.pid;
    return tr;
  }));
  document.getElementById('locks-summary').textContent = doc.findings.length
    ? doc.findings.length + ' finding(s) need action: run skiplock doctor locks for the details and the fix'
    : 'no findings (' + doc.locks.length + ' advisory lock(s) held or awaited)';
}

const JOB_FIELDS = ['queue', 'kind', 'state', 'priority', 'attempt', 'max_attempts', 'fencing',
  'run_at', 'created_at', 'attempted_at', 'finished_at', 'lease_owner', 'lease_expires_at',
  'unique_key', 'result', 'waits_for'];

// The open job (the hash's job=ID), or null; its payload when asked for.
let showPayloadOf = null;

async function fetchJob() {
  const id = view.get('job');
  if (!/^\d+$/.test(id || '')) return null;
  return api('/api/jobs/' + id + (showPayloadOf === id ? '?payload=show' : ''));
}

function renderJob(j) {
  const box = document.getElementById('job');
  box.hidden = !j;
  if (!j) return;
  document.getElementById('job-id').textContent = j.id;
  document.getElementById('job-close').setAttribute('href', viewHash({job: null}));
  const dl = document.getElementById('job-fields');
  dl.replaceChildren();
  for (const f of JOB_FIELDS) {
    let v = j[f];
    if (v === null || v === undefined) continue;
    if (typeof v === 'object') v = JSON.stringify(v);
    dl.append(el('dt', f), el('dd', v, {'data-field': f}));
  }
  document.getElementById('job-payload').textContent = j.payload_hidden
    ? '(hidden: the dashboard runs with --hide-payloads)' : JSON.stringify(j.payload, null, 2);
  document.getElementById('job-show-payload').hidden = !(j.payload_hidden && canAct);
  document.getElementById('job-errors').replaceChildren(...(j.errors || []).map(e =>
    el('li', 'attempt ' + e.attempt + ' at ' + e.at + ': ' + e.error)));
}

// ---- refreshing ----

// Every refresh reads all endpoints, then renders them together, so the
// tables on the page always come from one moment.  Only the newest refresh
// renders: an action bumps the generation too, so a refresh that started
// before the action cannot paint its older answers over the newer ones.
let generation = 0;

async function refresh() {
  const gen = ++generation;
  try {
    const [queues, rate, jobs, schedules, leases, breakers, locks, job, stuck, paused, actions,
      chart, workers, maint, waits, limits] = await Promise.all([
      api('/api/queues'), api('/api/throughput'), api(jobsPath()), api('/api/schedules'),
      api('/api/leases'), api('/api/breakers'), api('/api/doctor/locks'), fetchJob(),
      api('/api/jobs?' + stuckPath() + '&limit=' + (STUCK_LIMIT + 1)), api('/api/pauses'),
      api('/api/actions?limit=20'), api(chartPath()), api('/api/workers'),
      api('/api/doctor/maintenance'), api('/api/waits'), api('/api/limits')]);
    if (gen !== generation) return;
    pauses = paused;
    renderStrip(queues, stuck, breakers, locks, workers, maint);
    renderWorkers(workers);
    renderChart(chart);
    renderActions(actions);
    renderQueues(queues);
    renderThroughput(rate);
    renderJobs(jobs);
    renderSchedules(schedules);
    renderLeases(leases);
    renderBreakers(breakers);
    renderWaits(waits);
    renderLimits(limits);
    renderLocks(locks);
    renderJob(job);
    say('updated ' + new Date().toLocaleTimeString());
    body.dataset.generation = gen;
    body.dataset.loaded = 'true';
  } catch (e) {
    if (gen === generation) say('error: ' + e.message);
  }
}

async function act(id, action) {
  generation++;
  try {
    await api('/api/jobs/' + id + '/' + action, {method: 'POST', headers: {'X-CSRF-Token': csrf}});
    say('job ' + id + ': ' + action + ' done');
  } catch (e) {
    say('job ' + id + ': ' + action + ' refused: ' + e.message);
  }
  await refresh();
}

let timer = null;

// Auto-refresh runs at the chosen period unless paused or rows are picked.
function schedule() {
  clearTimeout(timer);
  const period = Number(document.getElementById('refresh').value);
  const on = period > 0 && selected.size === 0;
  body.dataset.autoRefresh = on ? 'on' : 'off';
  if (on) timer = setTimeout(() => refresh().then(schedule), period * 1000);
}

function showSelection() {
  document.getElementById('selection').hidden = selected.size === 0;
  document.getElementById('selected-count').textContent = selected.size;
  schedule();
}

function mode() {
  if (body.dataset.readOnly === 'true') return 'read-only';
  return role === 'viewer' ? 'viewer' : '';
}

document.getElementById('mode').textContent = mode();
if (hidePayloads && !canAct) document.querySelector('#filters [name=payload]').disabled = true;
document.getElementById('filters').addEventListener('submit', ev => {
  ev.preventDefault();
  const form = new FormData(ev.target);
  const changes = {};
  for (const f of FILTERS) changes[f] = form.get(f);
  const hash = viewHash(Object.assign(changes, {job: view.get('job')}));
  if (hash === location.hash) refresh(); else location.hash = hash;
});
document.getElementById('clear-filters').addEventListener('click', ev => {
  ev.preventDefault();
  location.hash = viewHash(Object.fromEntries(FILTERS.map(f => [f, null])));
});
document.getElementById('job-show-payload').addEventListener('click', () => {
  showPayloadOf = view.get('job');
  refresh();
});
document.getElementById('clear-selection').addEventListener('click', () => {
  selected.clear();
  document.querySelectorAll('#jobs input[type=checkbox]').forEach(b => { b.checked = false; });
  showSelection();
});
document.getElementById('refresh').addEventListener('change', schedule);
document.getElementById('chart-range').addEventListener('change', ev => {
  location.hash = viewHash({range: ev.target.value === '1h' ? null : ev.target.value});
});
if (canAct) {
  bulkButtons(document.getElementById('bulk-matching'), false);
  bulkButtons(document.getElementById('bulk-picked'), true);
}
document.getElementById('bulk').hidden = !canAct;
document.getElementById('refresh-now').addEventListener('click', refresh);
window.addEventListener('hashchange', () => {
  if (!readHash()) {
    document.getElementById(location.hash.slice(1))?.scrollIntoView();
    return;
  }
  showPayloadOf = null;
  refresh();
});
readHash();
refresh().then(schedule);
