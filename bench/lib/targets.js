'use strict';
// The targets of issue 31 ("Light and fast") and issue 4 ("Fast and fair under contention"), checked
// against this run. Ratios are medians of per-repetition ratios (contenders and floors of one
// repetition run back to back), printed with their spread (min–max).
const f = require('./format');
const { paired } = require('./contended');
const { summary } = require('./metrics');

const med = (s, k) => s?.[k]?.median ?? null;
const mark = (ok) => (ok === null ? '—' : ok ? '✓ met' : '✗ missed');

/** "✓ met" or "✗ missed" by the median, and whether the spread straddles the target (the run cannot decide it). */
function verdict(s, target, atLeast = true) {
  if (!s) return '—';
  const ok = atLeast ? s.median >= target : s.median <= target;
  return `${mark(ok)}${s.min < target && s.max > target ? ' (spread straddles)' : ''}`;
}

/** Issue 31's targets a run can measure, one row each; the rest name the command that measures them. */
function lightAndFast(results, { colocated }) {
  const rows = [];
  const c = results.contended?.data ?? {};
  const lib = (id) => (id === 'uncontended' ? results.uncontended?.data?.uncontended : c[id]?.summaries)?.lib;
  const notRun = (id) => `not in this run (\`--only ${id}\`)`;
  /** A throughput ratio of the library to `peer` in cell `id` (`key`: the summary's paired ratio). */
  const ratioRow = (measure, id, key, ofMedians, target) => {
    const s = lib(id);
    if (!s) return rows.push([measure, target === null ? '—' : `≥ ${target.toFixed(2)}`, notRun(id), '—', '—']);
    const r = s[key];
    return rows.push([
      measure,
      target === null ? '—' : `≥ ${target.toFixed(2)}`,
      r ? `${f.ratioRange(r)} (${f.num(med(s, 'cyclesPerSec'))} cycles/s)` : '—',
      f.ratio(s.ratioOfMedians?.[ofMedians]),
      target === null ? '—' : verdict(r, target),
    ]);
  };
  const elsewhere = (measure, target, where) => rows.push([measure, target, where, '—', '—']);

  ratioRow('uncontended lock + unlock × redlock', 'uncontended', 'ratioRedlock', 'redlock', 1.0);
  ratioRow('uncontended × redis-semaphore', 'uncontended', 'ratioRs', 'rs', 0.85);
  ratioRow('uncontended × bare list', 'uncontended', 'ratioBare', 'bare', 0.75);
  ratioRow('mutex, 8 clients, hold 0 × redis-semaphore', 'mutex-8x1-hold0', 'ratioRs', 'rs', 1.4);
  ratioRow('mutex, 8 clients, hold 0 × bare list', 'mutex-8x1-hold0', 'ratioBare', 'bare', 0.7);
  ratioRow('mutex, 8 clients, hold 0 × redlock', 'mutex-8x1-hold0', 'ratioRedlock', 'redlock', null);
  ratioRow('mutex, 8 processes, hold 0 × bare list', 'mutex-8x8-hold0', 'ratioBare', 'bare', 0.6);
  ratioRow('mutex, 8 processes, hold 0 × redlock', 'mutex-8x8-hold0', 'ratioRedlock', 'redlock', null);
  ratioRow('semaphore of 4, 32 clients, hold 0 × redis-semaphore', 'sem4-32x1-hold0', 'ratioRs', 'rs', 1.1);
  tailRow(rows, c['mutex-32x1-hold1'], notRun('mutex-32x1-hold1'));
  ratioRow("the library's own code: uncontended × the lean client", 'uncontended', 'ratioLean', 'lean', null);
  ratioRow("the library's own code: mutex, 8 clients × the lean client", 'mutex-8x1-hold0', 'ratioLean', 'lean', null);
  if (colocated) {
    for (const id of ['uncontended', 'mutex-8x1-hold0', 'mutex-8x8-hold0']) {
      const s = lib(id);
      if (!s?.clientCpuRatioLean) continue;
      rows.push([
        `client CPU per cycle × the lean client, ${id} (co-located)`,
        '— (instructions: ≤ 1.15)',
        `${f.ratioRange(s.clientCpuRatioLean)} (${f.fix(med(s, 'clientCpuPerCycle'), 1)} µs)`,
        '—',
        '—',
      ]);
    }
  }
  elsewhere(
    'Redis instructions per uncontended / mutex-8 cycle',
    '≤ 100k / ≤ 145k',
    'counted by `npm run bench:instructions`',
  );
  elsewhere(
    'client instructions per cycle × the lean client (uncontended; mutex, 8 clients)',
    '≤ 1.15 / ≤ 1.15',
    'counted by `npm run bench:client -- --instructions`',
  );
  elsewhere(
    'promises / timers per cycle, uncontended; mutex, 8 clients',
    '≤ 8 / 0; ≤ 10 / 0',
    'counted by `spec/api/hot-path-counts.spec.ts`',
  );
  fairnessRows(rows, c);
  return `## Targets (issue 31: light and fast)\n\n${f.table(['measure', 'target', 'paired median (min–max)', 'of medians', ''], rows)}\n`;
}

