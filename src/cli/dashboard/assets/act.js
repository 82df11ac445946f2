// skiplock dashboard: the operator's fleet-wide actions.  Bulk retry,
// cancel or discard of every job the list's filter matches (or of the
// picked rows): the count first, a dialog that states it and the filter,
// then the POST with the count's mark, whose answer (matched, changed,
// skipped, newer jobs left alone) is shown.  Pause
// and resume of a queue or a kind, breakers, schedules.  Every action is
// written to the action log by the server; the page shows the newest.
// A viewer's page draws none of these buttons (and the server refuses).
'use strict';

async function post(path) {
  generation++;
  return api(path, {method: 'POST', headers: {'X-CSRF-Token': csrf}});
}

// Runs a POST, says how it went, then refreshes the page.
async function operate(what, path, done) {
  try {
    say(what + ': ' + done(await post(path)));
  } catch (e) {
    say(what + ' refused: ' + e.message);
  }
  await refresh();
}

function opButton(text, attrs, onClick) {
  const b = el('button', text, Object.assign({type: 'button'}, attrs));
  b.addEventListener('click', onClick);
  return b;
}

// ---- the confirmation dialog ----

// Asks; with every, "yes" stays disabled until the box saying "every job"
// is ticked: acting on every job is asked for by name.
function confirmAction(text, every) {
  const dlg = document.getElementById('confirm');
  const box = document.getElementById('confirm-all');
  document.getElementById('confirm-text').textContent = text;
  document.getElementById('confirm-every').hidden = !every;
  box.checked = false;
  document.getElementById('confirm-yes').disabled = !!every;
  return new Promise(resolve => {
    dlg.addEventListener('close', () => resolve(dlg.returnValue === 'yes'), {once: true});
    dlg.returnValue = '';
    dlg.showModal();
  });
}

for (const answer of ['yes', 'no'])
  document.getElementById('confirm-' + answer).addEventListener('click', () =>
    document.getElementById('confirm').close(answer));
document.getElementById('confirm-all').addEventListener('change', e => {
  document.getElementById('confirm-yes').disabled = !e.target.checked;
});

// ---- bulk actions ----

function filterQuery() {
  const q = new URLSearchParams();
  for (const f of FILTERS) if (view.get(f)) q.set(f, view.get(f));
  return q;
}

function filterText(q) {
  return [...q].map(([k, v]) => k + '=' + v).join(', ') || 'no filter';
}

const DONE = {retry: 'retried', cancel: 'cancelled', discard: 'discarded'};

// The count first; the action then takes its mark and count, so it acts
// on at most the jobs the dialog stated (none enqueued since).  A filter
// that matches every job says so, and needs the "every job" box.
async function bulk(action, picked) {
  const q = picked ? new URLSearchParams({ids: [...selected].join(',')}) : filterQuery();
  let c;
  try {
    c = picked ? {count: selected.size} : await api('/api/jobs/count?' + q);
  } catch (e) {
    say('count refused: ' + e.message);
    return;
  }
  if (!picked && c.count === 0) {
    say(action + ': no job matches ' + filterText(q));
    return;
  }
  const what = picked ? c.count + ' picked job(s)'
    : c.all ? 'EVERY job (' + c.count + '): the filter names no subset (' + c.why + ')'
    : c.count + ' job(s) matching ' + filterText(q);
  if (!await confirmAction(action + ' ' + what + '? Jobs a worker finishes first are skipped.',
    !picked && c.all))
    return;
  if (picked) selected.clear();
  else {
    q.set('mark', c.mark);
    q.set('expect', c.count);
    if (c.all) q.set('all', '1');
  }
  await operate(action, '/api/bulk/' + action + '?' + q, r =>
    r.matched + ' matched, ' + r.changed + ' ' + DONE[action] + ', ' + r.skipped + ' skipped' +
    (r.newer ? '; ' + r.newer + ' newer job(s) left alone' : ''));
  showSelection();
}

