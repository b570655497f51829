// Schedules: the list (GET /delay-queue/api/schedules, a page at a time), pause, resume,
// delete.

import { call } from './api.js';
import { $, h, say, fmtDuration, timeCell } from './dom.js';
import { confirmAction } from './confirm.js';
import { usable } from './access.js';

const SCHEDULES = '/delay-queue/api/schedules';
const PAGE = 50;
let after = null;        // the cursor of the next page, null at the end
let loading = false;

export function init() {
  $('schedules-reload').addEventListener('click', () => load(true));
  $('schedules-more').addEventListener('click', () => load(false));
}

export function refresh() {
  return load(true);
}

const one = (id) => `${SCHEDULES}/${encodeURIComponent(id)}`;

async function load(reset) {
  if (loading) return;
  loading = true;
  const status = $('schedules-status');
  const tbody = $('schedules-table').tBodies[0];
  try {
    const q = `?limit=${PAGE}` + (!reset && after ? `&after=${encodeURIComponent(after)}` : '');
    const doc = await call('GET', SCHEDULES + q, { what: 'listing schedules' });
    const list = (doc.data && doc.data.schedules) || [];
    if (reset) tbody.replaceChildren();
    for (const s of list) tbody.append(row(s));
    after = doc.data ? doc.data.after : null;
    $('schedules-more').hidden = !after;
    if (!tbody.rows.length) say(status, 'No schedules.');
    else if (reset) say(status, '');
  } catch (e) {
    say(status, e.message, 'error');
  } finally {
    loading = false;
  }
}

function when(s) {
  if (s.cron) return `${s.cron} (${s.timezone || 'UTC'})`;
  if (typeof s.every_ms === 'number') return `every ${fmtDuration(s.every_ms)}`;
  return '–';
}

function row(s) {
  const now = Date.now();
  const t = (name) => `${name}-${s.id}`;
  const pause = usable(h('button', { type: 'button', 'data-testid': t('pause'), hidden: s.paused,
    'aria-label': `Pause schedule ${s.id}`, onclick: () => act(s.id, 'pause') }, 'Pause'));
  const resume = usable(h('button', { type: 'button', 'data-testid': t('resume'), hidden: !s.paused,
    'aria-label': `Resume schedule ${s.id}`, onclick: () => act(s.id, 'resume') }, 'Resume'));
  const del = usable(h('button', { type: 'button', class: 'danger', 'data-testid': t('delete'),
    'aria-label': `Delete schedule ${s.id}`, onclick: () => remove(s.id) }, 'Delete'));
  const target = s.callback && s.callback.url ? `${s.topic || ''} ${s.callback.url}`.trim() : s.topic;
  return h('tr', { 'data-id': s.id, 'data-testid': t('schedule') },
    h('th', { scope: 'row', class: 'mono' }, s.id),
    h('td', {}, when(s)),
    h('td', {}, target || '–'),
    h('td', { 'data-testid': t('state'), 'data-value': s.paused ? 'paused' : 'active',
      class: s.paused ? 'warn' : '' }, s.paused ? 'paused' : 'active'),
    h('td', {}, timeCell(s.next_at_ms, now)),
    h('td', { class: 'num' }, String(s.runs ?? '–')),
    h('td', {}, timeCell(s.last_at_ms, now)),
    h('td', { class: 'actions' }, pause, resume, del));
}

function rowOf(id) {
  return [...$('schedules-table').tBodies[0].rows].find((r) => r.dataset.id === id);
}

async function act(id, verb) {
  const status = $('schedules-status');
  try {
    const doc = await call('POST', `${one(id)}/${verb}`, { need: 'write', what: `${verb === 'pause' ? 'pausing' : 'resuming'} schedule ${id}` });
    const tr = rowOf(id);
    if (tr && doc.data) {
      const fresh = row(doc.data);
      tr.replaceWith(fresh);
      fresh.querySelector(`[data-testid="${verb === 'pause' ? 'resume' : 'pause'}-${CSS.escape(id)}"]`)?.focus();
    }
    say(status, `Schedule ${id}: ${doc.message}.`, 'ok');
  } catch (e) {
    say(status, e.message, 'error');
  }
}

async function remove(id) {
  if (!(await confirmAction(`Delete schedule ${id}? Its pending occurrence is removed too.`, 'Delete'))) return;
  const status = $('schedules-status');
  try {
    const doc = await call('DELETE', one(id), { need: 'write', what: `deleting schedule ${id}` });
    rowOf(id)?.remove();
    say(status, `Schedule ${id}: ${doc.message}.`, 'ok');
  } catch (e) {
    say(status, e.message, 'error');
  }
}
