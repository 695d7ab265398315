'use strict';
// Mutex (8 and 32 clients in one process, 8 clients in 8 processes) and semaphore of 4 (32 clients),
// each with hold 0 and 1 ms (co-located: hold 0 only, unless --only names a hold-1 cell in full).
const { runContended, section, med } = require('../lib/contended');
const { loopContenders } = require('../lib/contenders-meta');
const f = require('../lib/format');

const CONFIGS = [
  {
    id: 'mutex-8x1-hold0',
    title: 'Mutex, 8 clients in one process, hold 0',
    permits: 1,
    clients: 8,
    procs: 1,
    holdMs: 0,
  },
  {
    id: 'mutex-8x1-hold1',
    title: 'Mutex, 8 clients in one process, hold 1 ms',
    permits: 1,
    clients: 8,
    procs: 1,
    holdMs: 1,
  },
  {
    id: 'mutex-32x1-hold0',
    title: 'Mutex, 32 clients in one process, hold 0',
    permits: 1,
    clients: 32,
    procs: 1,
    holdMs: 0,
  },
  {
    id: 'mutex-32x1-hold1',
    title: 'Mutex, 32 clients in one process, hold 1 ms',
    permits: 1,
    clients: 32,
    procs: 1,
    holdMs: 1,
  },
  {
    id: 'mutex-8x8-hold0',
    title: 'Mutex, 8 clients in 8 processes, hold 0',
    permits: 1,
    clients: 8,
    procs: 8,
    holdMs: 0,
  },
  {
    id: 'mutex-8x8-hold1',
    title: 'Mutex, 8 clients in 8 processes, hold 1 ms',
    permits: 1,
    clients: 8,
    procs: 8,
    holdMs: 1,
  },
  {
    id: 'sem4-32x1-hold0',
    title: 'Semaphore of 4, 32 clients in one process, hold 0',
    permits: 4,
    clients: 32,
    procs: 1,
    holdMs: 0,
  },
  {
    id: 'sem4-32x1-hold1',
    title: 'Semaphore of 4, 32 clients in one process, hold 1 ms',
    permits: 4,
    clients: 32,
    procs: 1,
    holdMs: 1,
  },
];

module.exports = {
  id: 'contended',
  CONFIGS,
  async run(ctx) {
    const parts = [];
    const data = {};
    for (const config of CONFIGS) {
      if (ctx.only && !ctx.only.some((o) => config.id.startsWith(o))) continue;
      // Co-located, a hold of 1 ms only adds idle time: the hold-0 cells measure CPU per cycle.
      if (ctx.colocated && config.holdMs > 0 && !ctx.only?.includes(config.id)) continue;
      ctx.log(`  ${config.title}`);
      const mutex = config.permits === 1;
      const contenders = loopContenders(config);
      const { summaries, cells, floor, floorCells } = await runContended(ctx, config, contenders, { pingpong: mutex });
      const notes = [];
      if (mutex) {
        notes.push(
          `× floor = against the BLPOP ping-pong measured in the same repetition (median ${f.num(med(floor, 'cyclesPerSec'))} hand-offs/s, hand-off p50 ${f.num(med(floor, 'gapP50') * 1000)} µs).`,
        );
      } else notes.push('× floor: no floor for 4 tokens; the bare list is the reference.');
      if (config.holdMs > 0) {
        const hold = med(summaries.lib, 'holdMean');
        if (hold !== null) {
          notes.push(
            `FIFO ideal wait ≈ clients × hold / permits = ${config.clients} × ${f.fix(hold)} ms (measured mean hold) / ${config.permits} = ${f.fix((config.clients * hold) / config.permits)} ms.`,
          );
        }
      }
      parts.push(
        section(config.title, summaries, contenders, {
          permits: config.permits,
          colocated: ctx.colocated,
          note: notes.join(' '),
        }),
      );
      data[config.id] = { config, summaries, cells, floor, floorCells };
    }
    return { id: 'contended', markdown: `## Contended\n\n${parts.join('\n')}`, data };
  },
};
