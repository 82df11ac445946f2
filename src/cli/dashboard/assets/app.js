// skiplock dashboard: reads the JSON endpoints under /api/ and renders the
// tables.  Every value goes in through textContent, never as markup.
'use strict';

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const readOnly = document.body.dataset.readOnly === 'true';
const STATES = ['available', 'running', 'completed', 'discarded', 'cancelled'];

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
  const body = document.querySelector('#' + id + ' ' + (part || 'tbody'));
  body.replaceChildren(...rows);
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({credentials: 'same-origin'}, opts));
  const body = await r.json().catch(() => ({error: 'HTTP ' + r.status}));
  if (!r.ok) throw new Error(body.error || 'HTTP ' + r.status);
  return body;
}

function say(text) { document.getElementById('status').textContent = text; }

function count(n, state, queue, kind) {
  const attrs = {class: 'num', 'data-state': state};
  if (queue !== undefined) { attrs['data-queue'] = queue; attrs['data-kind'] = kind; }
  return el('td', n, attrs);
}

function renderQueues(qs) {
  const total = Object.fromEntries(STATES.map(s => [s, 0]));
  fill('queues', qs.map(q => {
    STATES.forEach(s => { total[s] += q[s]; });
    return row([q.queue, q.kind, ...STATES.map(s => count(q[s], s, q.queue, q.kind))]);
  }));
  const foot = row([el('td', 'total', {colspan: 2}), ...STATES.map(s => count(total[s], s))]);
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

function jobRow(j) {
  const link = el('a', j.id, {href: '#job/' + j.id});
  const actions = el('td', null, {class: 'actions'});
  if (!readOnly) {
    if (['discarded', 'cancelled', 'available'].includes(j.state))
      actions.appendChild(actionButton(j, 'retry'));
    if (['available', 'running'].includes(j.state))
      actions.appendChild(actionButton(j, 'cancel'));
  }
  const tr = row([el('td').appendChild(link).parentNode, j.queue, j.kind,
    el('td', j.state, {class: 'state-' + j.state, 'data-field': 'state'}),
    j.attempt + '/' + j.max_attempts, j.run_at,
    el('td', j.last_error || '', {class: 'error', title: j.last_error || ''}), actions]);
  tr.dataset.id = j.id;
  return tr;
}

function jobsPath() {
  const q = new URLSearchParams(new FormData(document.getElementById('filters')));
  for (const [k, v] of [...q]) if (!v) q.delete(k);
  return '/api/jobs?' + q;
}

function renderSchedules(list) {
  fill('schedules', list.map(s =>
    row([s.name, s.expression, s.zone, s.kind, s.queue, s.enabled ? 'yes' : 'paused',
         s.last_fire || '-', s.next_fire || '-'])));
}

function renderLeases(list) {
  fill('leases', list.map(l =>
    row([l.name, l.owner, el('td', l.fencing, {class: 'num'}), l.live ? 'yes' : 'expired',
         l.expires_at])));
}

function renderBreakers(list) {
  fill('breakers', list.map(b => {
    const tr = row([b.kind, el('td', b.state, {class: 'state-' + b.state, 'data-field': 'state'}),
      el('td', b.calls + ' / ' + b.failures, {class: 'num'}),
      el('td', b.state === 'half_open' ? b.probes_left : '-', {class: 'num'}),
      b.open_for_ms === null || b.open_for_ms === undefined ? '-'
        : b.open_for_ms < 0 ? 'until closed' : Math.ceil(b.open_for_ms / 1000) + ' s',
      b.changed_at || '-']);
    tr.dataset.kind = b.kind;
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
  'unique_key', 'result'];

// The job of the page's #job/ID hash, or null when there is none.
async function fetchJob() {
  const m = /^#job\/(\d+)$/.exec(location.hash);
  return m ? api('/api/jobs/' + m[1]) : null;
}

function renderJob(j) {
  const box = document.getElementById('job');
  box.hidden = !j;
  if (!j) return;
  document.getElementById('job-id').textContent = j.id;
  const dl = document.getElementById('job-fields');
  dl.replaceChildren();
  for (const f of JOB_FIELDS) {
    let v = j[f];
    if (v === null || v === undefined) continue;
    if (typeof v === 'object') v = JSON.stringify(v);
    dl.append(el('dt', f), el('dd', v, {'data-field': f}));
  }
  document.getElementById('job-payload').textContent = JSON.stringify(j.payload, null, 2);
  document.getElementById('job-errors').replaceChildren(...(j.errors || []).map(e =>
    el('li', 'attempt ' + e.attempt + ' at ' + e.at + ': ' + e.error)));
}

// Every refresh reads all endpoints, then renders them together, so the
// tables on the page always come from one moment.  Only the newest refresh
// renders: an action bumps the generation too, so a refresh that started
// before the action cannot paint its older answers over the newer ones.
let generation = 0;

async function refresh() {
  const gen = ++generation;
  try {
    const [queues, rate, jobs, schedules, leases, breakers, locks, job] = await Promise.all([
      api('/api/queues'), api('/api/throughput'), api(jobsPath()), api('/api/schedules'),
      api('/api/leases'), api('/api/breakers'), api('/api/doctor/locks'), fetchJob()]);
    if (gen !== generation) return;
    renderQueues(queues);
    renderThroughput(rate);
    fill('jobs', jobs.map(jobRow));
    renderSchedules(schedules);
    renderLeases(leases);
    renderBreakers(breakers);
    renderLocks(locks);
    renderJob(job);
    say('updated ' + new Date().toLocaleTimeString());
    document.body.dataset.generation = gen;
    document.body.dataset.loaded = 'true';
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

document.getElementById('mode').textContent = readOnly ? 'read-only' : '';
document.getElementById('filters').addEventListener('submit', ev => {
  ev.preventDefault();
  refresh();
});
window.addEventListener('hashchange', refresh);
refresh();
setInterval(refresh, 5000);
