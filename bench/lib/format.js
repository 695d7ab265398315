'use strict';
// Number formatting and Markdown tables.

function num(x, digits = 0) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  return x.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** Significant-ish formatting for small quantities (ms, ratios). */
function fix(x, digits = 2) {
  if (x === null || x === undefined || Number.isNaN(x)) return '—';
  if (Math.abs(x) >= 1000) return num(x, 0);
  if (Math.abs(x) >= 100) return num(x, Math.max(0, digits - 2));
  if (Math.abs(x) >= 10) return num(x, Math.max(0, digits - 1));
  return num(x, digits);
}

function ratio(x) {
  return x === null || x === undefined || Number.isNaN(x) ? '—' : `${x.toFixed(2)}×`;
}

function percent(x) {
  return x === null || x === undefined || Number.isNaN(x) ? '—' : `${(x * 100).toFixed(x > 0 && x < 0.01 ? 2 : 1)}%`;
}

/** A paired ratio { median, min, max } as "0.44× (0.30–0.60)": the median and the spread of per-repetition ratios. */
function ratioRange(s) {
  if (!s) return '—';
  if (s.min === s.max) return ratio(s.median);
  return `${ratio(s.median)} (${s.min.toFixed(2)}–${s.max.toFixed(2)})`;
}

/** "median (min–max)" for a summary { median, min, max }. */
function range(s, format = (x) => num(x)) {
  if (!s) return '—';
  if (s.min === s.max) return format(s.median);
  return `${format(s.median)} (${format(s.min)}–${format(s.max)})`;
}

function table(columns, rows) {
  const lines = [`| ${columns.join(' | ')} |`, `|${columns.map(() => '---').join('|')}|`];
  for (const row of rows) lines.push(`| ${row.join(' | ')} |`);
  return lines.join('\n');
}

module.exports = { num, fix, ratio, ratioRange, percent, range, table };
