'use strict';
/*
 * npm run soak [-- --seconds N] [--workers N] [--resources N]
 * Runs spec/support/soak.ts (worker processes, random faults, then the checkers) against a private
 * redis-server and prints its figures; exits 1 if any check failed. Needs `npm run build` first
 * (the npm script does it): the workers run the built library.
 */
const { readFileSync } = require('node:fs');
const { join } = require('node:path');
const ts = require('typescript');

// Load the TypeScript sources directly (the same files jest runs), transpiled on the fly.
require.extensions['.ts'] = (module, filename) => {
  const { outputText } = ts.transpileModule(readFileSync(filename, 'utf8'), {
    fileName: filename,
    compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
  });
  module._compile(outputText, filename);
};

function option(name, fallback) {
  const index = process.argv.indexOf(`--${name}`);
  if (index < 0) return fallback;
  const value = Number(process.argv[index + 1]);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${name} expects a positive integer, got ${process.argv[index + 1]}`);
    process.exit(2);
  }
  return value;
}

const { runSoak } = require(join(__dirname, '..', 'spec', 'support', 'soak.ts'));
runSoak({
  seconds: option('seconds', 60),
  workers: option('workers', 8),
  resources: option('resources', 3),
  log: (line) => console.log(line),
}).then(
  (report) => {
    for (const line of report.lines) console.log(line);
    process.exit(report.checks.every((check) => check.ok) ? 0 : 1);
  },
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
