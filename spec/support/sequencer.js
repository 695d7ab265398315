'use strict';
// Orders spec files for jest: the known slow ones first, so that two workers finish together on a fresh clone too.
const Sequencer = require('@jest/test-sequencer').default;

/**
 * The slowest spec files, slowest first (measured per file with `npx jest --json`). jest orders by
 * the durations it cached from earlier runs, else by file size; a fresh clone (CI) has no cache,
 * and a small, slow file started last keeps one worker busy while the other idles.
 */
const SLOWEST = [
  'spec/package/package.spec.ts',
  'spec/tools/examples.spec.ts',
  'spec/tools/cli.spec.ts',
  'spec/topology/cluster.spec.ts',
  'spec/tools/operator-topology.spec.ts',
  'spec/protocol/recreation.spec.ts',
  'spec/protocol/grant-identity.spec.ts',
  'spec/faults/network-faults.spec.ts',
  'spec/faults/crash.spec.ts',
  'spec/tools/dashboard.browser.spec.ts',
  'spec/faults/abort-storm.spec.ts',
  'spec/faults/server-faults.spec.ts',
  'spec/package/docs.spec.ts',
  'spec/tools/demo.spec.ts',
  'spec/package/types.spec.ts',
  'spec/tools/operator.spec.ts',
  'spec/faults/bounds.spec.ts',
  'spec/api/cancellation.spec.ts',
];

class SlowestFirst extends Sequencer {
  sort(tests) {
    const rank = (test) => {
      const index = SLOWEST.findIndex((path) => test.path.endsWith(path));
      return index < 0 ? SLOWEST.length : index;
    };
    // Array.prototype.sort is stable: the others keep jest's order (cached durations, else size).
    return [...super.sort(tests)].sort((a, b) => rank(a) - rank(b));
  }
}

module.exports = SlowestFirst;