/** Mutex, 32 clients, hold 1 ms: p99 wait over the FIFO ideal (32 × the measured hold), and over the bare list's p99. */
function tailRow(rows, cell, absent) {
  const measure = 'mutex, 32 clients, hold 1 ms: p99 wait / FIFO ideal (32 × measured hold)';
  const target = '≤ 1.5, or ≤ 1.0× the bare list';
  if (!cell?.cells?.lib?.length) return rows.push([measure, target, absent, '—', '—']);
  const overIdeal = (cells) => summary(cells.map((x) => x.waitP99 / (32 * x.holdMean)));
  const lib = overIdeal(cell.cells.lib);
  const bare = cell.cells.bare?.length ? overIdeal(cell.cells.bare) : null;
  const overBare = paired(cell.cells.lib, cell.cells.bare, 'waitP99');
  const ok = lib.median <= 1.5 || (overBare !== null && overBare.median <= 1.0);
  return rows.push([
    measure,
    target,
    `${f.ratioRange(lib)}; the bare list ${f.ratioRange(bare)}; p99 × the bare list's ${f.ratioRange(overBare)} (paired); redis-semaphore ${f.ratioRange(overIdeal(cell.cells.rs10 ?? []))}`,
    '—',
    mark(ok),
  ]);
}

/** Jain's index in every contended cell, and overtakes by > 1 ms in the one-process ones. */
function fairnessRows(rows, c) {
  const cells = Object.entries(c).filter(([, d]) => d.summaries?.lib);
  if (!cells.length) {
    rows.push([
      "Jain's index; grants overtaking a waiter by > 1 ms (one process)",
      '≥ 0.999; ≤ 0.06%',
      'no contended cell in this run',
      '—',
      '—',
    ]);
    return;
  }
  const jain = cells.map(([id, d]) => [id, med(d.summaries.lib, 'jain')]).filter(([, j]) => j !== null);
  const worstJain = jain.reduce((worst, x) => (x[1] < worst[1] ? x : worst), ['', Infinity]);
  rows.push([
    "Jain's index, every contended cell (worst)",
    '≥ 0.999',
    `${worstJain[1].toFixed(4)} (${worstJain[0]}); ${jain.map(([id, j]) => `${id} ${j.toFixed(3)}`).join(', ')}`,
    '—',
    mark(worstJain[1] >= 0.999),
  ]);
  const overtakes = cells
    .filter(([, d]) => (d.config?.procs ?? 1) === 1)
    .map(([id, d]) => [id, med(d.summaries.lib, 'overtook')])
    .filter(([, o]) => o !== null);
  if (!overtakes.length) return;
  const worst = overtakes.reduce((w, x) => (x[1] > w[1] ? x : w), ['', -Infinity]);
  rows.push([
    'grants overtaking a waiter by > 1 ms, one-process cells (worst)',
    '≤ 0.06%',
    `${f.percent(worst[1])} (${worst[0]}); ${overtakes.map(([id, o]) => `${id} ${f.percent(o)}`).join(', ')}`,
    '—',
    mark(worst[1] <= 0.0006),
  ]);
}

function check(results, { colocated = false } = {}) {
  return `${lightAndFast(results, { colocated })}\n${fastAndFair(results)}`;
}

