'use strict';
/**
 * A job queue on a semaphore: a producer `signal`s jobs (any string), consumer processes block in
 * `wait()` until one comes, handle it and `consume()` it, so it is not put back.
 *
 *   npm run build && node examples/job-queue.js
 *   node examples/job-queue.js --jobs 50 --consumers 4
 *   REDIS_URL=redis://127.0.0.1:6379 node examples/job-queue.js
 *
 * This process starts the consumers (this same file with `--consumer`, each a process of its own),
 * produces the jobs, and prints who handled what. Once every job is reported done it signals one
 * stop job per consumer. It exits with 0 when every job was handled exactly once and nothing is left
 * in Redis. Without REDIS_URL it starts a throwaway redis-server from PATH.
 *
 * Worth knowing about semaphore queues:
 * - A new semaphore starts with its tokens ("0", …) unless made with `resources: 0`; a consumer
 *   receives them too. Consume and skip.
 * - A job goes to the consumer that has waited longest; jobs that pile up while every consumer is
 *   busy are handed out in the order they were signalled (a job a Ruby gem process signals goes
 *   first: the gem pushes at the head).
 * - Leave `staleClientTimeout` off on a job queue, or a slow consumer's job is handed out again.
 */
const { fork } = require('node:child_process');
const { useRedis, uniqueSuffix, exitAfter, parseCounts } = require('./support/redis');
// In your code: require('redis-token-semaphore'). Here: the package built from this repository.
const { Semaphore } = require('..');

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------
// The consumer: what you would run on each worker machine.

let stopping = false; // set once the consumer is told to stop: its blocked wait() then rejects

async function consumer(name, id) {
  const jobs = new Semaphore(name, { url: process.env.REDIS_URL });
  const report = (message) => new Promise((resolve) => process.send({ consumer: id, ...message }, resolve));
  // If the main process goes away, stop too (closing ends the blocked wait).
  process.once('disconnect', () => {
    stopping = true;
    void jobs.close().finally(() => process.exit(0));
  });
  await jobs.existsOrCreate();
  await report({ type: 'ready' });
  for (;;) {
    const job = await jobs.wait(); // blocks in Redis (BLMOVE) until a job comes: no polling
    const payload = parseJob(job);
    if (payload === undefined) {
      await jobs.consume(job); // "0": the token the semaphore was created with, not a job
      await report({ type: 'skipped', token: job });
      continue;
    }
    if (payload.stop) {
      await jobs.consume(job);
      break;
    }
    await sleep(payload.ms); // the work
    const finished = await jobs.consume(job); // done: forget the job without putting it back
    await report({ type: finished ? 'done' : 'lost', job: payload.id });
  }
  await jobs.close();
  process.disconnect(); // the 'disconnect' handler above then exits
}

function parseJob(job) {
  try {
    const payload = JSON.parse(job);
    return typeof payload === 'object' && payload !== null ? payload : undefined;
  } catch {
    return undefined;
  }
}

// ---------------------------------------------------------------------------------------------------
// The run: start the consumers, produce, check.

function parseOptions(argv) {
  return parseCounts(
    argv,
    { jobs: 30, consumers: 3 },
    1000,
    'Usage: node examples/job-queue.js [--jobs 1..1000] [--consumers 1..1000]',
  );
}

async function main() {
  const { jobs: jobCount, consumers: consumerCount } = parseOptions(process.argv.slice(2));
  exitAfter(60_000, 'The job queue');
  const redis = await useRedis();
  const name = `jobs:${uniqueSuffix()}`;
  console.log(
    `Job queue "${name}": ${jobCount} jobs, ${consumerCount} consumer processes, Redis at ${redis.url} (${redis.origin})`,
  );

  const handled = new Map(); // job id -> the consumers that handled it
  const perConsumer = new Map();
  let allDone;
  const everyJobDone = new Promise((resolve) => (allDone = resolve));
  const problems = [];

  const children = [];
  const ready = [];
  for (let id = 1; id <= consumerCount; id++) {
    const child = fork(__filename, ['--consumer', name, String(id)], { env: { ...process.env, REDIS_URL: redis.url } });
    children.push(child);
    perConsumer.set(id, 0);
    ready.push(
      new Promise((resolve, reject) => {
        child.on('message', (message) => {
          if (message.type === 'ready') resolve();
          if (message.type === 'skipped')
            console.log(
              `consumer ${id} skipped token ${JSON.stringify(message.token)} (the semaphore's initial token, not a job)`,
            );
          if (message.type === 'lost') problems.push(`consumer ${id} lost job ${message.job}`);
          if (message.type === 'done') {
            console.log(`consumer ${id} handled job ${message.job}`);
            handled.set(message.job, [...(handled.get(message.job) ?? []), id]);
            perConsumer.set(id, perConsumer.get(id) + 1);
            if ([...handled.values()].reduce((sum, by) => sum + by.length, 0) === jobCount) allDone();
          }
        });
        child.once('exit', (code) => {
          if (code !== 0) problems.push(`consumer ${id} exited with ${code}`);
          reject(new Error(`consumer ${id} exited before it was ready`));
        });
      }),
    );
  }
  const exited = children.map((child) => new Promise((resolve) => child.once('exit', resolve)));
  await Promise.all(ready);

  // The producer: any process can do this, before or after the consumers start.
  const producer = new Semaphore(name, { redis: redis.client });
  for (let id = 1; id <= jobCount; id++) {
    await producer.signal(JSON.stringify({ id, ms: 5 + Math.floor(Math.random() * 30) }));
    if (id % 5 === 0) await sleep(20); // bursts: some jobs wait in the queue, some go straight to a waiter
  }
  console.log(`produced ${jobCount} jobs`);

  await Promise.race([everyJobDone, Promise.all(exited)]);
  for (let id = 1; id <= consumerCount; id++) await producer.signal(JSON.stringify({ stop: id }));
  await Promise.all(exited);

  // Every job handled exactly once, and the queue empty.
  const missing = [];
  const twice = [];
  for (let id = 1; id <= jobCount; id++) {
    const by = handled.get(id) ?? [];
    if (by.length === 0) missing.push(id);
    if (by.length > 1) twice.push(`${id} (by ${by.join(', ')})`);
  }
  const left = await producer.allTokens();
  await producer.delete();
  await redis.stop();

  console.log('\nSummary');
  console.log(`  jobs handled   ${jobCount - missing.length} of ${jobCount}`);
  console.log(`  per consumer   ${[...perConsumer].map(([id, n]) => `${id}: ${n}`).join(', ')}`);
  console.log(`  handled twice  ${twice.length === 0 ? 'none' : twice.join(', ')}`);
  console.log(`  left in Redis  ${left.length === 0 ? 'nothing' : JSON.stringify(left)}`);
  if (missing.length > 0) problems.push(`jobs never handled: ${missing.join(', ')}`);
  if (twice.length > 0) problems.push(`jobs handled more than once: ${twice.join('; ')}`);
  if (left.length > 0) problems.push(`left in Redis: ${JSON.stringify(left)}`);
  if (problems.length > 0) {
    console.error(`FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(`OK: ${jobCount} jobs, each handled exactly once by ${consumerCount} consumer processes`);
}

if (process.argv[2] === '--consumer') {
  consumer(process.argv[3], Number(process.argv[4])).catch((error) => {
    if (stopping) return;
    console.error(`consumer ${process.argv[4]}: ${error.stack ?? error}`);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error.stack ?? error);
    process.exit(1);
  });
}
