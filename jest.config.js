/**
 * REDIS_CLIENT picks the node-redis major the whole run uses, library and specs alike: `redis` (v4,
 * the default), `redis5` or `redis6` (aliased dev dependencies). Every `require('redis')` resolves to it.
 * `ioredis` or `ioredis6`: the specs' semaphores get an ioredis client (spec/support/redis.ts).
 */
const requested = process.env.REDIS_CLIENT || 'redis';
if (!['redis', 'redis5', 'redis6', 'ioredis', 'ioredis6'].includes(requested)) {
  throw new Error(`REDIS_CLIENT must be redis, redis5, redis6, ioredis or ioredis6, got ${requested}`);
}
/** An ioredis run (`ioredis`: v5, `ioredis6`) hands the semaphores an ioredis client; everything else uses node-redis v4. */
const client = requested.startsWith('ioredis') ? 'redis' : requested;

/**
 * Specs whose subject never runs on the jest process's client: the package, its docs, the examples
 * and the CLI run as child processes of their own (on the installed `redis`, v4). A v5 or v6 pass
 * would run them exactly as the v4 pass does, so only the v4 pass runs them.
 */
const clientIndependent = [
  'spec/package/package.spec.ts',
  'spec/package/exit-code.spec.ts',
  'spec/package/docs.spec.ts',
  'spec/package/types.spec.ts',
  'spec/tools/examples.spec.ts',
  'spec/tools/demo.spec.ts',
  'spec/tools/cli.spec.ts',
  'spec/tools/dashboard.browser.spec.ts',
  'spec/tools/hand-over-example.spec.ts',
  'spec/tools/opentelemetry-example.spec.ts',
  'spec/tools/operator.spec.ts',
  'spec/tools/operator-topology.spec.ts',
];

/**
 * The 30 s soak runs in the v4 pass only, to keep CI short: every major's recovery paths are
 * exercised by the crash and fault specs, and `REDIS_CLIENT=redis5 npm run soak` soaks another major.
 * So do the re-creation spec (it drives the scripts directly) and the Ruby interop spec (it checks
 * the formats the gem shares, which no client changes). The abort storm (spec/faults/abort-storm.spec.ts) runs in every pass:
 * cancellation differs by major; it and the connection-reset storm of spec/protocol/grant-identity.spec.ts
 * run about half as long after the first pass (`isFirstPass`, spec/support/redis.ts).
 */
const firstPassOnly = [
  ...clientIndependent,
  'spec/faults/soak.spec.ts',
  'spec/protocol/recreation.spec.ts',
  'spec/protocol/interop-ruby.spec.ts',
];

/** @type {import('jest').Config} */
module.exports = {
  // Transpiled file by file (tsconfig.jest.json sets isolatedModules): `npm test` type-checks the
  // whole project once (`npm run typecheck`) instead of ts-jest checking each spec in every pass,
  // which took about 3 s per spec file, cold, in each of the five passes.
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: '<rootDir>/tsconfig.jest.json' }] },
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  moduleNameMapper: client === 'redis' ? {} : { '^redis$': client },
  testPathIgnorePatterns: [
    '/node_modules/',
    ...(client === 'redis' && requested === 'redis' ? [] : firstPassOnly),
    // What is specific to ioredis runs only when the semaphores get an ioredis client.
    ...(requested.startsWith('ioredis') ? [] : ['spec/topology/ioredis.spec.ts']),
  ],
  globalSetup: '<rootDir>/spec/support/global-setup.ts',
  setupFiles: ['<rootDir>/spec/support/setup-realm.ts'],
  globalTeardown: '<rootDir>/spec/support/global-teardown.ts',
  testTimeout: 30000,
  // A client or child process a spec leaves open would keep jest (and CI) waiting forever after the
  // run: the global teardown names what was left, and the run ends anyway with its real exit code.
  forceExit: true,
};