function bulkButtons(box, picked) {
  box.replaceChildren(...['retry', 'cancel', 'discard'].map(a =>
    opButton(a + (picked ? ' picked' : ' all matching'), {'data-bulk': a + (picked ? '-picked' : '')},
      () => bulk(a, picked))));
}

// ---- pauses ----

let pauses = [];

function pausedBy(queue, kind) {
  return pauses.find(p => (p.queue === queue && p.kind === '*') || (p.queue === '*' && p.kind === kind));
}

function pauseButton(on, what, name, paused) {
  const verb = paused ? 'resume' : 'pause';
  return opButton(verb + ' ' + what, {'data-pause': verb + '-' + what}, () =>
    operate(verb + ' ' + what + ' ' + name, '/api/' + verb + '?' + new URLSearchParams({[what]: name}),
      r => r.changed ? 'done' : 'it was so already'));
}

// The state and buttons of one queue row: paused (by queue or by kind) or not.
function pauseCells(q) {
  const p = pausedBy(q.queue, q.kind);
  const state = el('td', p ? 'paused' : 'on', {class: p ? 'paused' : '', 'data-field': 'paused',
    title: p ? 'paused ' + p.paused_at + ' by ' + p.paused_by + ' (' + p.role + ')' : ''});
  const acts = el('td', null, {class: 'actions'});
  if (canAct) {
    const byQueue = pauses.some(x => x.queue === q.queue && x.kind === '*');
    const byKind = pauses.some(x => x.queue === '*' && x.kind === q.kind);
    acts.append(pauseButton(true, 'queue', q.queue, byQueue), ' ',
      pauseButton(true, 'kind', q.kind, byKind));
  }
  return [state, acts];
}

function pauseProblems() {
  return pauses.map(p => {
    const what = p.kind === '*' ? 'queue ' + p.queue : 'kind ' + p.kind;
    const hash = '#' + (p.kind === '*' ? 'queue=' + encodeURIComponent(p.queue)
      : 'kind=' + encodeURIComponent(p.kind)) + '&state=available';
    return problem('paused', what + ' is paused (since ' + p.paused_at + ', by ' + p.paused_by +
      '): its jobs wait', hash);
  });
}

// ---- breakers and schedules ----

function breakerCell(b) {
  const td = el('td', null, {class: 'actions'});
  if (canAct) {
    const open = b.state !== 'open';
    td.append(opButton(open ? 'open' : 'close', {'data-breaker': open ? 'open' : 'close'}, () =>
      operate('breaker ' + b.kind, '/api/breakers/' + (open ? 'open' : 'close') + '?' +
        new URLSearchParams({kind: b.kind}), r => r.state)));
  }
  return td;
}

function scheduleCell(s) {
  const td = el('td', null, {class: 'actions'});
  if (!canAct) return td;
  const q = '?' + new URLSearchParams({name: s.name});
  const verb = s.enabled ? 'pause' : 'resume';
  td.append(opButton(verb, {'data-schedule': verb}, () =>
    operate(verb + ' schedule ' + s.name, '/api/schedules/' + verb + q,
      r => r.changed ? 'done' : 'it was so already')), ' ',
  opButton('run now', {'data-schedule': 'run'}, () =>
    operate('run schedule ' + s.name, '/api/schedules/run' + q, r => 'job ' + r.job_id)));
  return td;
}

// ---- the action log ----

function renderActions(list) {
  fill('actions', list.map(a => {
    const tr = row([a.at, a.actor, a.role, a.db_user === null ? '-' : a.db_user, a.action,
      el('td', a.target === null ? '-' : JSON.stringify(a.target), {class: 'target'}),
      el('td', a.matched, {class: 'num', 'data-field': 'matched'}),
      el('td', a.changed, {class: 'num', 'data-field': 'changed'})]);
    tr.dataset.action = a.action;
    tr.dataset.id = a.id;
    return tr;
  }));
}
