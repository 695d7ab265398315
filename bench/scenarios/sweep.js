'use strict';
// Mutex, hold 0, one process, client count 1 → 256: cycles/s and p99 wait, for the chart.
const { loopCell } = require('../lib/cell');
const { CONTENDERS, ALL } = require('../lib/contenders-meta');
const f = require('../lib/format');

module.exports = {
  id: 'sweep',
  async run(ctx) {
    const counts = ctx.sweepClients;
    const points = Object.fromEntries(ALL.map((id) => [id, []]));
    for (const clients of counts) {
      for (const id of ALL) {
        const meta = CONTENDERS[id];
        const cell = await ctx.guard(`sweep ${clients} ${id}`, () =>
          loopCell(ctx, {
            contender: meta.contender,
            options: meta.options,
            permits: 1,
            clients,
            procs: 1,
            holdMs: 0,
            warmMs: ctx.sweepWarmMs,
            durationMs: ctx.sweepDurationMs,
            drainMs: ctx.drainMs,
          }),
        );
        points[id].push({
          clients,
          cyclesPerSec: cell?.cyclesPerSec ?? null,
          waitP99: cell?.waitP99 ?? null,
          jain: cell?.jain ?? null,
          maxHolders: cell?.maxHolders ?? null,
        });
      }
    }
    const columns = ['contender', ...counts.map((n) => `${n} clients`)];
    const rows = ALL.map((id) => [
      CONTENDERS[id].label,
      ...points[id].map((p) => (p.cyclesPerSec === null ? '—' : `${f.num(p.cyclesPerSec)} / ${f.fix(p.waitP99)} ms`)),
    ]);
    const markdown = [
      '## Client-count sweep (mutex, hold 0, one process; one run per point)\n',
      `Each cell: cycles/s / p99 acquire wait. Charted in the .svg beside this file.\n`,
      f.table(columns, rows),
      '',
    ].join('\n');
    return { id: 'sweep', markdown, data: { counts, points } };
  },
};
