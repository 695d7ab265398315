/**
 * The jest passes of `npm test` (package.json), run as one jest run of five projects with three
 * workers on CI's two CPUs (TEST_ALL_CLIENTS=1, `npm run test:clients`: most specs wait for
 * timeouts, failovers and restarts far more than they compute, and spec/support/sequencer.js puts
 * those that keep a CPU busy between them), or one at a time (`npm run test:v5`, or
 * REDIS_CLIENT=redis5 npx jest …):
 *
 *   v4        REDIS_CLIENT=redis    every spec, on node-redis v4 (the first pass)
 *   v5        REDIS_CLIENT=redis5   the client-dependent specs, on node-redis v5
 *   v6        REDIS_CLIENT=redis6   the same on node-redis v6 (RESP3 by default)
 *   ioredis6  REDIS_CLIENT=ioredis6 the API specs and the ioredis spec, semaphores on ioredis 6
 *   ioredis5  REDIS_CLIENT=ioredis  the ioredis spec and the behaviour suite on ioredis 5
 *
 * and then, apart, the server matrix (`npm run test:servers`, spec/support/server-matrix.js,
 * TEST_SERVER_MATRIX=redis-6.2 or valkey-8): the server-dependent specs on Redis 6.2.16 and Valkey
 * 8.0.1, on node-redis v4.
 *
 * REDIS_CLIENT picks the node-redis major a project uses, library and specs alike: `redis` (v4,
 * the default), `redis5` or `redis6` (aliased dev dependencies). Every `require('redis')` resolves to it.
 * `ioredis` or `ioredis6`: the specs' semaphores get an ioredis client (spec/support/redis.ts).
 * Each worker has a redis-server of its own (spec/support/global-setup.ts), so specs in parallel
 * never see each other's clients, blocked waiters, SLOWLOG, CONFIG SET or script cache.
 */
const CLIENTS = { v4: 'redis', v5: 'redis5', v6: 'redis6', ioredis6: 'ioredis6', ioredis5: 'ioredis' };
const requested = process.env.REDIS_CLIENT || 'redis';
if (!Object.values(CLIENTS).includes(requested)) {
  throw new Error(`REDIS_CLIENT must be redis, redis5, redis6, ioredis or ioredis6, got ${requested}`);
}
const matrix = process.env.TEST_SERVER_MATRIX;
if (matrix !== undefined && !['redis-6.2', 'valkey-8'].includes(matrix)) {
  throw new Error(`TEST_SERVER_MATRIX must be redis-6.2 or valkey-8, got ${matrix}`);
}

/** A literal string as a regular expression. */
const literal = (text) => text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');

/**
 * Specs whose outcome does not depend on the client the jest process runs, so only the v4 pass
 * runs them (a v5 or v6 pass would run exactly what v4 ran):
 */
const clientIndependent = [
  // Their subject runs in child processes of its own, on the installed `redis` (v4): the package,
  // its docs, the examples, the demo and the CLI (whose specs run most commands through the built
  // CLI's main() in the worker: v4 too, in this pass). (The docs spec also pins the export list.)
  'spec/package/package.spec.ts',
  'spec/package/exit-code.spec.ts',
  'spec/package/docs.spec.ts',
  'spec/package/types.spec.ts',
  'spec/package/readme-snippets.spec.ts',
  'spec/tools/examples.spec.ts',
  'spec/tools/demo.spec.ts',
  'spec/tools/cli.spec.ts',
  'spec/tools/dashboard.browser.spec.ts',
  'spec/tools/hand-over-example.spec.ts',
  'spec/tools/opentelemetry-example.spec.ts',
  'spec/tools/operator.spec.ts',
  'spec/tools/operator-topology.spec.ts',
  // No client at all: the export list, the one-timer deadline queue (no Redis), and the scripts'
  // headers against the registry and the argument builders (files and values, no Redis).
  'spec/package/exports.spec.ts',
  'spec/api/deadline-queue.spec.ts',
  'spec/protocol/script-headers.spec.ts',
  // The Lua scripts with raw KEYS and ARGV. None calls redis.setresp, so its replies reach every
  // client as integers, bulk strings, arrays and nulls, decoded alike by v4, v5, v6 (RESP3) and
  // ioredis; the library's decoding of them on each client is what the API specs check in every pass.
  'spec/protocol/scripts.spec.ts',
  'spec/protocol/lease-index.spec.ts',
  'spec/protocol/recreation.spec.ts',
  // The formats the Ruby gem shares (key names, GRABBED records, token lists), which no client changes.
  'spec/protocol/interop-ruby.spec.ts',
];

