// Dead letters: the list (GET /delay-queue/api/dead, newest first, a page at a time), one
// letter in full, and redrive (POST /delay-queue/api/dead/redrive) of one, a selection, or
// everything the filter matches, in batches.

import { call } from './api.js';
import { $, h, fill, say, fmtNum, fmtTime, timeCell, localInputMs } from './dom.js';
import { confirmAction } from './confirm.js';
import { usable } from './access.js';

const DEAD = '/delay-queue/api/dead';
const PAGE = 50;           // letters shown at a time
const COUNT_PAGE = 100;    // letters read per request while counting what a filter matches
const BATCH = 100;         // letters per redrive request

let filter = { reason: '', topic: '' };
let cursors = [null];      // the `before` of each page seen: [newest, 2nd page, ...]
let page = 0;
let selected = new Map();  // "p/o" -> {partition, offset}
let shown = [];            // the letters of the page shown
let run = null;            // {stop}: a redrive of many under way
let detailOpener = null;

const key = (d) => `${d.partition}/${d.offset}`;
const ref = (d) => ({ partition: d.partition, offset: d.offset });

export function init() {
  $('dead-filter').addEventListener('submit', (ev) => {
    ev.preventDefault();
    filter = { reason: $('dead-reason').value.trim(), topic: $('dead-topic').value.trim() };
    selected.clear();
    first();
  });
  $('dead-newest').addEventListener('click', first);
  $('dead-older').addEventListener('click', () => go(page + 1));
  $('dead-newer').addEventListener('click', () => go(page - 1));
  $('dead-select-page').addEventListener('change', (ev) => {
    for (const d of shown) {
      if (ev.target.checked) selected.set(key(d), ref(d));
      else selected.delete(key(d));
    }
    render();
  });
  $('dead-redrive-selected').addEventListener('click', redriveSelected);
  $('dead-redrive-all').addEventListener('click', redriveMatching);
  $('dead-stop').addEventListener('click', () => { if (run) run.stop = true; });
  $('dead-detail-close').addEventListener('click', closeDetail);
}

export function refresh() {
  return go(page);
}

function first() {
  cursors = [null];
  return go(0);
}

function query(before, limit) {
  const q = new URLSearchParams({ limit: String(limit) });
  if (before) q.set('before', before);
  if (filter.topic) q.set('topic', filter.topic);
  if (filter.reason) q.set('reason', filter.reason);
  return `${DEAD}?${q}`;
}

async function go(n) {
  const status = $('dead-status');
  try {
    const doc = await call('GET', query(cursors[n], PAGE), { what: 'listing dead letters' });
    const data = doc.data || {};
    shown = data.dead || [];
    page = n;
    cursors.length = n + 1;
    if (data.before) cursors.push(data.before);
    render();
    const matching = describe() ? ` ${describe()}` : '';
    if (shown.length) say(status, `Page ${page + 1}: ${shown.length} letter${shown.length === 1 ? '' : 's'}${matching}.`);
    else if (data.before) say(status, `None${matching} on this page (a page looks at a limited number of letters); older pages may hold some.`);
    else say(status, `No dead letters${matching}${page ? ' on this page' : ''}.`);
  } catch (e) {
    say(status, e.message, 'error');
  }
}

function describe() {
  const parts = [];
  if (filter.reason) parts.push(`reason starting “${filter.reason}”`);
  if (filter.topic) parts.push(`topic “${filter.topic}”`);
  return parts.length ? 'matching ' + parts.join(' and ') : '';
}

