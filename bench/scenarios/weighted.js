'use strict';
// Weighted permits (issue 32): a semaphore of 8, 16 clients taking 1, 2 or 3 permits a lock, against
// the same library with weight 1 each and the bare list, beside the strict FIFO that an in-process
// weighted semaphore (async-mutex's `acquire(weight)`) keeps: its ideal, printed, not measured.
const { runContended, section, med, paired } = require('../lib/contended');
const { CONTENDERS } = require('../lib/contenders-meta');
const f = require('../lib/format');

const CONFIGS = [
  {
    id: 'weighted-sem8-16x1-hold1',
    title: 'Semaphore of 8, 16 clients in one process taking 1, 2, 3 permits (by turns), hold 1 ms',
    permits: 8,
    clients: 16,
    procs: 1,
    holdMs: 1,
  },
];

/** The weighted library, the same library with weight 1 each, and the bare list (weight 1). */
const CONTENDER_IDS = ['libWeighted', 'lib', 'bare'];

module.exports = {
  id: 'weighted',
  CONFIGS,
  async run(ctx) {
    const parts = [];
    const data = {};
    for (const config of CONFIGS) {
      if (ctx.only && !ctx.only.some((o) => config.id.startsWith(o))) continue;
      ctx.log(`  ${config.title}`);
      const { summaries, cells } = await runContended(ctx, config, CONTENDER_IDS);
      const weights = CONTENDERS.libWeighted.options.weights;
      const meanWeight = weights.reduce((x, y) => x + y, 0) / weights.length;
      const hold = med(summaries.libWeighted, 'holdMean');
      const perSec = (s) => f.range(s?.permitsPerSec ?? null);
      const vsUnweighted = paired(cells.libWeighted, cells.lib, 'permitsPerSec');
      const notes = [
        `Permits/s (grants × their weight): weighted ${perSec(summaries.libWeighted)}, weight 1 ${perSec(summaries.lib)}, bare list ${perSec(summaries.bare)}; weighted × weight 1 (paired) ${f.ratioRange(vsUnweighted)}.`,
        hold === null
          ? ''
          : `Strict FIFO across weights (what async-mutex's weighted Semaphore keeps in one process; not installed here, so its ideal, not a measurement): Jain 1.000, 0% overtook, wait ≈ clients × mean weight × hold / permits = ${config.clients} × ${f.fix(meanWeight)} × ${f.fix(hold)} ms / ${config.permits} = ${f.fix((config.clients * meanWeight * hold) / config.permits)} ms; weight 1 each: ${f.fix((config.clients * hold) / config.permits)} ms.`,
        '"overtook" counts a grant while a caller that called more than 1 ms earlier still waits: with weights, a grant of 1 while an earlier caller of 3 waits.',
      ];
      parts.push(
        section(config.title, summaries, CONTENDER_IDS, {
          permits: config.permits,
          colocated: ctx.colocated,
          note: notes.filter(Boolean).join(' '),
        }),
      );
      data[config.id] = { config, summaries, cells, vsUnweighted };
    }
    return { id: 'weighted', markdown: `## Weighted permits\n\n${parts.join('\n')}`, data };
  },
};
