// Instances and groups: the leases of GET /delay-queue/api/claims, each group's partitions
// as its owner published them (on demand), and a release per group
// (POST /delay-queue/api/claims/release), refreshed every 2 s while shown.

import { call } from './api.js';
import { $, h, fill, say, fmtDuration, fmtNum, fmtTime, timeCell } from './dom.js';
import { confirmAction } from './confirm.js';
import { usable } from './access.js';

const CLAIMS = '/delay-queue/api/claims';
const COLUMNS = 9;        // of the groups table: its partitions row spans them all
const rows = new Map();   // group -> {tr, cells, ...}: rows are updated in place, so that focus
                          // and a click under way survive a refresh
const expanded = new Set();   // groups whose partitions are shown

// "host/listen/place/pid.random" -> [identity, process]: the identity survives a restart.
function splitOwner(owner) {
  const i = owner.lastIndexOf('/');
  return i < 0 ? [owner, ''] : [owner.slice(0, i), owner.slice(i + 1)];
}

export async function refresh() {
  try {
    const doc = await call('GET', CLAIMS, { quiet: true, what: 'the leases (/claims)' });
    const groups = (doc.data && doc.data.groups) || [];
    showGroups(groups);
    showInstances(groups);
    $('groups-updated').textContent = `Last refresh ${fmtTime(Date.now())}.`;
  } catch (e) {
    $('groups-updated').textContent = e.message;
  }
}

function ownerState(g) {
  if (!g.owner) return ['no owner', 'bad'];
  return g.owner_alive === false ? ['dead', 'bad'] : g.owner_alive ? ['alive', 'ok'] : ['unknown', ''];
}

function lag(status) {
  const known = (status || []).filter((s) => typeof s.lag === 'number' && s.lag >= 0);
  return known.length ? known.reduce((a, s) => a + s.lag, 0) : null;
}

function nextDue(status) {
  const due = (status || []).map((s) => s.head_due_ms).filter((x) => typeof x === 'number');
  return due.length ? Math.min(...due) : null;
}

function newRow(group) {
  const id = (name) => ({ 'data-testid': `group-${group}-${name}` });
  const cells = {
    group: h('th', { scope: 'row', class: 'num', ...id('group') }, String(group)),
    partitions: h('td', id('partitions')),
    owner: h('td', { class: 'mono', ...id('owner') }),
    lease: h('td', id('lease')),
    state: h('td', id('state')),
    lag: h('td', { class: 'num', ...id('lag') }),
    next: h('td', id('next')),
    from: h('td', id('from')),
  };
  const detailId = `group-${group}-status`;
  const toggle = h('button', { type: 'button', class: 'toggle', 'data-testid': `partitions-${group}`,
    'aria-expanded': 'false', 'aria-controls': detailId, 'aria-label': `Partitions of group ${group}`,
    onclick: () => togglePartitions(group) }, 'Partitions');
  const button = h('button', { type: 'button', id: `release-${group}`, 'data-testid': `release-${group}`,
    onclick: () => release(group) }, 'Release');
  const tr = h('tr', { 'data-group': group, 'data-testid': `group-${group}` },
    ...Object.values(cells), h('td', { class: 'actions' }, toggle, button));
  const caption = h('caption', {}, `Delay-topic partitions of group ${group}`);
  const body = h('tbody');
  const detail = h('tr', { id: detailId, class: 'partitions', 'data-testid': detailId, hidden: true },
    h('td', { colspan: COLUMNS }, h('table', {}, caption,
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, 'Topic'),
        ...['Partition', 'Committed', 'End', 'Lag'].map((x) => h('th', { scope: 'col', class: 'num' }, x)),
        h('th', { scope: 'col' }, 'Next head due'))),
      body)));
  return { tr, cells, button, toggle, detail, body, last: null };
}

// One partition of a group's status; a count below 0 is one the owner did not know.
function statusRow(s, now) {
  const count = (name, n) => {
    const known = typeof n === 'number' && n >= 0;
    return h('td', { class: 'num', 'data-testid': `status-${name}` }, known ? fmtNum(n) : '–');
  };
  return h('tr', {},
    h('td', { class: 'mono', 'data-testid': 'status-topic' }, s.topic),
    count('partition', s.partition), count('committed', s.committed), count('end', s.end),
    count('lag', s.lag),
    h('td', { 'data-testid': 'status-due' }, timeCell(s.head_due_ms, now)));
}

const byTopicPartition = (a, b) => a.topic.localeCompare(b.topic) || a.partition - b.partition;