function render() {
  const busy = !!run;
  fill($('dead-table').tBodies[0], shown.map((d) => {
    const k = key(d);
    const box = h('input', { type: 'checkbox', 'aria-label': `Select dead letter ${k}`,
      'data-testid': `dead-select-${d.partition}-${d.offset}`, checked: selected.has(k),
      onchange: (ev) => {
        if (ev.target.checked) selected.set(k, ref(d));
        else selected.delete(k);
        updateButtons();
      } });
    return h('tr', { 'data-key': k, 'data-testid': `dead-${d.partition}-${d.offset}` },
      h('td', {}, box),
      h('td', {}, timeCell(d.dead_ms)),
      h('td', { class: 'mono' }, k),
      h('td', { class: 'mono', 'data-testid': 'dead-job' }, d.job_id ?? '–'),
      h('td', { 'data-testid': 'dead-topic' }, d.topic ?? '–'),
      h('td', { 'data-testid': 'dead-reason' }, d.reason ?? ''),
      h('td', { class: 'num' }, d.attempts ?? '–'),
      h('td', { class: 'preview' }, d.body_preview ?? ''),
      h('td', { 'data-testid': 'dead-redriven', 'data-value': d.redriven ? 'yes' : 'no' }, d.redriven ? 'yes' : 'no'),
      h('td', { class: 'actions' },
        h('button', { type: 'button', 'data-testid': `dead-view-${d.partition}-${d.offset}`,
          'aria-label': `View dead letter ${k}`, onclick: (ev) => view(d, ev.target) }, 'View'),
        usable(h('button', { type: 'button', 'data-testid': `dead-redrive-${d.partition}-${d.offset}`,
          'aria-label': `Redrive dead letter ${k}`, onclick: () => redriveOne(d) }, 'Redrive'),
        !busy && !d.redriven)));
  }));
  const all = $('dead-select-page');
  all.checked = shown.length > 0 && shown.every((d) => selected.has(key(d)));
  $('dead-older').disabled = page + 1 >= cursors.length;
  $('dead-newer').disabled = page === 0;
  updateButtons();
}

function updateButtons() {
  const busy = !!run;
  const b = $('dead-redrive-selected');
  usable(b, !busy && selected.size > 0);
  b.textContent = selected.size ? `Redrive selected (${selected.size})` : 'Redrive selected';
  usable($('dead-redrive-all'), !busy);
}

async function view(d, opener) {
  const status = $('dead-status');
  try {
    const doc = await call('GET', `${DEAD}/${d.partition}/${d.offset}`, { what: `reading dead letter ${key(d)}` });
    const x = doc.data || {};
    const item = (name, value, testid) => [h('dt', {}, name),
      h('dd', { 'data-testid': testid ? `dead-detail-${testid}` : null }, value)];
    fill($('dead-detail-fields'),
      item('Partition / offset', key(x.partition === undefined ? d : x)),
      item('Job id', x.job_id ?? '–', 'job'),
      item('Topic', x.topic ?? '–', 'topic'),
      item('Reason', x.reason ?? '', 'reason'),
      item('Dead since', timeCell(x.dead_ms)),
      item('Attempts', x.attempts ?? '–'),
      item('Came from', x.source ?? '–', 'source'),
      item('Key', x.key ?? '–'),
      item('Redriven', x.redriven ? 'yes' : 'no', 'redriven'));
    $('dead-detail-headers').textContent = JSON.stringify(x.headers || {}, null, 2);
    $('dead-detail-body').textContent = x.body ?? '';
    $('dead-detail-redrive').onclick = () => redriveOne(x.partition === undefined ? d : x);
    usable($('dead-detail-redrive'), !run);
    $('dead-detail').hidden = false;
    detailOpener = opener;
    $('dead-detail').focus();
  } catch (e) {
    say(status, e.message, 'error');
  }
}

function closeDetail() {
  $('dead-detail').hidden = true;
  if (detailOpener && detailOpener.isConnected) detailOpener.focus();
}

function deliverAt() {
  const at = localInputMs($('dead-at'));
  return at === null ? '' : ` due at ${fmtTime(at)}`;
}

function redriveBody(refs) {
  const body = { dead: refs };
  const at = localInputMs($('dead-at'));
  if (at !== null) body.deliver_at_ms = at;
  return body;
}

async function redriveOne(d) {
  const what = `dead letter ${key(d)}` + (d.job_id ? ` (job ${d.job_id})` : '') +
    (d.topic ? ` to topic ${d.topic}` : '');
  if (!(await confirmAction(`Redrive ${what}${deliverAt()}?`, 'Redrive'))) return;
  await redrive([ref(d)], `Redriving ${key(d)}`);
}

async function redriveSelected() {
  const refs = [...selected.values()];
  if (!refs.length) return;
  if (!(await confirmAction(`Redrive the ${fmtNum(refs.length)} selected dead letter` +
      `${refs.length === 1 ? '' : 's'}${deliverAt()}?`, 'Redrive'))) return;
  await redrive(refs, 'Redriving the selection');
}

