// Prometheus text format: samples, counter rates and histogram quantiles. No DOM here.

const LINE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

function unescape(v) {
  return v.replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
}

function number(s) {
  if (s === '+Inf' || s === 'Inf') return Infinity;
  if (s === '-Inf') return -Infinity;
  return Number(s);
}

// Map of metric name to [{labels, value}], from the text of GET /metrics.
export function parse(text) {
  const out = new Map();
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = LINE.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(LABEL)) labels[l[1]] = unescape(l[2]);
    if (!out.has(m[1])) out.set(m[1], []);
    out.get(m[1]).push({ labels, value: number(m[3]) });
  }
  return out;
}

// The sum of every series of these metrics (all their labels), or null when none is there.
export function total(samples, ...names) {
  let sum = null;
  for (const name of names) {
    for (const s of samples.get(name) || []) sum = (sum || 0) + s.value;
  }
  return sum;
}

// The cumulative buckets of an unlabelled histogram: [{le, count}] by le, or null.
export function buckets(samples, name) {
  const rows = (samples.get(name + '_bucket') || [])
    .filter((s) => s.labels.le !== undefined)
    .map((s) => ({ le: number(s.labels.le), count: s.value }));
  return rows.length ? rows.sort((a, b) => a.le - b.le) : null;
}

// Bucket counts of b minus those of a (a window between two scrapes); b alone after a reset.
export function bucketsSince(b, a) {
  if (!a || a.length !== b.length || a.some((x, i) => x.count > b[i].count || x.le !== b[i].le)) return b;
  return b.map((x, i) => ({ le: x.le, count: x.count - a[i].count }));
}

// The q-quantile of cumulative buckets, interpolated within its bucket as Prometheus'
// histogram_quantile does: {value, above} (above: it lies past the largest finite bucket,
// value is that bucket's bound), or null with no observation.
export function quantile(q, rows) {
  if (!rows || !rows.length) return null;
  const count = rows[rows.length - 1].count;
  if (!(count > 0)) return null;
  const rank = q * count;
  let prevLe = 0, prevCount = 0;
  for (const r of rows) {
    if (r.count >= rank) {
      if (r.le === Infinity) return { value: prevLe, above: true };
      const inBucket = r.count - prevCount;
      const frac = inBucket > 0 ? (rank - prevCount) / inBucket : 1;
      return { value: prevLe + (r.le - prevLe) * frac, above: false };
    }
    prevLe = r.le;
    prevCount = r.count;
  }
  return { value: prevLe, above: true };
}

// Per-second rates of a counter from successive scrapes, the last `keep` of them.
export class Rate {
  constructor(keep = 90) {
    this.keep = keep;
    this.last = null;          // {t, v}: the previous scrape
    this.points = [];          // rates per second, oldest first (null: unknown)
  }

  // Adds a scrape at t (ms) of value v (null: the counter was not there).
  push(t, v) {
    let rate = null;
    if (v !== null && this.last && this.last.v !== null && t > this.last.t) {
      const dv = v - this.last.v;
      rate = dv >= 0 ? dv / ((t - this.last.t) / 1000) : null;   // a restart resets counters
    }
    if (this.last) {
      this.points.push(rate);
      if (this.points.length > this.keep) this.points.shift();
    }
    this.last = { t, v };
  }

  now() {
    return this.points.length ? this.points[this.points.length - 1] : null;
  }
}
