'use strict';
// Orders spec files for jest: the known slow ones first, and those that keep a CPU busy between those that mostly wait.
const Sequencer = require('@jest/test-sequencer').default;

/**
 * The slowest spec files, slowest first (wall seconds of one project's run in CI, 2026-11-28), and
 * whether they keep a CPU busy (child processes, tsc, a browser, a random search: `cpu`) or mostly
 * wait (timeouts, failovers, restarts: `wait`; network-faults used 6 CPU seconds in 51 s). jest
 * orders by the durations it cached from earlier runs, else by file size; a fresh clone (CI) has no
 * cache, and a small, slow file started last keeps one worker busy while the others idle.
 */
const SLOWEST = [
  ['spec/tools/cli.spec.ts', 'cpu'],
  ['spec/faults/network-faults.spec.ts', 'wait'],
  ['spec/topology/sentinel.spec.ts', 'wait'],
  ['spec/faults/crash.spec.ts', 'cpu'],
  ['spec/faults/server-faults.spec.ts', 'wait'],
  ['spec/protocol/weighted-model.spec.ts', 'wait'],
  ['spec/faults/weighted-chaos.spec.ts', 'cpu'],
  ['spec/api/weighted-fairness.spec.ts', 'wait'],
  ['spec/package/package.spec.ts', 'cpu'],
  ['spec/tools/dashboard.browser.spec.ts', 'cpu'],
  ['spec/api/cancellation.spec.ts', 'wait'],
  ['spec/tools/operator.spec.ts', 'cpu'],
  ['spec/topology/cluster.spec.ts', 'wait'],
  ['spec/tools/admin.spec.ts', 'wait'],
  ['spec/tools/examples.spec.ts', 'cpu'],
  ['spec/protocol/interop-ruby.spec.ts', 'cpu'],
  ['spec/tools/operator-topology.spec.ts', 'cpu'],
  ['spec/faults/abort-storm.spec.ts', 'cpu'],
  ['spec/api/leases.spec.ts', 'wait'],
  ['spec/package/types.spec.ts', 'cpu'],
  ['spec/faults/bounds.spec.ts', 'wait'],
  ['spec/api/locks.spec.ts', 'wait'],
  ['spec/protocol/grant-identity.spec.ts', 'wait'],
  ['spec/api/pool-share-orders.spec.ts', 'wait'],
  ['spec/protocol/model.spec.ts', 'cpu'],
  ['spec/package/docs.spec.ts', 'cpu'],
  ['spec/topology/replication.spec.ts', 'wait'],
  ['spec/protocol/recreation.spec.ts', 'cpu'],
  ['spec/tools/hand-over-example.spec.ts', 'wait'],
  ['spec/tools/demo.spec.ts', 'cpu'],
  ['spec/package/exit-code.spec.ts', 'cpu'],
];

class SlowestFirst extends Sequencer {
  sort(tests) {
    const rank = (test) => {
      const index = SLOWEST.findIndex(([path]) => test.path.endsWith(path));
      return index < 0 ? SLOWEST.length : index;
    };
    // Array.prototype.sort is stable: the others keep jest's order (cached durations, else size).
    const ranked = [...super.sort(tests)].sort((a, b) => rank(a) - rank(b));
    const known = ranked.filter((test) => rank(test) < SLOWEST.length);
    const busy = known.filter((test) => SLOWEST[rank(test)][1] === 'cpu');
    const waiting = known.filter((test) => SLOWEST[rank(test)][1] === 'wait');
    // One that keeps a CPU busy, then two that mostly wait, while both last: three workers on two
    // CPUs then seldom run three busy specs at once.
    const merged = [];
    while (busy.length > 0 || waiting.length > 0) {
      if (busy.length > 0) merged.push(busy.shift());
      merged.push(...waiting.splice(0, 2));
    }
    return [...merged, ...ranked.filter((test) => rank(test) >= SLOWEST.length)];
  }
}

module.exports = SlowestFirst;
