// DOM helpers and formatting. Every text goes in through textContent, never as HTML.

export const $ = (id) => document.getElementById(id);

// h('td', {class: 'num', 'data-value': 3}, '3'): an element with attributes and children
// (strings become text nodes; null and false are left out). on* attributes are listeners.
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
}

export function fill(el, ...children) {
  el.replaceChildren();
  append(el, children);
  return el;
}

// A line of text in a status element; kind 'error' or 'ok' styles it.
export function say(el, text, kind = '') {
  el.textContent = text;
  el.className = 'status' + (kind ? ' ' + kind : '');
}

const pad = (n, w = 2) => String(n).padStart(w, '0');

// Epoch ms as local "YYYY-MM-DD HH:MM:SS", or "–".
export function fmtTime(ms) {
  if (ms === null || ms === undefined) return '–';
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
    `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

// A duration in ms, short: "250 ms", "3.2 s", "4 min 10 s", "2 h 5 min", "3 d 2 h".
export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  const a = Math.abs(ms);
  if (a < 1000) return `${Math.round(ms)} ms`;
  if (a < 60e3) return `${(ms / 1000).toFixed(a < 10e3 ? 1 : 0)} s`;
  const s = Math.round(a / 1000), sign = ms < 0 ? '-' : '';
  const two = (big, bigUnit, small, smallUnit) =>
    `${sign}${big} ${bigUnit}` + (small ? ` ${small} ${smallUnit}` : '');
  if (s < 3600) return two(Math.floor(s / 60), 'min', s % 60, 's');
  if (s < 86400) return two(Math.floor(s / 3600), 'h', Math.floor(s % 3600 / 60), 'min');
  return two(Math.floor(s / 86400), 'd', Math.floor(s % 86400 / 3600), 'h');
}

// "in 4 min 10 s" or "2 h 5 min ago", relative to now.
export function fmtRelative(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return '';
  const d = ms - now;
  return d >= 0 ? `in ${fmtDuration(d)}` : `${fmtDuration(-d)} ago`;
}

// A time cell's content: the local time, the relative time under it, UTC in its title.
export function timeCell(ms, now = Date.now()) {
  if (ms === null || ms === undefined) return '–';
  return h('time', {datetime: new Date(ms).toISOString(), title: new Date(ms).toISOString()},
    fmtTime(ms), h('span', {class: 'rel'}, fmtRelative(ms, now)));
}

export function fmtNum(n) {
  return n === null || n === undefined ? '–' : Number(n).toLocaleString('en-US');
}

export function fmtRate(r) {
  if (r === null || r === undefined || !Number.isFinite(r)) return '–';
  return r >= 100 ? Math.round(r).toLocaleString('en-US') : r.toFixed(r >= 10 ? 1 : 2);
}

// The value of a datetime-local input as epoch ms, or null when empty.
export function localInputMs(input) {
  if (!input.value) return null;
  const ms = new Date(input.value).getTime();
  return Number.isFinite(ms) ? ms : null;
}
