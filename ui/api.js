// The HTTP API of the delayqd that served this page: same origin, paths relative to where the
// console is mounted, the bearer token of this tab, and each call rendered as a curl command.

const TOKEN_KEY = 'delayq.token';

// Whatever precedes /delay-queue/ui/ in the page's path (a reverse proxy's prefix), so that
// /delay-queue/api/... and /metrics are reached where this page was.
export const base = (() => {
  const p = location.pathname, i = p.indexOf('/delay-queue/ui');
  return i > 0 ? p.slice(0, i) : '';
})();

export function getToken() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

// Whether the token in use is known to open views only: a write call made with it was
// refused. delayqd cannot be asked which token a token is, so the page learns it this way,
// and forgets it when the token changes.
let readOnlyKnown = false;

export function readOnly() {
  return readOnlyKnown;
}

export function setToken(token) {
  if (token) sessionStorage.setItem(TOKEN_KEY, token);
  else sessionStorage.removeItem(TOKEN_KEY);
  setReadOnly(false);
}

// What each kind of call needs, in the config's words.
export const NEEDS = {
  read: 'the read token (http.read_token) or the write token (http.auth_token)',
  write: 'the write token (http.auth_token)',
  metrics: 'the metrics token (http.metrics_token) or the write token (http.auth_token)',
};

// The sentence shown when delayqd answered 401 to a call that needed `need`.
export function refusedText(need, what) {
  const held = getToken();
  let text = `Refused: ${what} needs ${NEEDS[need] || NEEDS.read}`;
  if (!held) return text + '; no token is set.';
  if (need === 'write') return text + '; the token in use does not open it (a read token opens views only).';
  return text + '; the token in use does not open it.';
}

export class ApiError extends Error {
  constructor(status, doc, message, need) {
    super(message);
    this.status = status;      // HTTP status, 0 when no answer came
    this.doc = doc;            // the parsed answer, when it was JSON
    this.need = need;
    this.refused = status === 401;
  }
}

const listeners = { log: [], refused: [], readOnly: [] };
export function onLog(fn) { listeners.log.push(fn); }
export function onRefused(fn) { listeners.refused.push(fn); }
// fn() is called each time readOnly() changes.
export function onReadOnly(fn) { listeners.readOnly.push(fn); }

function setReadOnly(known) {
  if (readOnlyKnown === known) return;
  readOnlyKnown = known;
  listeners.readOnly.forEach((fn) => fn());
}

const quote = (s) => `'${String(s).replace(/'/g, `'\\''`)}'`;

// The curl command that makes the same call; the token itself is never written out.
export function curlFor(method, path, body) {
  const parts = ['curl -s'];
  if (method !== 'GET') parts.push(`-X${method}`);
  parts.push(quote(location.origin + base + path));
  if (getToken()) parts.push('-H "Authorization: Bearer $DELAYQ_TOKEN"');
  if (body !== undefined) parts.push(`-d ${quote(JSON.stringify(body))}`);
  return parts.join(' ');
}

let seq = 0;

function logStart(method, path, body) {
  const entry = { id: ++seq, at: Date.now(), method, path, curl: curlFor(method, path, body),
                  status: null, outcome: '' };
  listeners.log.forEach((fn) => fn(entry));
  return entry;
}

function logEnd(entry, status, outcome) {
  if (!entry) return;
  entry.status = status;
  entry.outcome = outcome;
  listeners.log.forEach((fn) => fn(entry));
}

async function send(method, path, body, need, what, quiet) {
  const headers = {};
  const token = getToken();
  if (token) headers.Authorization = `Bearer ${token}`;
  const init = { method, headers, cache: 'no-store' };
  if (body !== undefined) {
    headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const entry = quiet ? null : logStart(method, path, body);
  let res, text;
  try {
    res = await fetch(base + path, init);
    text = await res.text();
  } catch (e) {
    logEnd(entry, 0, 'no answer');
    throw new ApiError(0, null, `${what}: delayqd did not answer (${e.message})`, need);
  }
  return { res, text, entry, token };
}

// token: the one the refused call carried; a refused write tells of the token in use only
// when that is still the one (the dialog may have changed it while the call was on its way).
function refuse(status, doc, need, what, entry, notify, token) {
  const err = new ApiError(status, doc, refusedText(need, what), need);
  logEnd(entry, status, 'refused: needs ' + (need === 'write' ? 'the write token' : 'a token'));
  if (need === 'write' && token && token === getToken()) setReadOnly(true);
  if (notify) listeners.refused.forEach((fn) => fn(err));
  return err;
}

// Calls the JSON API: resolves to the answer {code, message, data} when code is 0, rejects
// with an ApiError otherwise. need: 'read' or 'write' (which token the call takes); what:
// the words for the call in messages ("removing the job"); quiet: not logged (polls);
// notify: a 401 is announced to onRefused's listeners too.
export async function call(method, path,
                           { body, need = 'read', what = path, quiet = false, notify = true } = {}) {
  const { res, text, entry, token } = await send(method, path, body, need, what, quiet);
  let doc = null;
  try {
    doc = JSON.parse(text);
  } catch {
    doc = null;
  }
  if (res.status === 401) throw refuse(res.status, doc, need, what, entry, notify, token);
  if (!doc || typeof doc !== 'object' || doc.code !== 0) {
    let why = doc && typeof doc.message === 'string' ? doc.message : `HTTP ${res.status}`;
    if (res.status === 404 && why === 'no such path') why = `this delayqd does not serve ${path.split('?')[0]}`;
    logEnd(entry, res.status, why);
    throw new ApiError(res.status, doc, `${what}: ${why}`, need);
  }
  logEnd(entry, res.status, doc.message);
  return doc;
}

// GET of a text resource (/metrics): resolves to its text, rejects with an ApiError.
export async function text(path, { need = 'metrics', what = path, quiet = true, notify = true } = {}) {
  const { res, text: body, entry, token } = await send('GET', path, undefined, need, what, quiet);
  if (res.status === 401) throw refuse(res.status, null, need, what, entry, notify, token);
  if (!res.ok) {
    logEnd(entry, res.status, `HTTP ${res.status}`);
    throw new ApiError(res.status, null, `${what}: HTTP ${res.status}`, need);
  }
  logEnd(entry, res.status, 'ok');
  return body;
}
