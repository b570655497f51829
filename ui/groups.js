// Instances and groups: the leases of GET /delay-queue/api/claims, and a release per group
// (POST /delay-queue/api/claims/release), refreshed every 2 s while shown.

import { call } from './api.js';
import { $, h, fill, say, fmtDuration, fmtNum, fmtTime, timeCell } from './dom.js';
import { confirmAction } from './confirm.js';

const CLAIMS = '/delay-queue/api/claims';
const rows = new Map();   // group -> {tr, cells}: rows are updated in place, so that focus and
                          // a click under way survive a refresh

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
  const button = h('button', { type: 'button', id: `release-${group}`, 'data-testid': `release-${group}`,
    onclick: () => release(group) }, 'Release');
  const tr = h('tr', { 'data-group': group, 'data-testid': `group-${group}` },
    ...Object.values(cells), h('td', {}, button));
  return { tr, cells, button };
}

function showGroups(groups) {
  const tbody = $('groups-table').tBodies[0];
  const seen = new Set();
  const now = Date.now();
  for (const g of groups) {
    seen.add(g.group);
    if (!rows.has(g.group)) rows.set(g.group, newRow(g.group));
    const { tr, cells, button } = rows.get(g.group);
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
    button.disabled = !g.owner;
    button.setAttribute('aria-label', `Release group ${g.group}`);
    tbody.append(tr);   // keeps the answer's order
  }
  for (const [group, row] of rows) {
    if (!seen.has(group)) {
      row.tr.remove();
      rows.delete(group);
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
