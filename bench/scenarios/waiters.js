'use strict';
// 1,000 waiters in one process queue behind a held mutex; then the holder releases and each waiter,
// once served, releases at once. All served? In call order? How many connections? How much memory?
const { burstCell } = require('../lib/cell');
const { summary } = require('../lib/metrics');
const { CONTENDERS, ALL } = require('../lib/contenders-meta');
const f = require('../lib/format');

const METRICS = [
  'served',
  'timeouts',
  'drainMs',
  'cyclesPerSec',
  'grantAfterReleaseP50',
  'grantAfterReleaseMax',
  'fifoViolations',
  'drainSentPerCycle',
  'drainCallsPerCycle',
  'drainRedisCpuPerCycle',
  'connections',
  'connectedWhileBlocked',
  'rssPerWaiterKB',
  'heapPerWaiterKB',
  'redisMemoryPerWaiterKB',
  'idleCallsPerSec',
  'idleSentPerSec',
  'idleRedisCpuPerSec',
];

async function runBursts(
  ctx,
  ids,
  { waiters, idleMs, settleMs, fresh, optionsFor = () => undefined, repsFor = () => ctx.reps },
) {
  const out = {};
  for (const id of ids) out[id] = [];
  const reps = Math.max(...ids.map(repsFor));
  for (let rep = 0; rep < reps; rep++) {
    for (const id of ids) {
      if (rep >= repsFor(id)) continue;
      const meta = CONTENDERS[id] ?? CONTENDERS[id.split(':')[0]];
      const cell = await ctx.guard(`${waiters} waiters ${id} rep ${rep + 1}`, () =>
        burstCell(ctx, {
          contender: meta.contender,
          options: optionsFor(id) ?? meta.options,
          waiters,
          idleMs,
          settleMs,
          drainMs: ctx.drainMs + 30000,
          fresh,
        }),
      );
      if (cell) out[id].push(cell);
    }
  }
  const summaries = {};
  for (const id of ids) {
    summaries[id] = out[id].length
      ? Object.fromEntries(METRICS.map((metric) => [metric, summary(out[id].map((c) => c[metric]))]))
      : null;
  }
  return { cells: out, summaries };
}

module.exports = {
  id: 'waiters',
  runBursts,
  async run(ctx) {
    // --quick: 200 waiters, as polling peers take seconds to serve 1,000.
    const WAITERS = ctx.quick ? 200 : 1000;
    // Fresh worker processes, so the memory figures start from a clean process.
    // The polling peers take 3–12 s each to serve 1,000 waiters: one run of each, as context; this
    // library and the bare list run every repetition.
    const repsFor = (id) => (id === 'lib' || id === 'bare' ? ctx.reps : 1);
    const { cells, summaries } = await runBursts(ctx, ALL, {
      waiters: WAITERS,
      idleMs: 200,
      settleMs: ctx.quick ? 200 : 500,
      fresh: true,
      repsFor,
    });
    const columns = [
      'contender',
      'served',
      'drain ms (min–max)',
      'grants/s while draining',
      'grant after release p50 / max ms',
      'out of call order',
      'cmds sent / Redis calls per grant',
      'Redis CPU µs/grant',
      'connections opened / open while blocked',
      'client RSS KB/waiter',
      'Redis memory KB/waiter',
    ];
    const m = (s, k) => s?.[k]?.median ?? null;
    const rows = ALL.map((id) => {
      const s = summaries[id];
      if (!s) return [CONTENDERS[id].label, ...columns.slice(1).map(() => 'n/a')];
      return [
        `${CONTENDERS[id].label}${repsFor(id) === 1 && ctx.reps > 1 ? ' (1 run)' : ''}`,
        `${f.num(m(s, 'served'))}/${f.num(WAITERS)}${m(s, 'timeouts') ? ` (${m(s, 'timeouts')} timed out)` : ''}`,
        f.range(s.drainMs, (x) => f.num(x)),
        f.num(m(s, 'cyclesPerSec')),
        `${f.fix(m(s, 'grantAfterReleaseP50'))} / ${f.fix(m(s, 'grantAfterReleaseMax'))}`,
        f.percent(m(s, 'fifoViolations')),
        `${f.fix(m(s, 'drainSentPerCycle'))} / ${f.fix(m(s, 'drainCallsPerCycle'))}`,
        f.fix(m(s, 'drainRedisCpuPerCycle'), 1),
        `${f.num(m(s, 'connections'))} / ${f.num(m(s, 'connectedWhileBlocked'))}`,
        f.fix(m(s, 'rssPerWaiterKB'), 1),
        f.fix(m(s, 'redisMemoryPerWaiterKB'), 2),
      ];
    });
    const markdown = [
      `## ${WAITERS.toLocaleString('en-US')} waiters in one process\n`,
      `A holder takes the mutex; ${WAITERS} lock calls are made in order in the same process and left waiting; the holder releases; each waiter releases the moment it is served. "Out of call order" = share of waiters served after a waiter that called later. This library runs with its default pool (maxBlockingConnections 10): connections opened include its main connection. Memory: growth of the client process's RSS, and of Redis used_memory (connections included), from before the waiters to while all wait, per waiter.\n`,
      f.table(columns, rows),
      '',
    ].join('\n');
    return { id: 'waiters', markdown, data: { waiters: WAITERS, summaries, cells } };
  },
};
