'use strict';
/*
 * A worker process of the abort storm (soak/abort-storm.ts): many concurrent callers on one
 * Semaphore instance of the BUILT library (npm run build), every lock with a request deadline
 * (`AbortSignal.timeout`), holds of a few ms. Reports over IPC:
 *   { ready: true, client }                       once connected (client: the node-redis version)
 *   { event: 'acquired', holder, token, fence, at, via } once a lock resolved (stamped after the grant)
 *   { event: 'released', holder, token, at }      just before the release is sent
 *   { event: 'lost', holder, token, fence, at, via } a release found the grant gone (never expected here)
 *   { event: 'error', holder, op, message, at }   a call failed with anything but its own signal's reason
 *   { aborts: [at...], lag: { at, p99, max } }    the times of aborted locks, batched every 250 ms, with the
 *                                                 event-loop delay (ms) over those 250 ms
 *   { stopped: true, closedMs }                   once every caller finished and close() resolved
 * It starts the callers on the parent's 'start' and stops them on 'stop'. It stops by itself too:
 * at `stopBy` (ms since the epoch), when the parent goes away, and after `maxCalls` calls per caller.
 *
 * Configured by the JSON in ABORT_STORM_WORKER:
 *   { url, name, id, options, callers, deadlineMs: [min, max], holdMs: [min, max], acquireShare, stopBy, maxCalls }
 * ABORT_STORM_DIST: a snapshot of dist/ (so a concurrent `npm run build` cannot pull it away).
 */
const { join } = require('node:path');
const { monitorEventLoopDelay } = require('node:perf_hooks');

// REDIS_CLIENT picks the node-redis major for this process and the library (worker-redis.js).
const redisClient = require('../spec/support/worker-redis');
const clientVersion = require(`${redisClient}/package.json`).version;

const dist = process.env.ABORT_STORM_DIST || join(__dirname, '../dist');
const { Semaphore } = require(dist);

const config = JSON.parse(process.env.ABORT_STORM_WORKER || '{}');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const between = ([min, max]) => min + Math.random() * (max - min);

/** Sends a message; resolves once it has left this process (or the channel is gone). */
function send(message) {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, () => resolve());
  });
}

async function main() {
  let started = false;
  let stopping = false;
  let startSignal;
  const startedPromise = new Promise((resolve) => (startSignal = resolve));
  const stop = () => {
    stopping = true;
    startSignal();
  };
  process.on('message', (message) => {
    if (message === 'start') {
      started = true;
      startSignal();
    } else if (message === 'stop') stop();
  });
  // The parent gone (killed, crashed): stop rather than run on.
  process.on('disconnect', stop);
  // Stops by itself at stopBy, whatever the parent does.
  const selfStop = setTimeout(stop, Math.max(0, config.stopBy - Date.now()));
  selfStop.unref();

  const sem = new Semaphore(config.name, { url: config.url, ...config.options });
  for (let attempt = 0; ; attempt++) {
    try {
      await sem.existsOrCreate();
      break;
    } catch (error) {
      if (attempt >= 50 || Date.now() > config.stopBy) throw error;
      await sleep(100);
    }
  }
  // One grant before the start: FENCE exists from then on (the parent counts grants by it), and the
  // library's paths are warm.
  const warmUp = await sem.lock(10_000);
  if (warmUp !== null) await sem.unlock(warmUp);
  await send({ ready: true, client: `${redisClient}@${clientVersion}`, pid: process.pid });
  await startedPromise;

  let aborts = [];
  const delay = monitorEventLoopDelay({ resolution: 5 });
  delay.enable();
  const flushAborts = () => {
    const lag = { at: Date.now(), p99: delay.percentile(99) / 1e6, max: delay.max / 1e6 };
    delay.reset();
    const batch = aborts;
    aborts = [];
    return send({ aborts: batch, lag });
  };
  const flusher = setInterval(() => void flushAborts(), 250);

  async function caller(index) {
    const holder = `${config.id}c${index}`;
    for (let call = 0; started && !stopping && call < config.maxCalls && Date.now() < config.stopBy; call++) {
      const signal = AbortSignal.timeout(Math.round(between(config.deadlineMs)));
      const viaAcquire = Math.random() < config.acquireShare;
      let token;
      let fence;
      let release;
      try {
        if (viaAcquire) {
          const lease = await sem.acquire({ signal });
          token = lease.token;
          fence = lease.fence;
          release = () => lease.release();
        } else {
          token = await sem.lock(undefined, { signal });
          const held = token;
          fence = sem.fence(held);
          release = () => sem.unlock(held);
        }
      } catch (error) {
        if (signal.aborted && error === signal.reason) aborts.push(Date.now());
        else {
          const op = viaAcquire ? 'acquire' : 'lock';
          void send({ event: 'error', holder, op, message: String((error && error.stack) || error), at: Date.now() });
          await sleep(10);
        }
        continue;
      }
      // Not awaited: one process's IPC messages keep their order, and the hold is not stretched.
      void send({ event: 'acquired', holder, token, fence, at: Date.now(), via: viaAcquire ? 'acquire' : 'lock' });
      await sleep(between(config.holdMs));
      void send({ event: 'released', holder, token, at: Date.now() });
      try {
        const result = await release();
        if (result === false)
          void send({ event: 'lost', holder, token, fence, at: Date.now(), via: viaAcquire ? 'acquire' : 'lock' });
      } catch (error) {
        void send({
          event: 'error',
          holder,
          op: 'release',
          message: String((error && error.stack) || error),
          at: Date.now(),
        });
      }
    }
  }

  await Promise.all(Array.from({ length: config.callers }, (_, i) => caller(i)));
  const closing = Date.now();
  await sem.close();
  const closedMs = Date.now() - closing;
  clearInterval(flusher);
  await flushAborts();
  delay.disable();
  await send({ stopped: true, closedMs });
}

main().then(
  () => process.exit(0),
  async (error) => {
    await send({
      event: 'error',
      holder: config.id,
      op: 'worker',
      message: String((error && error.stack) || error),
      at: Date.now(),
    });
    process.exit(1);
  },
);
