'use strict';
// The floors (sequential PING, sequential EVALSHA of `return 1`, the BLPOP/LPUSH ping-pong of one
// token between two connections) and one client locking and unlocking with nobody else around.
const { floorCell } = require('../lib/cell');
const { summary } = require('../lib/metrics');
const { runContended, pingpongCell, section, summarize, med } = require('../lib/contended');
const { loopContenders } = require('../lib/contenders-meta');
const f = require('../lib/format');

const FLOOR_METRICS = ['opsPerSec', 'callsPerOp', 'redisCpuPerOp', 'clientCpuPerOp', 'sentPerOp'];

module.exports = {
  id: 'uncontended',
  async run(ctx) {
    const floorCells = { ping: [], evalsha: [], pingpong: [] };
    // Each repetition measures the floors right before the contenders; "× floor" pairs them by repetition.
    const floorRunner = async (rep) => {
      for (const floor of ['ping', 'evalsha']) {
        const cell = await ctx.guard(`floor ${floor} rep ${rep + 1}`, () =>
          floorCell(ctx, { floor, warmMs: ctx.warmMs, durationMs: ctx.durationMs }),
        );
        if (cell) floorCells[floor].push({ ...cell, rep });
      }
      const pp = await ctx.guard(`floor ping-pong rep ${rep + 1}`, () => pingpongCell(ctx));
      if (pp) floorCells.pingpong.push({ ...pp, rep });
      const evalsha = floorCells.evalsha.find((cell) => cell.rep === rep);
      return evalsha ? { cyclesPerSec: evalsha.opsPerSec / 2 } : null;
    };
    const config = { id: 'uncontended', permits: 1, clients: 1, procs: 1, holdMs: 0 };
    const contenders = loopContenders(config);
    const uncontended = await runContended(ctx, config, contenders, { floorRunner });

    const floors = {};
    for (const name of ['ping', 'evalsha']) {
      floors[name] = Object.fromEntries(FLOOR_METRICS.map((k) => [k, summary(floorCells[name].map((c) => c[k]))]));
    }
    const pp = floorCells.pingpong.length ? summarize(floorCells.pingpong) : null;
    floors.pingpong = pp;
    ctx.floors = {
      ping: med(floors.ping, 'opsPerSec'),
      evalsha: med(floors.evalsha, 'opsPerSec'),
      pingpong: med(pp, 'cyclesPerSec'),
      pingpongGap: med(pp, 'gapP50'),
    };
    const lib = uncontended.summaries.lib;
    const pingRatio = summary(
      uncontended.cells.lib
        .map((cell) => [cell, floorCells.ping.find((p) => p.rep === cell.rep)])
        .filter(([, p]) => p)
        .map(([cell, p]) => cell.cyclesPerSec / (p.opsPerSec / 2)),
    );
    lib.ratioPing = pingRatio;
    const us = (x) => (x === null ? '—' : f.num(x * 1000));
    const floorTable = f.table(
      ['floor', 'ops/s median (min–max)', 'as a lock cycle floor', 'Redis CPU µs/op', 'client CPU µs/op'],
      [
        [
          'sequential PING (1 connection)',
          f.range(floors.ping.opsPerSec),
          `${f.num(ctx.floors.ping / 2)} cycles/s (2 round trips)`,
          f.fix(med(floors.ping, 'redisCpuPerOp'), 1),
          f.fix(med(floors.ping, 'clientCpuPerOp'), 1),
        ],
        [
          'sequential EVALSHA `return 1`',
          f.range(floors.evalsha.opsPerSec),
          `${f.num(ctx.floors.evalsha / 2)} cycles/s (2× EVALSHA)`,
          f.fix(med(floors.evalsha, 'redisCpuPerOp'), 1),
          f.fix(med(floors.evalsha, 'clientCpuPerOp'), 1),
        ],
        [
          'BLPOP/LPUSH ping-pong (2 connections, 1 token; LPUSH and the next BLPOP sent together)',
          pp ? `${f.range(pp.cyclesPerSec)} hand-offs/s` : '—',
          pp
            ? `hand-off (LPUSH called → the other's BLPOP returns) p50 ${us(med(pp, 'gapP50'))} µs, p99 ${us(med(pp, 'gapP99'))} µs`
            : '—',
          pp ? f.fix(med(pp, 'redisCpuPerCycle'), 1) : '—',
          pp ? f.fix(med(pp, 'clientCpuPerCycle'), 1) : '—',
        ],
      ],
    );
    const markdown = [
      '## Floors\n',
      floorTable,
      '',
      section('Uncontended: one client, lock + unlock, hold 0', uncontended.summaries, contenders, {
        permits: 1,
        colocated: ctx.colocated,
        note: `× floor = against the 2× EVALSHA floor measured in the same repetition (median ${f.num(ctx.floors.evalsha / 2)} cycles/s); against 2× PING (median ${f.num(ctx.floors.ping / 2)}) this library is ${f.ratioRange(pingRatio)}.`,
      }),
    ].join('\n');
    return {
      id: 'uncontended',
      markdown,
      data: { floors, uncontended: uncontended.summaries, cells: { floors: floorCells, ...uncontended.cells } },
    };
  },
};
