/**
 * REDIS_CLIENT picks the node-redis major the whole run uses, library and specs alike: `redis` (v4,
 * the default), `redis5` or `redis6` (aliased dev dependencies). Every `require('redis')` resolves to it.
 */
const client = process.env.REDIS_CLIENT || 'redis';
if (!['redis', 'redis5', 'redis6'].includes(client)) {
  throw new Error(`REDIS_CLIENT must be redis, redis5 or redis6, got ${client}`);
}

/**
 * Specs whose subject never runs on the jest process's client: the package, its docs, the examples
 * and the CLI run as child processes of their own (on the installed `redis`, v4). A v5 or v6 pass
 * would run them exactly as the v4 pass does, so only the v4 pass runs them.
 */
const clientIndependent = [
  'spec/package/package.spec.ts',
  'spec/package/docs.spec.ts',
  'spec/tools/examples.spec.ts',
  'spec/tools/demo.spec.ts',
  'spec/tools/cli.spec.ts',
  'spec/tools/dashboard.browser.spec.ts',
];

/**
 * The 30 s soak runs in the v4 pass only, to keep CI short: every major's recovery paths are
 * exercised by the crash and fault specs, and `REDIS_CLIENT=redis5 npm run soak` soaks another major.
 * The abort storm (spec/faults/abort-storm.spec.ts) runs in every pass: cancellation differs by major.
 */
const firstPassOnly = [...clientIndependent, 'spec/faults/soak.spec.ts'];

/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  moduleNameMapper: client === 'redis' ? {} : { '^redis$': client },
  testPathIgnorePatterns: ['/node_modules/', ...(client === 'redis' ? [] : firstPassOnly)],
  globalSetup: '<rootDir>/spec/support/global-setup.ts',
  setupFiles: ['<rootDir>/spec/support/setup-realm.ts'],
  globalTeardown: '<rootDir>/spec/support/global-teardown.ts',
  testTimeout: 30000,
};
