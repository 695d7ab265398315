/*
 * npm run soak [-- --seconds N] [--workers N] [--resources N] [--storm-seconds N] [--storm-only]
 * Runs the soak (soak.ts: worker processes, random faults, then the checkers) against a private
 * redis-server and prints its figures; then the abort storm (abort-storm.ts: worker
 * processes × callers whose every lock has a 5–65 ms deadline) on a mutex for --storm-seconds
 * (default 60) and on a semaphore of 3 for half as long, and prints its figures. Exits 1 if any check
 * failed. --storm-only skips the fault soak. The npm script builds the library (the workers run
 * dist/) and compiles this directory (soak/tsconfig.json, into soak/.build) first. REDIS_CLIENT
 * (redis5, redis6) picks the workers' node-redis.
 */
import { runAbortStorm } from './abort-storm';
import { runSoak } from './soak';

function option(name: string, fallback: number): number {
  const index = process.argv.indexOf(`--${name}`);
  if (index < 0) return fallback;
  const value = Number(process.argv[index + 1]);
  if (!Number.isInteger(value) || value < 1) {
    console.error(`--${name} expects a positive integer, got ${process.argv[index + 1]}`);
    process.exit(2);
  }
  return value;
}

const log = (line: string) => console.log(line);

async function main(): Promise<boolean> {
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
  const storms: [resources: number, seconds: number][] = [
    [1, stormSeconds],
    [3, Math.max(5, Math.round(stormSeconds / 2))],
  ];
  for (const [resources, seconds] of storms) {
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
