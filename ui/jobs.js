// Jobs: look one up by id (get), remove it, reschedule it.

import { call } from './api.js';
import { $, h, fill, say, fmtDuration, timeCell, localInputMs } from './dom.js';
import { confirmAction } from './confirm.js';
import { usable } from './access.js';

const JOBS = '/delay-queue/api/jobs';
let current = null;   // the id shown

export function init() {
  $('job-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const id = $('job-id').value.trim();
    const target = `#jobs/${encodeURIComponent(id)}`;
    if (!id) return;
    if (location.hash === target) lookup(id);   // the same id again: no hashchange
    else location.hash = target;
  });
  $('job-remove').addEventListener('click', remove);
  $('reschedule-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    reschedule();
  });
}

// Called with the part of the hash after "#jobs/": the id to show, or "".
export function route(arg) {
  if (!arg) return;
  $('job-id').value = arg;
  lookup(arg);
}

function field(name, value, testid) {
  return [h('dt', {}, name), h('dd', { 'data-testid': testid ? `job-${testid}` : null }, value)];
}

function attempts(d) {
  if (d.callback && typeof d.callback.attempts === 'number') return d.callback.attempts;
  if (d.pull && typeof d.pull.attempt === 'number') return d.pull.attempt;
  return typeof d.attempts === 'number' ? d.attempts : null;
}

function show(d) {
  const now = Date.now();
  const state = d.state + (d.pull && d.pull.state && d.pull.state !== d.state ? ` (${d.pull.state})` : '');
  const a = attempts(d);
  const parts = [
    field('Id', d.id, 'id'),
    field('State', h('span', { class: `state-${d.state}`, 'data-value': d.state }, state), 'state'),
    field(d.callback ? 'Topic / callback' : 'Topic',
      d.callback && d.callback.url ? `${d.topic || '–'} / ${d.callback.url}` : d.topic || '–', 'topic'),
    field('Due', timeCell(d.exec_time_ms, now), 'due'),
    field('Delay', `${fmtDuration(d.delay_ms)} (${d.delay_ms} ms)`),
    field('Created', timeCell(d.created_ms, now)),
    field(d.state === 'cancelled' ? 'Removed / finished' : 'Delivered', timeCell(d.delivered_ms, now)),
    field('Attempts', a === null ? '–' : String(a), 'attempts'),
    field('Key', d.key === null || d.key === undefined ? '–' : d.key),
    field('Headers', d.headers && Object.keys(d.headers).length ? JSON.stringify(d.headers) : '–'),
  ];
  if (d.error) parts.push(field('Error', d.error, 'error'));
  if (d.callback) {
    const c = d.callback;
    if (c.last_status || c.last_error) parts.push(field('Last call', `${c.last_status || ''} ${c.last_error || ''}`.trim()));
    if (c.next_attempt_ms) parts.push(field('Next attempt', timeCell(c.next_attempt_ms, now)));
  }
  if (d.pull && d.pull.reserved_until_ms) parts.push(field('Reserved until', timeCell(d.pull.reserved_until_ms, now)));
  fill($('job-fields'), parts);
  $('job-body').textContent = d.body === null || d.body === undefined ? '' : String(d.body);
  const pending = d.state === 'pending';
  usable($('job-remove'), ['pending', 'ready', 'reserved'].includes(d.state));
  usable($('job-reschedule'), pending);
  $('job-box').hidden = false;
}

async function lookup(id) {
  current = id;
  const status = $('job-status');
  say(status, `Looking up ${id}…`);
  try {
    const doc = await call('GET', `${JOBS}/get?job_id=${encodeURIComponent(id)}`,
      { what: `getting job ${id}` });
    if (current !== id) return;
    if (!doc.data) {
      $('job-box').hidden = true;
      say(status, `No job ${id}: unknown, or its record expired.`, 'error');
      return;
    }
    show(doc.data);
    say(status, '');
  } catch (e) {
    say(status, e.message, 'error');
  }
}

async function remove() {
  const id = current;
  if (!id || !(await confirmAction(`Remove job ${id}? It will not be delivered.`, 'Remove'))) return;
  const status = $('job-status');
  try {
    const doc = await call('POST', `${JOBS}/remove`, { body: { job_id: id }, need: 'write',
      what: `removing job ${id}` });
    await lookup(id);
    say(status, `Removed ${id}: ${doc.message}.`, 'ok');
  } catch (e) {
    say(status, e.message, 'error');
  }
}

async function reschedule() {
  const id = current;
  const status = $('job-status');
  const secs = $('resched-delay').value.trim();
  const at = localInputMs($('resched-at'));
  if (!id) return;
  if ((secs === '') === (at === null)) {
    say(status, 'Give either a delay in seconds or a due time, not both.', 'error');
    return;
  }
  const body = { job_id: id };
  if (at !== null) body.deliver_at_ms = at;
  else body.delay_ms = Math.round(Number(secs) * 1000);
  if (!Number.isFinite(body.delay_ms ?? body.deliver_at_ms) || (body.delay_ms ?? 0) < 0) {
    say(status, 'The delay must be a number of seconds, 0 or more.', 'error');
    return;
  }
  try {
    const doc = await call('POST', `${JOBS}/reschedule`, { body, need: 'write',
      what: `rescheduling job ${id}` });
    await lookup(id);
    say(status, `Rescheduled ${id}: due ${new Date(doc.data.exec_time_ms).toISOString()}.`, 'ok');
  } catch (e) {
    say(status, e.message, 'error');
  }
}
