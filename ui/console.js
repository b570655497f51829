// The operations console served by delayqd at /delay-queue/ui/: views chosen by the URL's
// hash (#overview, #groups, #jobs/<id>, #schedules, #dead), the tab's token (and whether it
// is known to be a read token), the notice line and the log of API calls as curl commands.

import * as api from './api.js';
import { $, h, fmtTime } from './dom.js';
import * as access from './access.js';
import * as overview from './overview.js';
import * as groups from './groups.js';
import * as jobs from './jobs.js';
import * as schedules from './schedules.js';
import * as dead from './dead.js';

const REFRESH_MS = 2000;
const LOG_KEEP = 50;
const TOKEN_WHY = 'Views need the read token (http.read_token) or the write token (http.auth_token); ' +
  'actions need the write token.';
const READ_ONLY_WHY = 'The token in use is a read token: it opens views; actions need the write token ' +
  '(http.auth_token).';

// poll: refreshed every REFRESH_MS while shown; load: refreshed each time it is shown.
const VIEWS = {
  overview: { title: 'Overview', mod: overview, poll: true },
  groups: { title: 'Instances and groups', mod: groups, poll: true },
  jobs: { title: 'Jobs', mod: jobs },
  schedules: { title: 'Schedules', mod: schedules, load: true },
  dead: { title: 'Dead letters', mod: dead, load: true },
};

let current = null;
let askedForToken = false;
const busy = new Set();   // views whose refresh is under way

function notice(text, kind = 'error') {
  const el = $('notice');
  if (!text) {
    el.hidden = true;
    el.replaceChildren();
    return;
  }
  if (!el.hidden && el.dataset.text === text) return;   // the same again: not announced twice
  el.dataset.text = text;
  el.className = `notice ${kind}`;
  el.replaceChildren(h('span', { 'data-testid': 'notice-text' }, text),
    kind === 'error' ? h('button', { type: 'button', class: 'link', onclick: () => askToken() }, 'Give a token') : '',
    h('button', { type: 'button', class: 'link', onclick: () => notice('') }, 'Dismiss'));
  el.hidden = false;
}

function tokenState() {
  $('token-state').textContent = api.getToken() ? 'token set (this tab)' : 'no token';
  $('token-readonly').hidden = !api.readOnly();
  access.applyAll();
}

function askToken(why) {
  const dlg = $('token-dialog');
  if (dlg.open) return;
  $('token-why').textContent = why ||
    (api.readOnly() ? READ_ONLY_WHY : TOKEN_WHY) + ' The token stays in this tab only.';
  $('token-input').value = '';
  dlg.returnValue = '';
  dlg.showModal();
}

function tokenClosed() {
  const v = $('token-dialog').returnValue;
  if (v === 'save' && $('token-input').value.trim()) api.setToken($('token-input').value.trim());
  else if (v === 'clear') api.setToken('');
  else return;
  $('token-input').value = '';
  tokenState();
  notice('');
  refreshAll();
}

function logLine(entry) {
  const list = $('api-log');
  let li = document.getElementById(`log-${entry.id}`);
  if (!li) {
    li = h('li', { id: `log-${entry.id}`, 'data-method': entry.method, 'data-path': entry.path },
      h('code', { class: 'curl' }, entry.curl), ' ', h('span', { class: 'outcome' }, '…'),
      ' ', h('span', { class: 'rel' }, fmtTime(entry.at)));
    list.prepend(li);
    while (list.children.length > LOG_KEEP) list.lastElementChild.remove();
  }
  if (entry.status !== null) {
    const out = li.querySelector('.outcome');
    out.textContent = `→ ${entry.status || 'no answer'} ${entry.outcome}`;
    out.className = `outcome ${entry.status >= 200 && entry.status < 300 ? 'ok' : 'error'}`;
    li.dataset.status = String(entry.status);
  }
}

async function refreshView(name) {
  if (busy.has(name)) return;
  busy.add(name);
  try {
    await VIEWS[name].mod.refresh();
  } finally {
    busy.delete(name);
  }
}

// The overview always (its rates need every scrape), the view shown when it polls.
function tick() {
  if (document.hidden) return;
  refreshView('overview');
  if (current !== 'overview' && VIEWS[current].poll) refreshView(current);
}

function refreshAll() {
  refreshView('overview');
  if (current !== 'overview' && (VIEWS[current].poll || VIEWS[current].load)) refreshView(current);
}

function route() {
  const [name, ...rest] = location.hash.replace(/^#/, '').split('/');
  const view = VIEWS[name] ? name : 'overview';
  let arg = '';
  try {
    arg = decodeURIComponent(rest.join('/'));
  } catch {
    arg = rest.join('/');
  }
  const changed = view !== current;
  current = view;
  for (const key of Object.keys(VIEWS)) {
    $(`view-${key}`).hidden = key !== view;
    const link = $(`nav-${key}`);
    if (key === view) link.setAttribute('aria-current', 'page');
    else link.removeAttribute('aria-current');
  }
  document.title = `${VIEWS[view].title} · delayq console`;
  if (changed && (VIEWS[view].poll || VIEWS[view].load) && view !== 'overview') refreshView(view);
  if (view === 'jobs') jobs.route(arg);
}

function start() {
  api.onLog(logLine);
  api.onRefused((err) => {
    notice(err.message);
    if (!api.getToken() && !askedForToken) {
      askedForToken = true;
      askToken(err.message);
    }
  });
  api.onReadOnly(tokenState);
  $('token-open').addEventListener('click', () => askToken());
  document.querySelectorAll('[data-token-open]').forEach((b) => b.addEventListener('click', () => askToken()));
  $('token-dialog').addEventListener('close', tokenClosed);
  for (const v of Object.values(VIEWS)) if (v.mod.init) v.mod.init();
  tokenState();
  window.addEventListener('hashchange', route);
  route();
  refreshView('overview');
  setInterval(tick, REFRESH_MS);
  document.addEventListener('visibilitychange', () => { if (!document.hidden) tick(); });
}

start();
