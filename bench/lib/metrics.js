'use strict';
// Statistics over one cell's merged cycles: { c, a, g, r } = client, acquire called, granted, release called (ms).

function percentile(sorted, p) {
  if (sorted.length === 0) return null;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

function median(values) {
  const v = values.filter((x) => x !== null && x !== undefined && !Number.isNaN(x)).sort((x, y) => x - y);
  if (v.length === 0) return null;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

function summary(values) {
  const v = values.filter((x) => x !== null && x !== undefined && !Number.isNaN(x));
  if (v.length === 0) return null;
  return { median: median(v), min: Math.min(...v), max: Math.max(...v) };
}

function merge(parts) {
  const out = { c: [], a: [], g: [], r: [] };
  for (const part of parts) {
    for (const field of ['c', 'a', 'g', 'r']) {
      const src = part[field];
      for (let i = 0; i < src.length; i++) out[field].push(src[i]);
    }
  }
  return out;
}

/** Jain's fairness index over per-client counts: (Σx)² / (n·Σx²); 1 is perfectly even. */
function jain(counts) {
  const n = counts.length;
  if (n < 2) return null;
  let sum = 0;
  let squares = 0;
  for (const x of counts) {
    sum += x;
    squares += x * x;
  }
  return squares === 0 ? null : (sum * sum) / (n * squares);
}

/** A tiny binary min-heap of indices keyed by `key[i]`. */
class Heap {
  constructor(key) {
    this.key = key;
    this.items = [];
  }
  get size() {
    return this.items.length;
  }
  peek() {
    return this.items[0];
  }
  push(i) {
    const { items, key } = this;
    items.push(i);
    let k = items.length - 1;
    while (k > 0) {
      const p = (k - 1) >> 1;
      if (key[items[p]] <= key[items[k]]) break;
      [items[p], items[k]] = [items[k], items[p]];
      k = p;
    }
  }
  pop() {
    const { items, key } = this;
    const top = items[0];
    const last = items.pop();
    if (items.length > 0) {
      items[0] = last;
      let k = 0;
      for (;;) {
        const l = 2 * k + 1;
        const r = l + 1;
        let m = k;
        if (l < items.length && key[items[l]] < key[items[m]]) m = l;
        if (r < items.length && key[items[r]] < key[items[m]]) m = r;
        if (m === k) break;
        [items[m], items[k]] = [items[k], items[m]];
        k = m;
      }
    }
    return top;
  }
}

/**
 * For each grant in [from, to): did it overtake a waiter, i.e. was some other acquisition, called more
 * than `thresholdMs` earlier than this one, still waiting more than `simultaneousMs` after this grant?
 */
function overtakes({ a, g }, from, to, thresholdMs, simultaneousMs = 0) {
  const n = a.length;
  const byStart = Array.from({ length: n }, (_, i) => i).sort((x, y) => a[x] - a[y]);
  const byGrant = Array.from({ length: n }, (_, i) => i).sort((x, y) => g[x] - g[y]);
  const heap = new Heap(a);
  let next = 0;
  let counted = 0;
  let overtaking = 0;
  for (const i of byGrant) {
    const t = g[i];
    while (next < n && a[byStart[next]] <= t) heap.push(byStart[next++]);
    while (heap.size > 0 && g[heap.peek()] <= t + simultaneousMs) heap.pop();
    if (t < from || t >= to) continue;
    counted++;
    if (heap.size > 0 && a[heap.peek()] < a[i] - thresholdMs) overtaking++;
  }
  return counted === 0 ? null : overtaking / counted;
}

/**
 * Hand-off gap: release called → the grant that release handed over, for grants whose acquirer was
 * already waiting when the release was called. Permits freed are taken in the order they were freed
 * (exact for a mutex). Returns the gaps of grants in [from, to).
 */
function handoffGaps({ a, g, r }, permits, from, to) {
  const n = a.length;
  const timeline = [];
  for (let i = 0; i < n; i++) {
    timeline.push([g[i], 1, i]);
    timeline.push([r[i], 0, i]);
  }
  // Releases before grants at equal times.
  timeline.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  const freed = Array(permits).fill(null);
  let head = 0;
  const gaps = [];
  for (const [t, isGrant, i] of timeline) {
    if (!isGrant) {
      freed.push(t);
      continue;
    }
    const release = head < freed.length ? freed[head++] : null;
    if (release !== null && a[i] <= release && t >= from && t < to) gaps.push(t - release);
  }
  return gaps;
}

/** Most holders at once, from the [granted, release called] intervals (inside the true holding time). */
function maxHolders({ g, r }) {
  const timeline = [];
  for (let i = 0; i < g.length; i++) {
    timeline.push([g[i], 1]);
    timeline.push([r[i], -1]);
  }
  timeline.sort((x, y) => x[0] - y[0] || x[1] - y[1]);
  let holders = 0;
  let max = 0;
  for (const [, delta] of timeline) {
    holders += delta;
    if (holders > max) max = holders;
  }
  return max;
}

/** Ordering check for one burst: share of grants given before an earlier call of the same process. */
function fifoViolations({ c, a, g }, processOf) {
  const byGrant = Array.from({ length: a.length }, (_, i) => i).sort((x, y) => g[x] - g[y]);
  const lastCall = new Map();
  let violations = 0;
  for (const i of byGrant) {
    const p = processOf(c[i]);
    const prev = lastCall.get(p);
    if (prev !== undefined && a[i] < prev) violations++;
    else lastCall.set(p, a[i]);
  }
  return a.length === 0 ? null : violations / a.length;
}

module.exports = { percentile, median, summary, merge, jain, overtakes, handoffGaps, maxHolders, fifoViolations };
