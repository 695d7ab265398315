'use strict';
/**
 * A scheduled job that only one instance runs: every replica of a service has the same cron
 * schedule, and a Mutex makes sure that each time it fires, exactly one of them does the work.
 *
 *   npm run build && node examples/cron-once.js
 *   node examples/cron-once.js --instances 6 --ticks 5
 *   REDIS_URL=redis://127.0.0.1:6379 node examples/cron-once.js
 *
 * This process starts the instances (this same file with `--instance`, each a process of its own)
 * and gives them a common start time. Each one then fires on its own clock once a second, for
 * `--ticks` seconds, and tries `mutex.lock(0, job)`: the first gets the mutex and runs the job
 * (300 ms); those that fire meanwhile get LockTimeoutError and skip. The last instance's clock is
 * 500 ms late, so it fires after the job finished: inside the mutex, a "last run" key in Redis tells
 * it this tick is already done. The mutex keeps runs from overlapping (and, with
 * staleClientTimeout, frees the job if the instance running it dies); the key makes it once per tick.
 *
 * Exits with 0 when every tick ran exactly once. Without REDIS_URL it starts a throwaway
 * redis-server from PATH.
 */
const { fork } = require('node:child_process');
const { useRedis, uniqueSuffix, exitAfter, parseCounts } = require('./support/redis');
// In your code: require('redis-token-semaphore'). Here: the package built from this repository.
const { Mutex, LockTimeoutError } = require('..');
const { createClient } = require('redis');

const JOB_MS = 300;
const LATE_MS = 500; // how late the last instance's clock is
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------
// One instance: what each replica of your service runs.

async function instance({ id, job, ticks, lateMs }) {
  const redis = createClient({ url: process.env.REDIS_URL });
  redis.on('error', () => undefined);
  await redis.connect();
  // Every instance makes the same Mutex: the name is all they need to agree on.
  const mutex = new Mutex(`cron:${job}`, { redis, staleClientTimeout: 60_000 });
  const lastRunKey = `cron:${job}:last-run`;
  const report = (message) => new Promise((resolve) => process.send({ instance: id, ...message }, resolve));
  const started = new Promise((resolve) => process.once('message', resolve)); // { firstTickAt }
  await report({ type: 'ready' });
  const { firstTickAt } = await started;

  /** What the scheduler calls at each tick; `tick` names the scheduled time, the same on every instance. */
  async function onTick(tick) {
    try {
      const outcome = await mutex.lock(0, async () => {
        if ((await redis.get(lastRunKey)) === tick) return 'already ran';
        await sleep(JOB_MS); // the job: build the nightly report
        await redis.set(lastRunKey, tick, { EX: 86_400 });
        return 'ran';
      });
      await report({ type: outcome, tick });
    } catch (error) {
      if (!(error instanceof LockTimeoutError)) throw error;
      await report({ type: 'locked', tick }); // another instance is running it right now
    }
  }

  // A tiny scheduler: fire at firstTickAt, +1 s, +2 s… on this instance's (possibly late) clock.
  for (let n = 0; n < ticks; n++) {
    const scheduled = firstTickAt + n * 1000;
    await sleep(scheduled + lateMs - Date.now());
    await onTick(new Date(scheduled).toISOString());
  }
  await mutex.close();
  await redis.quit();
  process.disconnect();
}

// ---------------------------------------------------------------------------------------------------
// The run: start the instances, collect what each did at each tick, check.

function parseOptions(argv) {
  return parseCounts(
    argv,
    { instances: 4, ticks: 3 },
    20,
    'Usage: node examples/cron-once.js [--instances 1..20] [--ticks 1..20]',
  );
}

async function main() {
  const { instances, ticks } = parseOptions(process.argv.slice(2));
  exitAfter(30_000 + ticks * 1000, 'The cron example');
  const redis = await useRedis();
  const job = `nightly-report:${uniqueSuffix()}`;
  console.log(
    `Job "${job}" scheduled every second on ${instances} instances, ${ticks} times; Redis at ${redis.url} (${redis.origin})`,
  );

  const outcomes = new Map(); // tick -> [{ instance, type }]
  const problems = [];
  const children = [];
  const ready = [];
  for (let id = 1; id <= instances; id++) {
    const lateMs = id === instances && instances > 1 ? LATE_MS : 0;
    const config = { id, job, ticks, lateMs };
    const child = fork(__filename, ['--instance', JSON.stringify(config)], {
      env: { ...process.env, REDIS_URL: redis.url },
    });
    ready.push(new Promise((resolve) => child.once('message', () => resolve(child))));
    child.on('message', ({ instance: from, type, tick }) => {
      if (type === 'ready') return;
      const time = tick.slice(11, 19);
      const what = {
        ran: `ran the job (${JOB_MS} ms)`,
        locked: 'skipped: another instance holds the mutex',
        'already ran': 'skipped: this tick already ran',
      }[type];
      console.log(`${time}  instance ${from}${lateMs ? ` (clock ${lateMs} ms late)` : ''}: ${what}`);
      outcomes.set(tick, [...(outcomes.get(tick) ?? []), { instance: from, type }]);
    });
    children.push(
      new Promise((resolve) =>
        child.once('exit', (code) => resolve(code === 0 || problems.push(`instance ${id} exited with ${code}`))),
      ),
    );
  }
  // Once every instance is up: the same schedule for all, starting at the next full second.
  const started = await Promise.all(ready);
  const firstTickAt = Math.ceil((Date.now() + 300) / 1000) * 1000;
  for (const child of started) child.send({ firstTickAt });
  await Promise.all(children);

  console.log('\nSummary');
  for (const [tick, list] of [...outcomes].sort()) {
    const runs = list.filter((outcome) => outcome.type === 'ran').map((outcome) => outcome.instance);
    const others = list
      .filter((outcome) => outcome.type !== 'ran')
      .map((outcome) => `${outcome.instance} (${outcome.type})`);
    console.log(
      `  ${tick.slice(11, 19)}  ran by ${runs.length === 0 ? 'nobody' : runs.join(', ')}; skipped by ${others.join(', ') || 'nobody'}`,
    );
    if (runs.length !== 1) problems.push(`tick ${tick} ran ${runs.length} times`);
    if (list.length !== instances) problems.push(`tick ${tick}: ${list.length} of ${instances} instances reported`);
  }
  if (outcomes.size !== ticks) problems.push(`${outcomes.size} of ${ticks} ticks reported`);

  const mutex = new Mutex(`cron:${job}`, { redis: redis.client });
  await mutex.delete();
  await redis.client.del(`cron:${job}:last-run`);
  await redis.stop();
  if (problems.length > 0) {
    console.error(`FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(`OK: each of the ${ticks} ticks ran exactly once across ${instances} instances`);
}

if (process.argv[2] === '--instance') {
  instance(JSON.parse(process.argv[3])).catch((error) => {
    console.error(`instance: ${error.stack ?? error}`);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error.stack ?? error);
    process.exit(1);
  });
}
