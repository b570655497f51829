// Overview: health, what is pending (GET /delay-queue/api/stats), and rates and lateness
// from GET /metrics, refreshed every 2 s.

import { call, text, curlFor, ApiError } from './api.js';
import { $, h, fill, fmtNum, fmtDuration, fmtRate, fmtTime } from './dom.js';
import { parse, total, buckets, bucketsSince, quantile, Rate } from './prom.js';

const STATS = '/delay-queue/api/stats';
const DUE_ORDER = ['1m', '10m', '1h', '1d', 'later'];
const LATENESS = 'delayq_delivery_lateness_ms';
const SVG = 'http://www.w3.org/2000/svg';
const WINDOW_MS = 60e3;

// Each sparkline: its counters (summed) and what it is called.
const SERIES = {
  adds: { names: ['delayq_jobs_added_total'], label: 'adds per second' },
  deliveries: { names: ['delayq_jobs_delivered_total'], label: 'deliveries per second' },
  dead: { names: ['delayq_dead_letters_total', 'delayq_pull_dead_letters_total'],
          label: 'dead letters per second' },
  errors: { names: ['delayq_redis_errors_total', 'delayq_kafka_errors_total'],
            label: 'Redis and Kafka errors per second' },
};

const rates = Object.fromEntries(Object.keys(SERIES).map((k) => [k, new Rate(90)]));
let lateHistory = [];        // [{t, rows}] of the lateness histogram, the last minute or so

export function init() {
  $('ov-sources').textContent = [
    curlFor('GET', STATS) + '    # pending, by level, by due, overdue, pull topics',
    curlFor('GET', '/readyz') + '    # Redis and Kafka answer?',
    curlFor('GET', '/metrics') + '    # counters: ' +
      Object.values(SERIES).flatMap((s) => s.names).join(', ') + ', ' + LATENESS,
  ].join('\n');
  for (const [key, s] of Object.entries(SERIES)) drawSpark(key, s);
}

// One refresh of everything the overview shows.
export async function refresh() {
  const [stats, ready, metrics] = await Promise.allSettled([
    call('GET', STATS, { quiet: true, what: 'the pending view (/stats)' }),
    readiness(),
    text('/metrics', { what: '/metrics', notify: false }),
  ]);
  if (stats.status === 'fulfilled') showStats(stats.value.data || {});
  showHealth(ready.value, stats);
  showPolicy(stats.status === 'fulfilled' ? stats.value.data : null, ready.value);
  if (metrics.status === 'fulfilled') showMetrics(metrics.value);
  else $('rates-note').textContent = metrics.reason.message;
  // A failed /stats leaves the last counts shown, and says so.
  $('ov-updated').textContent = `Last refresh ${fmtTime(Date.now())}.` +
    (stats.status === 'fulfilled' ? '' : ` The counts are not current: ${stats.reason.message}`);
  $('ov-updated').className = stats.status === 'fulfilled' ? '' : 'bad';
}

// /readyz: {ok, message}; ok null when delayqd did not answer.
async function readiness() {
  try {
    const doc = await call('GET', '/readyz', { quiet: true, need: 'none', what: '/readyz' });
    return { ok: true, message: doc.message };
  } catch (e) {
    if (e instanceof ApiError && e.doc) return { ok: false, message: e.doc.message || '' };
    return { ok: null, message: e.message };
  }
}

function big(id, value, shown = fmtNum(value)) {
  const el = $(id);
  el.textContent = shown;
  el.dataset.value = value === null || value === undefined ? '' : String(value);
}

function countRows(tbody, entries, testPrefix) {
  fill(tbody, entries.map(([k, v]) => h('tr', { 'data-key': k },
    h('th', { scope: 'row' }, k),
    h('td', { class: 'num', 'data-testid': `${testPrefix}-${k}`, 'data-value': v }, fmtNum(v)))));
}

function showStats(d) {
  big('ov-pending', d.pending);
  big('ov-overdue', d.overdue_ms, d.overdue_ms === undefined ? '–' : fmtDuration(d.overdue_ms));
  $('ov-overdue').classList.toggle('bad', d.overdue_ms >= 5000);
  big('ov-callbacks', d.callbacks ? d.callbacks.waiting_for_retry : null);
  big('ov-schedules', d.schedules ? d.schedules.count : null);
  countRows($('ov-by-level').tBodies[0], Object.entries(d.by_level || {}), 'level');
  const due = d.by_due || {};
  countRows($('ov-by-due').tBodies[0],
    [...DUE_ORDER.filter((k) => k in due), ...Object.keys(due).filter((k) => !DUE_ORDER.includes(k))]
      .map((k) => [k, due[k]]), 'due');
  const pull = Object.entries(d.pull || {});
  $('ov-pull-box').hidden = pull.length === 0;
  fill($('ov-pull').tBodies[0], pull.map(([topic, c]) => h('tr', { 'data-key': topic },
    h('th', { scope: 'row' }, topic),
    h('td', { class: 'num', 'data-value': c.ready }, fmtNum(c.ready)),
    h('td', { class: 'num', 'data-value': c.reserved }, fmtNum(c.reserved)))));
}

function setHealth(which, state, why, kind) {
  const card = $(`health-${which}`);
  card.className = `card health ${kind}`;
  card.dataset.state = kind;
  $(`health-${which}-state`).textContent = state;
  $(`health-${which}-why`).textContent = why || '';
}

