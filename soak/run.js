'use strict';
/*
 * npm run soak [-- --seconds N] [--workers N] [--resources N] [--storm-seconds N] [--storm-only]
 * Runs spec/support/soak.ts (worker processes, random faults, then the checkers) against a private
 * redis-server and prints its figures; then the abort storm (spec/support/abort-storm.ts: worker
 * processes × callers whose every lock has a 5–65 ms deadline) on a mutex for --storm-seconds
 * (default 60) and on a semaphore of 3 for half as long, and prints its figures. Exits 1 if any check
 * failed. --storm-only skips the fault soak. Needs `npm run build` first (the npm script does it):
 * the workers run the built library. REDIS_CLIENT (redis5, redis6) picks the workers' node-redis.
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
const { runAbortStorm } = require(join(__dirname, '..', 'spec', 'support', 'abort-storm.ts'));
const log = (line) => console.log(line);

async function main() {
  let ok = true;
  if (!process.argv.includes('--storm-only')) {
    const report = await runSoak({
      seconds: option('seconds', 60),
      workers: option('workers', 8),
      resources: option('resources', 3),
      log,
    });
    for (const line of report.lines) console.log(line);
    ok = report.checks.every((check) => check.ok) && ok;
  }
  const stormSeconds = option('storm-seconds', 60);
  for (const [resources, seconds] of [
    [1, stormSeconds],
    [3, Math.max(5, Math.round(stormSeconds / 2))],
  ]) {
    const report = await runAbortStorm({ seconds, resources, log });
    for (const line of report.lines) console.log(line);
    ok = report.checks.every((check) => check.ok) && ok;
  }
  return ok;
}

main().then(
  (ok) => process.exit(ok ? 0 : 1),
  (error) => {
    console.error(error);
    process.exit(1);
  },
);
