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

async function loadQueues() {
  const qs = await api('/api/queues');
  const total = Object.fromEntries(STATES.map(s => [s, 0]));
  fill('queues', qs.map(q => {
    STATES.forEach(s => { total[s] += q[s]; });
    return row([q.queue, q.kind, ...STATES.map(s => count(q[s], s, q.queue, q.kind))]);
  }));
  const foot = row([el('td', 'total', {colspan: 2}), ...STATES.map(s => count(total[s], s))]);
  foot.id = 'totals';
  fill('queues', [foot], 'tfoot');
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

async function loadJobs() {
  const q = new URLSearchParams(new FormData(document.getElementById('filters')));
  for (const [k, v] of [...q]) if (!v) q.delete(k);
  fill('jobs', (await api('/api/jobs?' + q)).map(jobRow));
}

async function loadSchedules() {
  fill('schedules', (await api('/api/schedules')).map(s =>
    row([s.name, s.expression, s.zone, s.kind, s.queue, s.enabled ? 'yes' : 'paused',
         s.last_fire || '-', s.next_fire || '-'])));
}

async function loadLeases() {
  fill('leases', (await api('/api/leases')).map(l =>
    row([l.name, l.owner, el('td', l.fencing, {class: 'num'}), l.live ? 'yes' : 'expired',
         l.expires_at])));
}

const JOB_FIELDS = ['queue', 'kind', 'state', 'priority', 'attempt', 'max_attempts', 'fencing',
  'run_at', 'created_at', 'attempted_at', 'finished_at', 'lease_owner', 'lease_expires_at',
  'unique_key', 'result'];

async function loadJob() {
  const m = /^#job\/(\d+)$/.exec(location.hash);
  const box = document.getElementById('job');
  box.hidden = !m;
  if (!m) return;
  const j = await api('/api/jobs/' + m[1]);
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

async function refresh() {
  try {
    await Promise.all([loadQueues(), loadJobs(), loadSchedules(), loadLeases(), loadJob()]);
    say('updated ' + new Date().toLocaleTimeString());
    document.body.dataset.loaded = 'true';
  } catch (e) {
    say('error: ' + e.message);
  }
}

async function act(id, action) {
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