// Pages through the list with the filter: the letters not redriven yet, and how many were.
async function matching(progress) {
  const refs = [];
  let before = null, already = 0;
  do {
    const doc = await call('GET', query(before, COUNT_PAGE), { what: 'counting dead letters', quiet: true });
    const data = doc.data || {};
    for (const d of data.dead || []) {
      if (d.redriven) already++;
      else refs.push(ref(d));
    }
    before = data.before;
    progress(refs.length, already);
  } while (before && !run.stop);
  return { refs, already };
}

async function redriveMatching() {
  const result = $('dead-result');
  run = { stop: false };
  updateButtons();
  showProgress('Counting', null, 'counting…');
  let found;
  try {
    found = await matching((n, already) => showProgress('Counting', null,
      `${fmtNum(n)} to redrive so far` + (already ? `, ${fmtNum(already)} already redriven` : '')));
  } catch (e) {
    say(result, e.message, 'error');
    return finish();
  }
  if (run.stop) {
    say(result, 'Stopped while counting; nothing was redriven.');
    return finish();
  }
  const { refs, already } = found;
  const scope = describe() || 'in the dead-letter topic';
  const left = already ? ` (${fmtNum(already)} already redriven ${already === 1 ? 'is' : 'are'} left out)` : '';
  if (!refs.length) {
    say(result, `Nothing to redrive: no dead letter ${scope} waits for it${left}.`);
    return finish();
  }
  $('dead-progress-box').hidden = true;
  const ok = await confirmAction(`Redrive ${fmtNum(refs.length)} dead letter${refs.length === 1 ? '' : 's'} ` +
    `${scope}${deliverAt()}${left}? They go out in batches of ${BATCH}.`, `Redrive ${fmtNum(refs.length)}`);
  finish(false);
  if (ok) await redrive(refs, `Redriving ${fmtNum(refs.length)}`);
}

function showProgress(label, fraction, text) {
  $('dead-progress-box').hidden = false;
  $('dead-progress-label').textContent = label;
  const bar = $('dead-progress');
  if (fraction === null) bar.removeAttribute('value');
  else {
    bar.max = 1;
    bar.value = fraction;
  }
  $('dead-progress-text').textContent = text;
  $('dead-stop').hidden = false;
}

// The end of a run; the progress bar stays with its last count unless hideProgress.
function finish(hideProgress = true) {
  run = null;
  $('dead-stop').hidden = true;
  if (hideProgress) $('dead-progress-box').hidden = true;
  updateButtons();
}

// Redrives refs in batches, with the progress bar; then says what came of it.
async function redrive(refs, label) {
  const result = $('dead-result');
  run = { stop: false };
  updateButtons();
  let done = 0, redriven = 0;
  const skipped = [];
  let failure = null;
  showProgress(label, 0, `0 of ${fmtNum(refs.length)}`);
  for (let i = 0; i < refs.length && !run.stop; i += BATCH) {
    const batch = refs.slice(i, i + BATCH);
    try {
      const doc = await call('POST', `${DEAD}/redrive`, { body: redriveBody(batch), need: 'write',
        what: 'redriving dead letters' });
      redriven += (doc.data && doc.data.redriven) || 0;
      skipped.push(...((doc.data && doc.data.skipped) || []));
    } catch (e) {
      failure = e;
      break;
    }
    done += batch.length;
    showProgress(label, done / refs.length, `${fmtNum(done)} of ${fmtNum(refs.length)}`);
  }
  const stopped = run.stop && done < refs.length;
  let text = `Redriven ${fmtNum(redriven)} of ${fmtNum(refs.length)}.`;
  if (skipped.length) {
    text += ` Skipped ${fmtNum(skipped.length)}: ` + skipped.slice(0, 10)
      .map((s) => `${s.partition}/${s.offset} ${s.why}`).join('; ') + (skipped.length > 10 ? '; …' : '') + '.';
  }
  if (stopped) text += ` Stopped after ${fmtNum(done)}.`;
  if (failure) text = (done ? text + ' Then: ' : '') + failure.message;
  say(result, text, failure ? 'error' : 'ok');
  $('dead-result').dataset.redriven = String(redriven);
  for (const r of refs.slice(0, done)) selected.delete(`${r.partition}/${r.offset}`);
  finish(false);
  $('dead-detail').hidden = true;
  await go(page);
}
