/**
 * REDIS_CLIENT picks the node-redis major the whole run uses, library and specs alike: `redis` (v4,
 * the default), `redis5` or `redis6` (aliased dev dependencies). Every `require('redis')` resolves to it.
 */
const client = process.env.REDIS_CLIENT || 'redis';
if (!['redis', 'redis5', 'redis6'].includes(client)) {
  throw new Error(`REDIS_CLIENT must be redis, redis5 or redis6, got ${client}`);
}

/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  moduleNameMapper: client === 'redis' ? {} : { '^redis$': client },
  globalSetup: '<rootDir>/spec/support/global-setup.ts',
  setupFiles: ['<rootDir>/spec/support/setup-realm.ts'],
  globalTeardown: '<rootDir>/spec/support/global-teardown.ts',
  testTimeout: 30000,
};