/**
 * Specs whose outcome depends on the server, which the server matrix runs again on Redis 6.2.16
 * (the oldest the README supports: no Functions, so every call goes by EVALSHA) and Valkey 8.0.1:
 */
const serverDependent = [
  // The Lua: every script with raw KEYS and ARGV, the LEASES index, and re-creation in batches
  // (whose random search is left out below).
  'spec/protocol/scripts.spec.ts',
  'spec/protocol/lease-index.spec.ts',
  'spec/protocol/recreation.spec.ts',
  // The one-holder contract and counting semantics end to end (FCALL on Valkey, EVALSHA on 6.2).
  'spec/api/behaviour.spec.ts',
  'spec/api/semaphore.spec.ts',
  // Weighted grants: LPOP with a count (6.2), collections by EVALSHA on 6.2 and FCALL on Valkey.
  'spec/api/weighted.spec.ts',
  // The server check at first use (version, INFO).
  'spec/api/server-version.spec.ts',
  // Cancellation by CLIENT UNBLOCK, against a stalled server (DEBUG SLEEP:
  // Valkey freezes TIME inside a script, so a Lua loop cannot time a stall there).
  'spec/api/cancellation.spec.ts',
  // Faults on the server: restarts with and without AOF, eviction, CLIENT PAUSE, maxmemory.
  'spec/faults/server-faults.spec.ts',
];
/** The function library (FCALL, FUNCTION LOAD/FLUSH): Valkey has Functions, Redis 6.2 has none. */
const functionsOnly = ['spec/protocol/functions.spec.ts', 'spec/faults/function-library.spec.ts'];
const matrixSpecs = matrix === undefined ? [] : [...serverDependent, ...(matrix === 'valkey-8' ? functionsOnly : [])];
/**
 * Tests of those specs a matrix server cannot run because of what the test itself sends, not the
 * library (whose calls must work on every server the README names), by the name jest prints:
 */
const notOnServer = {
  'redis-6.2': [
    // Reads each key's deadline with PEXPIRETIME (Redis 7.0).
    'gives every key one absolute deadline, extended to the last registration lease',
    // Makes its one-node cluster with CLUSTER ADDSLOTSRANGE (7.0), and expects FCALL on a single Redis.
    'a plain (not Cluster) client on a Redis Cluster node',
  ],
  'valkey-8': [],
};
/** Left out on every server of the matrix: the v4 pass runs it, and it is the matrix's slowest by far. */
const notInMatrix = [
  // The random search over histories of 24,000 tokens; the deterministic batch tests of the same spec run.
  'whatever clients do between batches, each token ends up in one place exactly',
];
const skipped = matrix === undefined ? [] : [...notInMatrix, ...notOnServer[matrix]].map(literal);

/**
 * Tests that judge timing under load (a storm of connection resets and its stuck-release bound, the
 * longest PING during a large creation, the abort storm's grant rate), by spec and the name jest
 * prints (a describe block's or a test's, at its start): `npm run test:clients` runs them after the
 * parallel run, one file at a time (TEST_ALONE=1), so the other CPU is not busy with another spec
 * meanwhile. The other tests of those specs run in the parallel run, as they did before.
 */
const alone = [
  // grant-identity: refreshes every 33 ms with a bound on losses reported during a hold; a watchdog
  // in another process reclaiming during a stall of this one; the storm.
  ['spec/protocol/grant-identity.spec.ts', 'a refresh that crosses a release'],
  ['spec/protocol/grant-identity.spec.ts', 'an event-loop stall past the lease'],
  ['spec/protocol/grant-identity.spec.ts', 'connection resets every 100–400 ms under load'],
  ['spec/faults/bounds.spec.ts', 'large semaphores never block Redis for long'],
  ['spec/faults/abort-storm.spec.ts', 'an abort storm'],
  // weighted-fairness: the weight-3 waiter's arrival is read by polling CLIENT LIST while 16 callers loop.
  ['spec/api/weighted-fairness.spec.ts', 'a weight-3 waiter among looping weight-1 callers'],
];
const aloneRun = process.env.TEST_ALONE === '1';
/** Specs all of whose tests are in `alone`: the parallel run leaves the file out. */
const aloneWhole = ['spec/faults/abort-storm.spec.ts'];
const aloneNames = `(?:${alone.map(([, name]) => literal(name)).join('|')})`;
/** The parallel run of every client (`npm run test:clients`), which leaves the timing tests to the alone run. */
const parallelRun = process.env.TEST_ALL_CLIENTS === '1' && !aloneRun && matrix === undefined;

