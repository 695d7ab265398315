'use strict';
// The targets of issue 16 ("Half the cost per hand-off") and issue 4 ("Fast and fair under
// contention"), checked against this run. Ratios are medians of per-repetition ratios (contenders and
// floors of one repetition run back to back), printed with their spread (min–max).
const f = require('./format');
const { paired } = require('./contended');

const med = (s, k) => s?.[k]?.median ?? null;
const mark = (ok) => (ok === null ? '—' : ok ? '✓ met' : '✗ missed');

/** "0.44× (0.30–0.60) paired; 0.45× of medians". */
function both(pairedRatio, ofMedians) {
  return `${f.ratioRange(pairedRatio)} paired; ${f.ratio(ofMedians)} of medians`;
}

/** Issue 16's targets: throughput ratios, and (co-located) client CPU per contended cycle. */
function halfCost(results, { colocated }) {
  const rows = [];
  const add = (target, measured, ok) => rows.push([target, measured, mark(ok)]);
  const u = results.uncontended?.data;
  const c = results.contended?.data ?? {};
  if (u) {
    const lib = u.uncontended.lib;
    const r = med(lib, 'ratioFloor');
    add(
      'uncontended: ≥ 0.9× the 2× EVALSHA floor',
      `${both(lib.ratioFloor, lib.ratioOfMedians?.floor)} (${f.num(med(lib, 'cyclesPerSec'))} cycles/s)`,
      r === null ? null : r >= 0.9,
    );
  }
  const m8 = c['mutex-8x1-hold0']?.summaries?.lib;
  if (m8) {
    const rs = med(m8, 'ratioRs');
    const bare = med(m8, 'ratioBare');
    add(
      'mutex, 8 clients, hold 0: ≥ 1.6× redis-semaphore and ≥ 0.8× the bare list',
      `${f.num(med(m8, 'cyclesPerSec'))} cycles/s; × redis-semaphore ${both(m8.ratioRs, m8.ratioOfMedians?.rs)}; × bare ${both(m8.ratioBare, m8.ratioOfMedians?.bare)}`,
      rs === null || bare === null ? null : rs >= 1.6 && bare >= 0.8,
    );
  }
  const p8 = c['mutex-8x8-hold0']?.summaries?.lib;
  if (p8) {
    const bare = med(p8, 'ratioBare');
    add(
      'mutex, 8 clients in 8 processes, hold 0: ≥ 0.7× the bare list',
      `${f.num(med(p8, 'cyclesPerSec'))} cycles/s; × bare ${both(p8.ratioBare, p8.ratioOfMedians?.bare)} (× redis-semaphore ${f.ratioRange(p8.ratioRs)})`,
      bare === null ? null : bare >= 0.7,
    );
  }
  const s4 = c['sem4-32x1-hold0']?.summaries?.lib;
  if (s4) {
    const rs = med(s4, 'ratioRs');
    add(
      'semaphore of 4, 32 clients, hold 0: ≥ 1.3× redis-semaphore',
      `${f.num(med(s4, 'cyclesPerSec'))} cycles/s; × redis-semaphore ${both(s4.ratioRs, s4.ratioOfMedians?.rs)} (× bare ${f.ratioRange(s4.ratioBare)})`,
      rs === null ? null : rs >= 1.3,
    );
  }
  const contended = Object.entries(c).filter(([id]) => id.endsWith('hold0'));
  if (colocated && contended.length) {
    const ratios = contended.map(([id, d]) => [
      id,
      d.summaries.lib?.clientCpuRatioBare,
      med(d.summaries.lib, 'clientCpuPerCycle'),
      med(d.summaries.bare, 'clientCpuPerCycle'),
    ]);
    const worst = Math.max(...ratios.map(([, r]) => r?.median ?? Infinity));
    add(
      'client CPU per contended cycle (co-located): ≤ 1.3× the bare list',
      ratios
        .map(([id, r, lib, bare]) => `${id}: ${f.ratioRange(r)} (${f.fix(lib, 1)} µs against ${f.fix(bare, 1)})`)
        .join('; '),
      worst <= 1.3,
    );
  } else if (!colocated) {
    add(
      'client CPU per contended cycle ≤ 1.3× the bare list',
      'judged co-located: `npm run bench -- --colocated`',
      null,
    );
  }
  add('Redis instructions per contended cycle ≤ 5× the bare list', 'counted by `npm run bench:instructions`', null);
  return `## Targets (issue 16: half the cost per hand-off)\n\n${f.table(['target', 'measured', ''], rows)}\n`;
}

function check(results, { colocated = false } = {}) {
  return `${halfCost(results, { colocated })}\n${fastAndFair(results)}`;
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
