'use strict';
// A contended loop scenario: every contender, `reps` times interleaved, then one table.
const { loopCell } = require('./cell');
const { summary } = require('./metrics');
const { CONTENDERS } = require('./contenders-meta');
const f = require('./format');

const METRICS = [
  'cyclesPerSec',
  'permitsPerSec',
  'gapP50',
  'gapP99',
  'waitP50',
  'waitP99',
  'waitMax',
  'holdMean',
  'jain',
  'overtook',
  'overtookStrict',
  'sentPerCycle',
  'callsPerCycle',
  'redisCpuPerCycle',
  'clientCpuPerCycle',
  'connections',
  'maxHolders',
  'timeouts',
];

function summarize(cells) {
  const out = {};
  for (const metric of METRICS) out[metric] = summary(cells.map((cell) => cell[metric]));
  out.maxHolders = cells.length ? { median: Math.max(...cells.map((c) => c.maxHolders)), min: 0, max: 0 } : null;
  out.timeouts = cells.length ? { median: cells.reduce((s, c) => s + c.timeouts, 0), min: 0, max: 0 } : null;
  return out;
}

/** The hand-off floor: two connections passing one token, LPUSH and the next BLPOP sent together. */
function pingpongCell(ctx) {
  return loopCell(ctx, {
    mode: 'pingpong',
    contender: 'pingpong',
    permits: 1,
    clients: 2,
    holdMs: 0,
    warmMs: ctx.warmMs,
    durationMs: ctx.durationMs,
    drainMs: ctx.drainMs,
  });
}

const med = (s, metric) => s?.[metric]?.median ?? null;
const div = (x, y) => (x === null || x === undefined || y === null || y === undefined || !y ? null : x / y);
/** A cell with `cpuPerCycle` = Redis CPU + client CPU per cycle (µs): what one shared vCPU spends on a cycle. */
const withCpu = (cell) => ({
  ...cell,
  cpuPerCycle:
    cell.redisCpuPerCycle === null || cell.clientCpuPerCycle === null
      ? null
      : cell.redisCpuPerCycle + cell.clientCpuPerCycle,
});

/** Median over repetitions of a[rep][metric] / b[rep][metric], pairing cells of the same repetition. */
function paired(cellsA, cellsB, metric = 'cyclesPerSec', metricB = metric) {
  if (!cellsA?.length || !cellsB?.length) return null;
  const byRep = new Map(cellsB.map((cell) => [cell.rep, cell]));
  const ratios = [];
  for (const a of cellsA) {
    const b = byRep.get(a.rep);
    if (b && a[metric] !== null && b[metricB]) ratios.push(a[metric] / b[metricB]);
  }
  return summary(ratios);
}

/**
 * Runs the cells of one scenario, `reps` times with the contenders interleaved; `config` =
 * { id, permits, clients, procs, holdMs }. With `pingpong`, each repetition also measures the
 * BLPOP ping-pong floor right before the contenders. Ratios are medians of per-repetition ratios.
 */
async function runContended(ctx, config, contenderIds, { pingpong = false, floorRunner = null } = {}) {
  const cells = Object.fromEntries(contenderIds.map((id) => [id, []]));
  const floor = [];
  const runFloor =
    floorRunner ??
    (pingpong ? (rep) => ctx.guard(`${config.id} ping-pong floor rep ${rep + 1}`, () => pingpongCell(ctx)) : null);
  for (let rep = 0; rep < ctx.reps; rep++) {
    if (runFloor) {
      const cell = await runFloor(rep);
      if (cell) floor.push({ ...cell, rep });
    }
    for (const id of contenderIds) {
      const meta = CONTENDERS[id];
      if (config.permits > 1 && !meta.semaphore) continue;
      const cell = await ctx.guard(`${config.id} ${id} rep ${rep + 1}`, () =>
        loopCell(ctx, {
          contender: meta.contender,
          options: meta.options,
          ...config,
          warmMs: ctx.warmMs,
          durationMs: ctx.durationMs,
          drainMs: ctx.drainMs,
        }),
      );
      if (cell) cells[id].push({ ...cell, rep });
    }
  }
  const summaries = Object.fromEntries(contenderIds.map((id) => [id, cells[id].length ? summarize(cells[id]) : null]));
  const floorSummary = floor.length ? summarize(floor) : null;
  for (const id of contenderIds) {
    const s = summaries[id];
    if (!s) continue;
    // Paired: median (min–max) of repetition i of this contender over repetition i of the other.
    s.ratioFloor = floor.length ? paired(cells[id], floor) : null;
    s.ratioBare = paired(cells[id], cells.bare);
    s.ratioRs = paired(cells[id], cells.rs10);
    s.ratioRedlock = paired(cells[id], cells.redlock);
    s.ratioLean = paired(cells[id], cells.lean);
    s.gapRatioFloor = floor.length ? paired(cells[id], floor, 'gapP50') : null;
    s.redisCpuRatioBare = paired(cells[id], cells.bare, 'redisCpuPerCycle');
    s.clientCpuRatioBare = paired(cells[id], cells.bare, 'clientCpuPerCycle');
    s.clientCpuRatioLean = paired(cells[id], cells.lean, 'clientCpuPerCycle');
    s.cpuRatioBare = paired(cells[id].map(withCpu), cells.bare?.map(withCpu) ?? [], 'cpuPerCycle');
    s.cpuPerCycle = summary(cells[id].map((cell) => withCpu(cell).cpuPerCycle));
    // Unpaired, for comparison: the ratio of the medians over all repetitions.
    s.ratioOfMedians = {
      floor: div(med(s, 'cyclesPerSec'), med(floorSummary, 'cyclesPerSec')),
      bare: div(med(s, 'cyclesPerSec'), med(summaries.bare, 'cyclesPerSec')),
      rs: div(med(s, 'cyclesPerSec'), med(summaries.rs10, 'cyclesPerSec')),
      redlock: div(med(s, 'cyclesPerSec'), med(summaries.redlock, 'cyclesPerSec')),
      lean: div(med(s, 'cyclesPerSec'), med(summaries.lean, 'cyclesPerSec')),
    };
  }
  return { cells, summaries, floor: floorSummary, floorCells: floor };
}

