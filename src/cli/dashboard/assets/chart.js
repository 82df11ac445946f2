// skiplock dashboard: the "Over time" charts, drawn as inline SVG from
// /api/chart (no library, nothing fetched from elsewhere).  One chart of
// counts per bucket (completed, failed attempts, discarded) and one of the
// queue wait (p50, p95).  Each bucket has a transparent column with a
// <title>, so hovering (or a long press) shows its numbers.  Colours come
// from the style sheet's variables, so the dark theme applies.
'use strict';

const SVGNS = 'http://www.w3.org/2000/svg';
const COUNT_SERIES = [['completed', 'completed'], ['failed', 'failed attempts'],
  ['discarded', 'discarded']];
const WAIT_SERIES = [['wait_p50_ms', 'wait p50'], ['wait_p95_ms', 'wait p95']];
const CHART_H = 150, PAD_L = 46, PAD_R = 8, PAD_T = 8, PAD_B = 20;

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function bucketTime(doc, i) {
  return new Date(Date.parse(doc.start) + i * doc.bucket_ms);
}

function clock(d, withDay) {
  const hm = d.toLocaleTimeString([], {hour: '2-digit', minute: '2-digit'});
  return withDay ? d.toLocaleDateString([], {month: 'short', day: 'numeric'}) + ' ' + hm : hm;
}

function waitText(ms) {
  if (ms === null) return '-';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + ' s';
  return duration(ms);
}

// A round maximum for the axis: 1, 2 or 5 times a power of ten.
function niceMax(v) {
  if (v <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  return [1, 2, 5, 10].map(m => m * p).find(m => m >= v);
}

// The points of one series as path segments; a null breaks the line, and
// a point alone is a dot (a zero-length segment with round caps).
function seriesPath(values, x, y) {
  let d = '';
  values.forEach((v, i) => {
    if (v === null) return;
    const at = x(i).toFixed(1) + ' ' + y(v).toFixed(1);
    const joined = i > 0 && values[i - 1] !== null;
    d += joined ? 'L' + at : 'M' + at + (values[i + 1] == null ? 'l0.01 0' : '');
  });
  return d;
}

function lineChart(doc, series, width, fmt, label) {
  const n = doc.completed.length, inner = width - PAD_L - PAD_R;
  const all = series.flatMap(([k]) => doc[k].filter(v => v !== null));
  const max = niceMax(Math.max(0, ...all));
  const x = i => PAD_L + (n > 1 ? i * inner / (n - 1) : 0);
  const y = v => PAD_T + (CHART_H - PAD_T - PAD_B) * (1 - v / max);
  const svg = svgEl('svg', {class: 'chart', role: 'img', 'aria-label': label,
    viewBox: `0 0 ${width} ${CHART_H}`});
  svg.append(svgEl('line', {class: 'axis', x1: PAD_L, x2: width - PAD_R, y1: y(0), y2: y(0)}),
    svgEl('line', {class: 'grid', x1: PAD_L, x2: width - PAD_R, y1: y(max), y2: y(max)}),
    svgEl('text', {x: PAD_L - 4, y: y(max) + 4, 'text-anchor': 'end'}, fmt(max)),
    svgEl('text', {x: PAD_L - 4, y: y(0), 'text-anchor': 'end'}, fmt(0)));
  const withDay = doc.range === '7d';
  svg.append(svgEl('text', {x: PAD_L, y: CHART_H - 4}, clock(bucketTime(doc, 0), withDay)),
    svgEl('text', {x: width - PAD_R, y: CHART_H - 4, 'text-anchor': 'end'}, 'now'));
  for (const [k] of series) {
    const sum = doc[k].reduce((a, v) => a + (v || 0), 0);
    svg.append(svgEl('path', {class: 'series s-' + k, d: seriesPath(doc[k], x, y),
      'data-series': k, 'data-total': sum}));
  }
  const col = n > 1 ? inner / (n - 1) : inner;
  for (let i = 0; i < n; i++) {
    const hit = svgEl('rect', {class: 'hit', x: x(i) - col / 2, y: PAD_T, width: col,
      height: CHART_H - PAD_T - PAD_B, 'data-bucket': i});
    const from = bucketTime(doc, i), to = bucketTime(doc, i + 1);
    hit.append(svgEl('title', {}, clock(from, withDay) + '–' + clock(to, false) + ': ' +
      series.map(([k, name]) => fmt(doc[k][i]) + ' ' + name).join(', ') +
      (series === WAIT_SERIES ? ' (' + doc.claims[i] + ' claims)' : '')));
    svg.append(hit);
  }
  return svg;
}

function legend(series) {
  const p = el('p', null, {class: 'legend'});
  for (const [k, name] of series) {
    const s = el('span', name, {class: 'key s-' + k});
    p.append(s, ' ');
  }
  return p;
}

// The chart's subject and its range, for the heading.
function chartSubject(doc) {
  const who = doc.queue || doc.kind
    ? [doc.queue ? 'queue ' + doc.queue : 'every queue', doc.kind ? 'kind ' + doc.kind : 'every kind']
      .join(', ')
    : 'every queue and kind';
  return who + ', last ' + doc.range + ', ' + duration(doc.bucket_ms) + ' per point';
}

let lastChart = null;

function renderChart(doc) {
  lastChart = doc || lastChart;
  if (!lastChart) return;
  doc = lastChart;
  const box = document.getElementById('charts');
  // Drawn for the box's width (so text keeps its size), scaled by CSS if
  // the box changes before the next refresh.
  const width = box.clientWidth > 0 ? Math.max(240, Math.min(900, box.clientWidth - 4)) : 900;
  const counts = lineChart(doc, COUNT_SERIES, width, v => v === null ? '-' : String(v),
    'jobs per ' + duration(doc.bucket_ms));
  counts.id = 'chart-counts';
  const waits = lineChart(doc, WAIT_SERIES, width, waitText, 'queue wait');
  waits.id = 'chart-wait';
  document.getElementById('chart-subject').textContent = chartSubject(doc);
  box.replaceChildren(el('h3', 'Jobs per point'), legend(COUNT_SERIES), counts,
    el('h3', 'Queue wait (run_at to claim)'), legend(WAIT_SERIES), waits);
}

window.addEventListener('resize', () => renderChart(null));
