'use strict';
// 100 waiters blocked behind a held mutex: what they send while they wait (INFO commandstats deltas).
const { CONTENDERS, ALL } = require('../lib/contenders-meta');
const { runBursts } = require('./waiters');
const f = require('../lib/format');

const WAITERS = 100;
const LIB_VARIANTS = {
  'lib:pool100': {
    label: 'redis-token-semaphore (maxBlockingConnections 100; waitSlice 10 s default)',
    options: { maxBlockingConnections: 100 },
  },
  'lib:slice1s': {
    label: 'redis-token-semaphore (maxBlockingConnections 100, waitSlice 1 s)',
    options: { maxBlockingConnections: 100, waitSlice: 1000 },
  },
};

module.exports = {
  id: 'idle',
  async run(ctx) {
    // --quick: the 1 s waitSlice variant needs a window longer than 1 s to show anything.
    const variants = Object.keys(LIB_VARIANTS).filter((id) => !(ctx.quick && id === 'lib:slice1s'));
    const ids = ['lib', ...variants, ...ALL.filter((id) => id !== 'lib')];
    const idleMs = ctx.idleMs;
    const { cells, summaries } = await runBursts(ctx, ids, {
      waiters: WAITERS,
      idleMs,
      settleMs: ctx.quick ? 200 : 400,
      fresh: false,
      // A polling peer's idle rate is steady: one run each; this library and the bare list every repetition.
      repsFor: (id) => (id.startsWith('lib') || id === 'bare' ? ctx.reps : 1),
      optionsFor: (id) => LIB_VARIANTS[id]?.options,
    });
    const m = (s, k) => s?.[k]?.median ?? null;
    const once = (id) => (!id.startsWith('lib') && id !== 'bare' && ctx.reps > 1 ? ' (1 run)' : '');
    const label = (id) =>
      (LIB_VARIANTS[id]?.label ??
        (id === 'lib' ? 'redis-token-semaphore (defaults: pool 10, waitSlice 10 s)' : CONTENDERS[id].label)) + once(id);
    const columns = [
      'contender',
      'Redis calls/s while 100 wait (min–max)',
      'cmds sent/s',
      'Redis CPU while waiting',
      'open connections',
    ];
    const rows = ids.map((id) => {
      const s = summaries[id];
      if (!s) return [label(id), 'n/a', 'n/a', 'n/a', 'n/a'];
      return [
        label(id),
        f.range(s.idleCallsPerSec, (x) => f.fix(x, 1)),
        f.fix(m(s, 'idleSentPerSec'), 1),
        `${f.fix((m(s, 'idleRedisCpuPerSec') ?? 0) * 100, 1)}% of a core`,
        f.num(m(s, 'connectedWhileBlocked')),
      ];
    });
    const markdown = [
      `## Idle: ${WAITERS} waiters blocked\n`,
      `${WAITERS} lock calls wait behind a held mutex for ${f.num(idleMs)} ms (measured after they settle). A blocked BLMOVE/BLPOP sends nothing; this library re-arms each blocking call once per waitSlice (10 s by default), which the 1 s variant shows inside the window: divide its rate by 10 for the steady state of 100 waiters blocked in Redis on the default slice. With the default pool of 10, only 10 waiters block in Redis and the rest queue in the process.\n`,
      f.table(columns, rows),
      '',
    ].join('\n');
    return { id: 'idle', markdown, data: { summaries, cells } };
  },
};