const COLUMNS = [
  'contender',
  'cycles/s median (min–max)',
  '× floor',
  '× bare list',
  '× redis-semaphore',
  '× lean client',
  'hand-off gap p50 / p99 µs',
  'wait p50 / p99 (min–max) / max ms',
  'Jain',
  'overtook',
  'cmds sent / Redis calls per cycle',
  'Redis CPU µs/cycle',
  'client CPU µs/cycle',
  'conns',
  'max holders / permits',
];

/** Markdown rows: ratios are medians (min–max) of per-repetition ratios (see runContended). */
function rows(summaries, contenderIds, { permits }) {
  return contenderIds.map((id) => {
    const s = summaries[id];
    const label = CONTENDERS[id]?.label ?? id;
    if (!s) return [label, 'n/a', ...COLUMNS.slice(2).map(() => 'n/a')];
    const us = (x) => (x === null ? null : x * 1000);
    return [
      label,
      f.range(s.cyclesPerSec),
      f.ratioRange(s.ratioFloor),
      id === 'bare' ? '1.00×' : f.ratioRange(s.ratioBare),
      id === 'rs10' ? '1.00×' : f.ratioRange(s.ratioRs),
      id === 'lean' ? '1.00×' : f.ratioRange(s.ratioLean),
      `${f.num(us(med(s, 'gapP50')))} / ${f.num(us(med(s, 'gapP99')))}`,
      `${f.fix(med(s, 'waitP50'))} / ${f.range(s.waitP99, (x) => f.fix(x))} / ${f.fix(med(s, 'waitMax'))}`,
      med(s, 'jain') === null ? '—' : med(s, 'jain').toFixed(3),
      f.percent(med(s, 'overtook')),
      `${f.fix(med(s, 'sentPerCycle'))} / ${f.fix(med(s, 'callsPerCycle'))}`,
      f.fix(med(s, 'redisCpuPerCycle'), 1),
      f.fix(med(s, 'clientCpuPerCycle'), 1),
      f.num(med(s, 'connections')),
      safety(s, permits),
    ];
  });
}

function safety(s, permits) {
  const holders = med(s, 'maxHolders');
  return `${holders}/${permits} ${holders <= permits ? '✓' : '✗ UNSAFE'}${s.timeouts?.median ? ` (${s.timeouts.median} timeouts)` : ''}`;
}

const COLOCATED_COLUMNS = [
  'contender',
  'cycles/s median (min–max)',
  '× floor',
  '× bare list',
  '× redis-semaphore',
  '× lean client',
  'Redis CPU µs/cycle (min–max)',
  'Redis CPU × bare',
  'client CPU µs/cycle (min–max)',
  'client CPU × bare',
  'client CPU × lean',
  'Redis + client µs/cycle',
  '10⁶ / (Redis + client)',
  'cmds sent / Redis calls per cycle',
  'Jain',
  'max holders / permits',
];

/**
 * Co-located rows (Redis and every client on one vCPU): throughput ≈ 1 / (Redis + client CPU per
 * cycle), so the CPU per cycle and its ratio to the bare list are the figures that matter.
 */
function colocatedRows(summaries, contenderIds, { permits }) {
  return contenderIds.map((id) => {
    const s = summaries[id];
    const label = CONTENDERS[id]?.label ?? id;
    if (!s) return [label, 'n/a', ...COLOCATED_COLUMNS.slice(2).map(() => 'n/a')];
    const us = (x) => f.range(x, (v) => f.fix(v, 1));
    const total = med(s, 'cpuPerCycle');
    const bare = id === 'bare';
    return [
      label,
      f.range(s.cyclesPerSec),
      f.ratioRange(s.ratioFloor),
      bare ? '1.00×' : f.ratioRange(s.ratioBare),
      id === 'rs10' ? '1.00×' : f.ratioRange(s.ratioRs),
      id === 'lean' ? '1.00×' : f.ratioRange(s.ratioLean),
      us(s.redisCpuPerCycle),
      bare ? '1.00×' : f.ratioRange(s.redisCpuRatioBare),
      us(s.clientCpuPerCycle),
      bare ? '1.00×' : f.ratioRange(s.clientCpuRatioBare),
      id === 'lean' ? '1.00×' : f.ratioRange(s.clientCpuRatioLean),
      `${f.fix(total, 1)}${bare ? '' : ` = ${f.ratioRange(s.cpuRatioBare)}`}`,
      total ? f.num(1e6 / total) : '—',
      `${f.fix(med(s, 'sentPerCycle'))} / ${f.fix(med(s, 'callsPerCycle'))}`,
      med(s, 'jain') === null ? '—' : med(s, 'jain').toFixed(3),
      safety(s, permits),
    ];
  });
}

function section(title, summaries, contenderIds, opts) {
  const table = opts.colocated
    ? f.table(COLOCATED_COLUMNS, colocatedRows(summaries, contenderIds, opts))
    : f.table(COLUMNS, rows(summaries, contenderIds, opts));
  return `### ${title}\n\n${opts.note ? `${opts.note}\n\n` : ''}${table}\n`;
}

module.exports = { runContended, section, summarize, paired, pingpongCell, med, div };