function showStatus(row, now) {
  const status = [...((row.last && row.last.status) || [])].sort(byTopicPartition);
  fill(row.body, status.length ? status.map((s) => statusRow(s, now)) : h('tr', {}, h('td', { colspan: 6 },
    'No status published: the group has no owner, or its owner has not published yet.')));
}

function togglePartitions(group) {
  const row = rows.get(group);
  const show = !expanded.has(group);
  if (show) expanded.add(group);
  else expanded.delete(group);
  row.toggle.setAttribute('aria-expanded', String(show));
  row.detail.hidden = !show;
  if (show) showStatus(row, Date.now());
}

function showGroups(groups) {
  const tbody = $('groups-table').tBodies[0];
  const seen = new Set();
  const now = Date.now();
  let next = tbody.firstElementChild;
  for (const g of groups) {
    seen.add(g.group);
    if (!rows.has(g.group)) rows.set(g.group, newRow(g.group));
    const row = rows.get(g.group);
    const { tr, cells, button } = row;
    row.last = g;
    const [state, kind] = ownerState(g);
    cells.partitions.textContent = (g.partitions || []).join(', ');
    cells.owner.textContent = g.owner || '–';
    cells.owner.title = g.owner || '';
    cells.lease.textContent = g.owner && typeof g.ttl_ms === 'number' ? fmtDuration(g.ttl_ms) : '–';
    cells.state.textContent = state;
    cells.state.className = kind;
    cells.state.dataset.value = state;
    const l = lag(g.status);
    cells.lag.textContent = fmtNum(l);
    cells.lag.dataset.value = l === null ? '' : String(l);
    fill(cells.next, timeCell(nextDue(g.status), now));
    fill(cells.from, !g.status_owner ? '–' : [
      g.status_owner === g.owner ? 'the owner' : h('span', { class: 'mono', title: g.status_owner },
        splitOwner(g.status_owner)[0]),
      typeof g.updated_ms === 'number' ? h('span', { class: 'rel' }, `${fmtDuration(now - g.updated_ms)} ago`) : '']);
    usable(button, !!g.owner);
    button.setAttribute('aria-label', `Release group ${g.group}`);
    if (expanded.has(g.group)) showStatus(row, now);
    // The answer's order; a row already in its place stays put (moved, it would lose focus).
    for (const el of [tr, row.detail]) {
      if (el === next) next = next.nextElementSibling;
      else tbody.insertBefore(el, next);
    }
  }
  for (const [group, row] of rows) {
    if (!seen.has(group)) {
      row.tr.remove();
      row.detail.remove();
      rows.delete(group);
      expanded.delete(group);
    }
  }
}

function showInstances(groups) {
  const byId = new Map();
  for (const g of groups) {
    for (const owner of new Set([g.owner, g.status_owner])) {
      if (!owner) continue;
      const [identity, proc] = splitOwner(owner);
      const key = owner;
      if (!byId.has(key)) byId.set(key, { identity, proc, held: 0, alive: null });
      if (owner === g.owner) {
        byId.get(key).held++;
        byId.get(key).alive = g.owner_alive;
      }
    }
  }
  fill($('instances-table').tBodies[0], [...byId.values()].map((x) => h('tr', {},
    h('td', { class: 'mono' }, x.identity), h('td', { class: 'mono' }, x.proc),
    h('td', { class: x.alive === false ? 'bad' : x.alive ? 'ok' : '' },
      x.alive === null ? 'holds no lease' : x.alive ? 'alive' : 'dead'),
    h('td', { class: 'num' }, String(x.held)))));
  if (!byId.size) {
    fill($('instances-table').tBodies[0], h('tr', {}, h('td', { colspan: 4 }, 'No instance holds a lease.')));
  }
}

async function release(group) {
  const row = rows.get(group);
  const owner = row ? row.cells.owner.textContent : '';
  const ok = await confirmAction(`Ask ${owner} to hand group ${group} back? It forwards what it has ` +
    'taken, commits and releases the lease; an instance takes the group at its next renew.');
  if (!ok) return;
  const status = $('groups-status');
  say(status, `Releasing group ${group}…`);
  try {
    const doc = await call('POST', `${CLAIMS}/release`, { body: { group }, need: 'write',
      what: `releasing group ${group}` });
    say(status, `Group ${group}: ${doc.message}`, 'ok');
  } catch (e) {
    say(status, e.message, 'error');
  }
  refresh();
}