/** What is specific to ioredis runs only when the semaphores get an ioredis client. */
const ioredisOnly = ['spec/topology/ioredis.spec.ts'];
/** The specs of the ioredis projects (the API is what a client changes; v5 gets a shorter list). */
const ioredisSpecs = {
  ioredis6: ['spec/api/**/*.spec.ts', 'spec/topology/ioredis.spec.ts'],
  ioredis: ['spec/topology/ioredis.spec.ts', 'spec/api/behaviour.spec.ts'],
};

/** The project of one client: which specs run, and how `redis` resolves. */
function clientProject(name) {
  const ioredis = name.startsWith('ioredis');
  /** An ioredis run hands the semaphores an ioredis client; everything else uses node-redis v4. */
  const nodeRedis = ioredis ? 'redis' : name;
  // Globs, not testRegex: a run given --testMatch (spec/package/exit-code.spec.ts) replaces them.
  const listed = matrix !== undefined ? matrixSpecs : ioredisSpecs[name];
  const only = aloneRun
    ? [...new Set(alone.map(([path]) => path))].filter((path) => listed === undefined || listed.includes(path))
    : listed;
  return {
    displayName: Object.keys(CLIENTS).find((key) => CLIENTS[key] === name),
    rootDir: __dirname,
    // Transpiled file by file (tsconfig.jest.json sets isolatedModules): `npm test` type-checks the
    // whole project once (`npm run typecheck`) instead of ts-jest checking each spec in every pass,
    // which took about 3 s per spec file, cold, in each of the five passes.
    transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.jest.json' }] },
    testEnvironment: 'node',
    roots: ['<rootDir>/spec'],
    testMatch:
      only === undefined
        ? ['**/*.spec.ts']
        : only.length === 0
          ? ['<rootDir>/spec/none']
          : only.map((path) => `<rootDir>/${path}`),
    moduleNameMapper: nodeRedis === 'redis' ? {} : { '^redis$': nodeRedis },
    testPathIgnorePatterns: [
      '/node_modules/',
      ...(name === 'redis' ? [] : clientIndependent),
      ...(ioredis ? [] : ioredisOnly),
      ...(parallelRun ? aloneWhole : []),
    ],
    // RTS_CLIENT: the REDIS_CLIENT of this project, which project-client.ts sets for its specs.
    globals: { RTS_CLIENT: name },
    globalSetup: '<rootDir>/spec/support/global-setup.ts',
    setupFiles: [
      '<rootDir>/spec/support/setup-realm.ts',
      '<rootDir>/spec/support/worker-server.ts',
      '<rootDir>/spec/support/project-client.ts',
    ],
    globalTeardown: '<rootDir>/spec/support/global-teardown.ts',
  };
}

const everyClient = process.env.TEST_ALL_CLIENTS === '1' && matrix === undefined;

/** @type {import('jest').Config} */
module.exports = {
  ...(everyClient ? { projects: Object.values(CLIENTS).map(clientProject) } : clientProject(requested)),
  ...(skipped.length > 0
    ? { testNamePattern: `^(?!.*(?:${skipped.join('|')}))` }
    : aloneRun
      ? { testNamePattern: `^${aloneNames}` }
      : parallelRun
        ? { testNamePattern: `^(?!${aloneNames})` }
        : {}),
  testSequencer: '<rootDir>/spec/support/sequencer.js',
  // Beside another worker a spec's child processes start slower than alone (a CLI spec passed 30 s).
  testTimeout: 60000,
  // A client or child process a spec leaves open would keep jest (and CI) waiting forever after the
  // run: the global teardown names what was left, and the run ends anyway with its real exit code.
  forceExit: true,
};
