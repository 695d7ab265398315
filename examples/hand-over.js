'use strict';
/**
 * Hand-over: a scheduler takes the tokens and workers in other processes give them back. The
 * scheduler acquires a lease for each job (at most 2 at once), hands the grant over with
 * `lease.handOver()`, and sends the handle, plain JSON, to a worker process. The worker keeps the
 * lease alive with `sem.refresh(handle)` while it works (longer than the lease itself), then ends
 * exactly that grant with `sem.release(handle)`; the scheduler's next `acquire()`, blocked
 * meanwhile, gets the token back at once.
 *
 *   npm run build && node examples/hand-over.js
 *   node examples/hand-over.js --jobs 6 --workers 3
 *   REDIS_URL=redis://127.0.0.1:6379 node examples/hand-over.js
 *
 * A repeated release resolves `false` (the grant already ended), so a worker that retries, or a
 * message delivered twice, can never end someone else's grant of the same token. Exits with 0 when
 * every job's grant was kept alive and released by its worker, and every token is free at the end.
 * Without REDIS_URL it starts a throwaway redis-server from PATH.
 */
const { fork } = require('node:child_process');
const { useRedis, uniqueSuffix, exitAfter, parseCounts } = require('./support/redis');
// In your code: require('redis-token-semaphore'). Here: the package built from this repository.
const { Semaphore } = require('..');
const { createClient } = require('redis');

const RESOURCES = 2;
const LEASE_MS = 1000; // short, so each job outlives its lease: only the worker's refreshes keep it
const JOB_MS = 1500;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// ---------------------------------------------------------------------------------------------------
// A worker: another process, with a client and a Semaphore of its own (the same name and options).

async function worker({ id, name }) {
  const redis = createClient({ url: process.env.REDIS_URL });
  redis.on('error', () => undefined);
  await redis.connect();
  const sem = new Semaphore(name, { redis, resources: RESOURCES, staleClientTimeout: LEASE_MS });
  process.on('message', async ({ job, handle }) => {
    if (job === undefined) {
      await sem.close();
      await redis.quit();
      process.disconnect();
      return;
    }
    // Keep the grant alive while working: refresh well within its lease.
    let refreshes = 0;
    let kept = true;
    let refreshing = Promise.resolve();
    const timer = setInterval(() => {
      refreshing = sem.refresh(handle).then((held) => {
        kept &&= held; // false: the grant ended (reclaimed, signalled back); stop working on it
        refreshes++;
      });
    }, handle.leaseMs / 3);
    await sleep(JOB_MS); // the job
    clearInterval(timer);
    await refreshing;
    const released = await sem.release(handle); // ends this grant, and only this one
    const again = await sem.release(handle); // a retry, or a duplicate message: nothing happens
    process.send({ type: 'done', worker: id, job, token: handle.token, refreshes, kept, released, again });
  });
  process.send({ type: 'ready' });
}

// ---------------------------------------------------------------------------------------------------
// The scheduler: acquires, hands over, and checks what came back.

function parseOptions(argv) {
  return parseCounts(
    argv,
    { jobs: 4, workers: 2 },
    20,
    'Usage: node examples/hand-over.js [--jobs 1..20] [--workers 1..20]',
  );
}

async function main() {
  const { jobs, workers } = parseOptions(process.argv.slice(2));
  exitAfter(30_000 + jobs * JOB_MS, 'The hand-over example');
  const redis = await useRedis();
  const name = `hand-over:${uniqueSuffix()}`;
  console.log(
    `Semaphore "${name}": ${RESOURCES} tokens, leases of ${LEASE_MS} ms, ${jobs} jobs of ${JOB_MS} ms, ${workers} worker processes; Redis at ${redis.url} (${redis.origin})`,
  );

  const sem = new Semaphore(name, { redis: redis.client, resources: RESOURCES, staleClientTimeout: LEASE_MS });
  const problems = [];
  const done = [];
  const children = [];
  for (let id = 1; id <= workers; id++) {
    const child = fork(__filename, ['--worker', JSON.stringify({ id, name })], {
      env: { ...process.env, REDIS_URL: redis.url },
    });
    const ready = new Promise((resolve) => child.once('message', resolve));
    const exited = new Promise((resolve) =>
      child.once('exit', (code) => resolve(code === 0 || problems.push(`worker ${id} exited with ${code}`))),
    );
    child.on('message', (message) => {
      if (message.type !== 'done') return;
      const { worker: from, job, token, refreshes, kept, released, again } = message;
      console.log(
        `worker ${from}: job ${job} done after ${JOB_MS} ms (${refreshes} refreshes); release → ${released}, again → ${again}`,
      );
      if (!kept) problems.push(`job ${job}: a refresh found the grant ended`);
      if (released !== true || again !== false) problems.push(`job ${job}: release → ${released}, again → ${again}`);
      done.push({ job, token });
    });
    await ready;
    children.push({ child, exited });
  }

  for (let job = 1; job <= jobs; job++) {
    // Blocks while both tokens are out, until a worker's release puts one back.
    const started = performance.now();
    const lease = await sem.acquire();
    const waited = Math.round(performance.now() - started);
    const handle = lease.handOver(); // this process no longer refreshes or releases it
    const { child } = children[(job - 1) % workers];
    console.log(
      `scheduler: job ${job} → token "${handle.token}" (fence ${handle.fence}, waited ${waited} ms), handed to worker ${((job - 1) % workers) + 1}`,
    );
    child.send({ job, handle: JSON.parse(JSON.stringify(handle)) });
  }
  while (done.length < jobs) await sleep(20);
  for (const { child } of children) child.send({});
  await Promise.all(children.map(({ exited }) => exited));

  const available = await sem.availableCount();
  const holders = await sem.holders();
  if (available !== RESOURCES || holders.length > 0)
    problems.push(`at the end: ${available} tokens free, ${holders.length} held`);
  await sem.delete();
  await sem.close();
  await redis.stop();
  if (problems.length > 0) {
    console.error(`FAILED: ${problems.join('; ')}`);
    process.exit(1);
  }
  console.log(
    `OK: ${jobs} jobs, each grant kept alive and released by the worker it was handed to (a second release: false), all ${RESOURCES} tokens free`,
  );
}

if (process.argv[2] === '--worker') {
  worker(JSON.parse(process.argv[3])).catch((error) => {
    console.error(`worker: ${error.stack ?? error}`);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error.stack ?? error);
    process.exit(1);
  });
}
