/** @type {import('jest').Config} */
module.exports = {
  preset: 'ts-jest',
  testEnvironment: 'node',
  roots: ['<rootDir>/spec'],
  testMatch: ['**/*.spec.ts'],
  globalSetup: '<rootDir>/spec/support/global-setup.ts',
  setupFiles: ['<rootDir>/spec/support/setup-realm.ts'],
  globalTeardown: '<rootDir>/spec/support/global-teardown.ts',
  testTimeout: 30000,
};