// Redis and Kafka from /readyz, which names the first failing one, and from /stats, which
// answers only when Kafka does.
function showHealth(ready, stats) {
  const statsOk = stats.status === 'fulfilled';
  const statsWhy = statsOk ? '' : stats.reason.message;
  const kafkaFromStats = () => (statsOk ? ['answers', '', 'ok'] :
    stats.reason.status === 503 ? ['not answering', statsWhy, 'bad'] : ['unknown', statsWhy, 'unknown']);
  let redis, kafka;
  if (ready.ok === true) {
    redis = ['answers', '', 'ok'];
    kafka = ['answers', '', 'ok'];
  } else if (ready.ok === null) {
    redis = kafka = ['unknown', ready.message, 'unknown'];
  } else {
    const why = ready.message.replace(/^not ready:?\s*/, '');
    if (/^starting/.test(why)) {
      redis = kafka = ['starting', why, 'unknown'];
    } else if (/^kafka/i.test(why)) {
      redis = ['answers', '', 'ok'];
      kafka = ['not answering', why, 'bad'];
    } else if (why) {
      redis = ['not answering', why, 'bad'];
      kafka = kafkaFromStats();
    } else {   // a token is set: /readyz gives no reason (delayqd's log has it)
      kafka = kafkaFromStats();
      redis = kafka[2] === 'ok' ? ['not answering', 'delayqd is not ready and Kafka answers; ' +
        'its log says why', 'bad'] : ['unknown', 'delayqd is not ready; its log says why', 'unknown'];
    }
  }
  setHealth('redis', ...redis);
  setHealth('kafka', ...kafka);
}

// The warning when Redis may evict job records: /stats' redis (evicts, maxmemory_policy), or
// /readyz's warning.
function showPolicy(data, ready) {
  const r = data && typeof data.redis === 'object' && data.redis ? data.redis : {};
  let policy = typeof r.maxmemory_policy === 'string' ? r.maxmemory_policy : null;
  let evicts = typeof r.evicts === 'boolean' ? r.evicts : policy !== null ? policy !== 'noeviction' : null;
  if (evicts === null && ready && ready.ok) {
    const m = /maxmemory-policy is ([^\s:;,]+)/.exec(ready.message || '');
    policy = m ? m[1] : null;
    evicts = policy !== null && policy !== 'noeviction';
  }
  const box = $('maxmemory-warning');
  box.hidden = !evicts;
  if (evicts) {
    box.textContent = `Redis maxmemory-policy is ${policy ? `“${policy}”` : 'one that evicts'}, not noeviction: ` +
      'at maxmemory Redis drops job records, and those jobs are never delivered. Set ' +
      'maxmemory-policy to noeviction.';
  }
}

function showMetrics(body) {
  const samples = parse(body);
  const t = Date.now();
  for (const [key, s] of Object.entries(SERIES)) {
    rates[key].push(t, total(samples, ...s.names));
    $(`rate-${key}`).textContent = fmtRate(rates[key].now());
    drawSpark(key, s);
  }
  $('rates-note').textContent = rates.adds.points.length ? '' : 'Rates appear from the second refresh.';
  showLateness(t, buckets(samples, LATENESS));
}

function showLateness(t, rows) {
  const tbody = $('ov-lateness').tBodies[0];
  if (!rows) {
    fill(tbody, h('tr', {}, h('td', { colspan: 3 }, 'no lateness histogram in /metrics')));
    return;
  }
  lateHistory.push({ t, rows });
  lateHistory = lateHistory.filter((x) => x.t >= t - WINDOW_MS);
  const past = lateHistory[0];   // the oldest scrape of the last minute
  const recent = past.t < t ? bucketsSince(rows, past.rows) : null;
  const fmtQ = (q) => (q === null ? '–' : (q.above ? '≥ ' : '') + fmtDuration(q.value));
  const cells = (f) => [recent, rows].map((r) => h('td', { class: 'num' }, r ? f(r) : '–'));
  fill(tbody,
    h('tr', {}, h('th', { scope: 'row' }, 'p50'), cells((r) => fmtQ(quantile(0.5, r)))),
    h('tr', {}, h('th', { scope: 'row' }, 'p90'), cells((r) => fmtQ(quantile(0.9, r)))),
    h('tr', {}, h('th', { scope: 'row' }, 'p99'), cells((r) => fmtQ(quantile(0.99, r)))),
    h('tr', {}, h('th', { scope: 'row' }, 'deliveries'), cells((r) => fmtNum(r[r.length - 1].count))));
}

function drawSpark(key, s) {
  const fig = $(`spark-${key}`);
  const pts = rates[key].points;
  const W = 240, H = 48, N = rates[key].keep;
  const max = Math.max(1e-9, ...pts.filter((p) => p !== null));
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('preserveAspectRatio', 'none');
  svg.setAttribute('role', 'img');
  const now = rates[key].now();
  svg.setAttribute('aria-label', `${s.label}, last ${Math.round(pts.length * 2 / 60 * 10) / 10} min: ` +
    `now ${fmtRate(now)}, highest ${pts.length ? fmtRate(max === 1e-9 ? 0 : max) : '–'}`);
  const base = document.createElementNS(SVG, 'line');
  for (const [a, v] of [['x1', 0], ['x2', W], ['y1', H - 1], ['y2', H - 1]]) base.setAttribute(a, v);
  base.setAttribute('class', 'base');
  svg.append(base);
  let run = [];
  const flush = () => {
    if (run.length > 1) {
      const line = document.createElementNS(SVG, 'polyline');
      line.setAttribute('points', run.join(' '));
      svg.append(line);
    }
    run = [];
  };
  pts.forEach((p, i) => {
    if (p === null) return flush();
    const x = (W * (N - pts.length + i)) / (N - 1);
    run.push(`${x.toFixed(1)},${(H - 2 - (H - 4) * (p / max)).toFixed(1)}`);
  });
  flush();
  const old = fig.querySelector('svg');
  if (old) old.replaceWith(svg);
  else fig.prepend(svg);
}