function fastAndFair(results) {
  const rows = [];
  const add = (target, measured, ok) => rows.push([target, measured, mark(ok)]);
  const u = results.uncontended?.data;
  const c = results.contended?.data ?? {};

  if (u) {
    const lib = u.uncontended.lib;
    const r = med(lib, 'ratioFloor');
    add(
      'uncontended: ≥ 0.95× the 2× EVALSHA floor; ≤ 2 commands per cycle',
      `${f.ratioRange(lib.ratioFloor)} (${f.num(med(lib, 'cyclesPerSec'))} cycles/s); ${f.fix(med(lib, 'sentPerCycle'))} commands sent per cycle (${f.fix(med(lib, 'callsPerCycle'))} Redis calls counting those inside scripts)`,
      r >= 0.95 && med(lib, 'sentPerCycle') <= 2.01,
    );
  }
  for (const id of ['mutex-8x1-hold0', 'mutex-32x1-hold0', 'mutex-8x8-hold0']) {
    const s = c[id]?.summaries;
    if (!s) continue;
    const rs = med(s.lib, 'ratioRs');
    const bare = med(s.lib, 'ratioBare');
    add(
      `${id}: ≥ 1.6× redis-semaphore (defaults) and ≥ 0.8× the bare list`,
      `${f.num(med(s.lib, 'cyclesPerSec'))} cycles/s = ${f.ratioRange(s.lib.ratioRs)} redis-semaphore, ${f.ratioRange(s.lib.ratioBare)} bare list`,
      rs >= 1.6 && bare >= 0.8,
    );
  }
  const gaps = Object.entries(c)
    .filter(([id]) => id.startsWith('mutex'))
    .map(([id, d]) => [
      id,
      med(d.summaries.lib, 'gapP50'),
      med(d.summaries.lib, 'gapRatioFloor'),
      med(d.floor, 'gapP50'),
    ]);
  if (gaps.length) {
    const worst = Math.max(...gaps.map((g) => g[2] ?? Infinity));
    add(
      'hand-off gap p50 ≤ 2× the BLPOP ping-pong hand-off',
      gaps
        .map(
          ([id, g, r, floor]) => `${id}: ${f.num(g * 1000)} µs = ${f.ratio(r)} (ping-pong ${f.num(floor * 1000)} µs)`,
        )
        .join('; '),
      worst <= 2,
    );
  }
  const fair = Object.entries(c).map(([id, d]) => [id, med(d.summaries.lib, 'jain'), med(d.summaries.lib, 'overtook')]);
  if (fair.length) {
    const worstJain = Math.min(...fair.map((x) => x[1] ?? 1));
    const worstOvertook = Math.max(...fair.map((x) => x[2] ?? 0));
    add(
      'fairness, every contended cell: Jain ≥ 0.99; ≤ 1% of grants overtook a waiter blocked > 1 ms earlier',
      `worst Jain ${worstJain.toFixed(3)}, worst overtook ${f.percent(worstOvertook)} (${fair.map(([id, j, o]) => `${id}: ${j?.toFixed(3)} / ${f.percent(o)}`).join('; ')})`,
      worstJain >= 0.99 && worstOvertook <= 0.01,
    );
  }
  const m32 = c['mutex-32x1-hold1'];
  if (m32) {
    const s = m32.summaries;
    const p99 = med(s.lib, 'waitP99');
    const hold = med(s.lib, 'holdMean');
    const ideal = 32 * hold;
    const better = med({ r: paired(m32.cells.rs10, m32.cells.lib, 'waitP99') }, 'r');
    add(
      'mutex, 32 clients, hold 1 ms: p99 wait ≤ 1.5× the FIFO ideal (clients × hold), ≥ 20× better than redis-semaphore',
      `p99 ${f.fix(p99)} ms = ${f.ratio(p99 / ideal)} of 32 × ${f.fix(hold)} ms (measured hold) = ${f.fix(ideal)} ms; redis-semaphore p99 ${f.fix(med(s.rs10, 'waitP99'))} ms = ${f.ratio(better)} worse`,
      p99 <= 1.5 * ideal && better >= 20,
    );
  }
  const s4 = c['sem4-32x1-hold0']?.summaries;
  if (s4) {
    const r = med(s4.lib, 'ratioRs');
    add(
      'semaphore of 4, 32 clients, hold 0: ≥ 1.3× redis-semaphore',
      `${f.num(med(s4.lib, 'cyclesPerSec'))} cycles/s = ${f.ratioRange(s4.lib.ratioRs)} redis-semaphore (${f.ratioRange(s4.lib.ratioBare)} bare list)`,
      r >= 1.3,
    );
  }
  const idle = results.idle?.data?.summaries;
  if (idle) {
    const lib = med(idle.lib, 'idleCallsPerSec');
    const pool = med(idle['lib:pool100'], 'idleCallsPerSec');
    const slice1s = med(idle['lib:slice1s'], 'idleSentPerSec');
    add(
      '100 idle blocked waiters: ~0 commands per second',
      `${f.fix(lib, 1)} Redis calls/s with the default pool, ${f.fix(pool, 1)} with all 100 blocked in Redis (re-arming once per waitSlice, 10 s by default${slice1s === null ? '' : `: with a 1 s slice 100 waiters send ${f.fix(slice1s, 0)} commands/s, so ~${f.fix(slice1s / 10, 1)}/s on the default slice`}); redis-semaphore ${f.num(med(idle.rs10, 'idleCallsPerSec'))}/s`,
      lib <= 1 && (pool ?? 0) <= 1,
    );
  }
  const w = results.waiters?.data?.summaries?.lib;
  const n = results.waiters?.data?.waiters;
  if (w) {
    const served = w.served?.min;
    const fifo = w.fifoViolations?.max;
    const conns = w.connections?.max;
    add(
      `${n.toLocaleString('en-US')} concurrent waiters in one process: all served, FIFO within the process, connections ≤ the pool, memory reported`,
      `${served}/${n} served in every run; out of call order: ${f.percent(med(w, 'fifoViolations'))} median, ${f.percent(fifo)} worst; at most ${conns} connections opened (pool of 10 + the main one); ${f.fix(med(w, 'rssPerWaiterKB'), 1)} KB client RSS and ${f.fix(med(w, 'redisMemoryPerWaiterKB'), 2)} KB Redis memory per waiter`,
      served === n && fifo === 0 && conns <= 11,
    );
  }
  return `## Targets (issue 4: fast and fair under contention)\n\n${f.table(['target', 'measured', ''], rows)}\n`;
}

module.exports = { check };
