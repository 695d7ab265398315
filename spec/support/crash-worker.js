'use strict';
/*
 * A child process for spec/faults/crash.spec.ts: runs the built library (npm run build) against a real Redis,
 * reports what it does over IPC, and, at the checkpoint it was told, reports `{ at: step }` and stops
 * itself with SIGSTOP, so the parent can SIGKILL it exactly between two steps of the protocol.
 *
 * Configured by the JSON in the CRASH_WORKER environment variable:
 *   { mode: 'steps', url, name, options, actions: ['lock' | 'unlock' | 'refresh' | 'signal' |
 *       'releaseStaleLocks' | 'sleep:<ms>'...], stop?: { step, after? } }
 *     runs the actions in order, reporting `{ did, result }` after each and `{ step }` at each
 *     checkpoint; stops at `stop.step` (only once `stop.after` was passed, when given).
 *   { mode: 'load', url, name, options, holdMs: [min, max], lockTimeout }
 *     loops lock → hold → unlock until the parent sends 'stop'; reports `{ event: 'acquired' |
 *     'released' | 'lost', token, at: Date.now() }` (acquired once lock resolved, released before
 *     unlock is sent, lost when unlock found the grant gone).
 *   { mode: 'soak', url, name, options, holdMs: [min, max], lockTimeout }
 *     like 'load', but rides out Redis restarts and killed connections (npm run soak): a failed lock
 *     is reported as `{ event: 'error' }` and retried; a failed unlock is retried (the ownership check
 *     makes that safe) and, if a retry then finds the grant gone, reported as `{ event: 'ambiguous' }`
 *     (the first attempt ran but its reply was lost), not 'lost'.
 *   { mode: 'weighted', url, name, options, holdMs: [min, max], lockTimeout, maxPermits, heldKey, child }
 *     loops acquire({ permits: 1..maxPermits, timeout: lockTimeout }) → hold → release until the
 *     parent sends 'stop' (on an ioredis client when REDIS_CLIENT names ioredis). Once granted it
 *     records `child → "<permits>:<hold number>"` in the hash `heldKey` and reads, in the same
 *     script, every child's entry, their total weight and whether GRABBED names its grant for each
 *     of its tokens; it removes its entry before it releases. Reports `{ event: 'acquired',
 *     permits, hold, total, recorded, holders, tokens }`, `{ event: 'released' | 'timeout', permits,
 *     hold }`, and for a grant found lost at release `{ event: 'lost', why, stalledMs }` (the
 *     longest event-loop stall of the hold); `ready` says its ids' `prefix`.
 *   { mode: 'raw-move', url, name, resources, grantId, leaseSeconds, blockSeconds }
 *     a waiter without the pipeline's claim: EVAL prepareWait, then BLMOVE AVAILABLE → its inbox;
 *     reports `{ moved }` and stops, as if it died between BLMOVE and the claim.
 *   { mode: 'zombie', url, name, resources, grantId, leaseSeconds, blockSeconds }
 *     sends the whole pipeline (prepareWait, BLMOVE, claim) without waiting, reports `{ sent }` and
 *     stops; once continued (SIGCONT), reports the three replies as `{ replies }`.
 * Every child also reports `{ ready: true }` once connected, and `{ error }` if something throws.
 */
const { join } = require('node:path');

// REDIS_CLIENT picks the node-redis major for this process and the library (worker-redis.js).
require('./worker-redis');
const { createClient } = require('redis');

// The built library: ../../dist, or the snapshot of it the spec took (CRASH_WORKER_DIST), so that a
// concurrent `npm run build` (rm -rf dist) cannot pull it from under a run.
const dist = process.env.CRASH_WORKER_DIST || join(__dirname, '../../dist');
const { Semaphore } = require(dist);
const { setCheckpointHook } = require(join(dist, 'util', 'checkpoint'));
const { scripts } = require(join(dist, 'redis', 'registry'));
const { evalCommand, scriptCall } = require(join(dist, 'redis', 'send'));
const { semaphoreKeys } = require(join(dist, 'redis', 'keys'));

const config = JSON.parse(process.env.CRASH_WORKER || '{}');

/** Sends a message and resolves once it has left this process. */
function send(message) {
  return new Promise((resolve) => process.send(message, () => resolve()));
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Reports `message`, then stops this process; resolves if it is ever continued. node-redis corks its
 * socket and writes on the next setImmediate, so commands sent just before (the blocking pipeline at
 * 'lock:waiting') are flushed to Redis first: the process stops after the step, not inside it.
 */
async function stopHere(message) {
  await new Promise((resolve) => setImmediate(resolve));
  await sleep(10);
  await send(message);
  process.kill(process.pid, 'SIGSTOP');
}

async function steps() {
  const passed = new Set();
  const stop = config.stop;
  setCheckpointHook((step) => {
    const stopping = stop !== undefined && step === stop.step && (stop.after === undefined || passed.has(stop.after));
    passed.add(step);
    if (stopping) return stopHere({ at: step });
    void send({ step });
    return undefined;
  });
  const sem = new Semaphore(config.name, { url: config.url, ...config.options });
  await sem.existsOrCreate();
  await send({ ready: true });
  let token = null;
  for (const action of config.actions) {
    let result;
    if (action.startsWith('sleep:')) result = await sleep(Number(action.slice('sleep:'.length)));
    else if (action === 'lock') result = token = await sem.lock();
    else if (action === 'unlock') result = await sem.unlock();
    else if (action === 'refresh') result = await sem.refresh();
    else if (action === 'signal') result = await sem.signal(token);
    else if (action === 'releaseStaleLocks') result = await sem.releaseStaleLocks();
    else throw new Error(`unknown action ${action}`);
    await send({ did: action, result: result === undefined ? null : result });
  }
  await send({ done: true });
  await sem.close();
}

async function load() {
  let stopping = false;
  process.on('message', (message) => {
    if (message === 'stop') stopping = true;
  });
  const [minHold, maxHold] = config.holdMs;
  const sem = new Semaphore(config.name, { url: config.url, ...config.options });
  await sem.existsOrCreate();
  await send({ ready: true });
  while (!stopping) {
    const token = await sem.lock(config.lockTimeout);
    if (token === null) continue;
    await send({ event: 'acquired', token, at: Date.now() });
    await sleep(minHold + Math.random() * (maxHold - minHold));
    await send({ event: 'released', token, at: Date.now() });
    if ((await sem.unlock(token)) === false) await send({ event: 'lost', token, at: Date.now() });
  }
  await sem.close();
  await send({ stopped: true });
}

async function soak() {
  let stopping = false;
  let phase = 'start';
  process.on('message', (message) => {
    if (message !== 'stop') return;
    stopping = true;
    // Says what it is doing if it has not stopped within 5 s (SOAK_DEBUG).
    setTimeout(() => void send({ stuck: phase }), 5000).unref();
  });
  const [minHold, maxHold] = config.holdMs;
  const sem = new Semaphore(config.name, { url: config.url, ...config.options });
  const failed = (op, error) => send({ event: 'error', op, message: String((error && error.message) || error) });
  for (let attempt = 0; ; attempt++) {
    try {
      await sem.existsOrCreate();
      break;
    } catch (error) {
      if (attempt >= 100) throw error;
      await sleep(100);
    }
  }
  await send({ ready: true });
  while (!stopping) {
    let token;
    phase = `lock since ${Date.now()}`;
    try {
      token = await sem.lock(config.lockTimeout);
    } catch (error) {
      await failed('lock', error);
      await sleep(50);
      continue;
    }
    if (token === null) continue;
    await send({ event: 'acquired', token, at: Date.now() });
    await sleep(minHold + Math.random() * (maxHold - minHold));
    await send({ event: 'released', token, at: Date.now() });
    for (let attempt = 0; ; attempt++) {
      phase = `unlock attempt ${attempt}`;
      try {
        if ((await sem.unlock(token)) === false) {
          await send({ event: attempt === 0 ? 'lost' : 'ambiguous', token, at: Date.now() });
        }
        break;
      } catch (error) {
        if (attempt >= 200) {
          await failed('unlock', error);
          break;
        }
        await sleep(50);
      }
    }
  }
  phase = 'close';
  await sem.close();
  await send({ stopped: true });
}

async function rawClient() {
  const client = createClient({ url: config.url, name: `crash-${config.grantId}` });
  client.on('error', () => undefined);
  await client.connect();
  const keys = semaphoreKeys(config.name);
  const inbox = keys.inbox(config.grantId);
  const prepare = evalCommand(
    scriptCall(scripts.prepareWait, keys.scriptKeys, [
      config.grantId,
      '',
      String(config.leaseSeconds),
      String(config.resources),
      '',
      '',
    ]),
  );
  const move = ['BLMOVE', keys.available, inbox, 'LEFT', 'RIGHT', String(config.blockSeconds)];
  const claim = evalCommand(
    scriptCall(
      scripts.claim,
      [...keys.scriptKeys, inbox],
      // The registration id, the grant id, the settings (includes/settings.lua): no lease, the
      // registration renewed for leaseSeconds, not kept, one permit, no expiration.
      [config.grantId, config.grantId, `0 ${config.resources} ${config.leaseSeconds} 0 1 - crash-worker`],
    ),
  );
  await send({ ready: true });
  return { client, prepare, move, claim };
}

async function rawMove() {
  const { client, prepare, move } = await rawClient();
  await client.sendCommand(prepare);
  const moved = await client.sendCommand(move);
  await stopHere({ moved });
}

async function zombie() {
  const { client, prepare, move, claim } = await rawClient();
  const replies = Promise.allSettled([prepare, move, claim].map((command) => client.sendCommand(command)));
  await stopHere({ sent: config.grantId });
  const settled = await replies;
  await send({ replies: settled.map((r) => (r.status === 'fulfilled' ? r.value : `error: ${r.reason.message}`)) });
}

/** What a weighted holder records once granted (see 'weighted' above): the weight held, and its grant's records. */
const RECORD_HOLDING = `
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
local total, holders = 0, redis.call('HGETALL', KEYS[1])
for i = 2, #holders, 2 do total = total + tonumber(string.match(holders[i], '^%d+')) end
local recorded = 0
for i = 4, #ARGV do
  local record = redis.call('HGET', KEYS[2], ARGV[i])
  if record and string.find(record, ' ' .. ARGV[3] .. ' ', 1, true) then recorded = recorded + 1 end
end
return { total, recorded, holders }`;

/** A semaphore on the client REDIS_CLIENT names: ioredis (v5 or v6) for an ioredis run, else its own node-redis. */
function semaphoreOnRunClient() {
  const requested = process.env.REDIS_CLIENT || 'redis';
  if (!requested.startsWith('ioredis')) return new Semaphore(config.name, { url: config.url, ...config.options });
  const { Redis } = require(requested);
  const redis = new Redis(config.url, { autoResendUnfulfilledCommands: false });
  redis.on('error', () => undefined);
  return new Semaphore(config.name, { redis, ...config.options });
}

async function weighted() {
  let stopping = false;
  process.on('message', (message) => {
    if (message === 'stop') stopping = true;
  });
  const [minHold, maxHold] = config.holdMs;
  let holds = 0;
  const stalls = require('node:perf_hooks').monitorEventLoopDelay({ resolution: 10 });
  stalls.enable();
  const sem = semaphoreOnRunClient();
  const raw = createClient({ url: config.url });
  raw.on('error', () => undefined);
  await raw.connect();
  const grabbed = semaphoreKeys(config.name).grabbed;
  await sem.existsOrCreate();
  // Every grant and registration id of this process starts with its prefix (dist/util/ids.js).
  const id = require(join(dist, 'util', 'ids')).newId();
  await send({ ready: true, prefix: id.slice(0, id.lastIndexOf('.')) });
  while (!stopping) {
    const permits = 1 + Math.floor(Math.random() * config.maxPermits);
    let lease;
    try {
      lease = await sem.acquire({ permits, timeout: config.lockTimeout });
    } catch (error) {
      if (error && error.name === 'LockTimeoutError') {
        await send({ event: 'timeout', permits });
        continue;
      }
      throw error;
    }
    const hold = `${permits}:${++holds}`;
    stalls.reset();
    const [total, recorded, holders] = await raw.eval(RECORD_HOLDING, {
      keys: [config.heldKey, grabbed],
      arguments: [config.child, hold, lease.grantId, ...lease.tokens],
    });
    await send({ event: 'acquired', permits, hold, total, recorded, holders, tokens: lease.tokens.length });
    await sleep(minHold + Math.random() * (maxHold - minHold));
    await raw.hDel(config.heldKey, config.child);
    const released = await lease.release();
    // A lost grant: why (LockLostError's reason), and the longest event-loop stall of the hold.
    const why = lease.signal.aborted ? String(lease.signal.reason && lease.signal.reason.reason) : 'not signalled';
    const stalledMs = Math.round(stalls.max / 1e6);
    await send({ event: released ? 'released' : 'lost', permits, hold, ...(!released && { why, stalledMs }) });
  }
  await sem.close();
  await raw.quit();
  await send({ stopped: true });
}

const modes = { steps, load, soak, weighted, 'raw-move': rawMove, zombie };
const run = modes[config.mode];
(run ? run() : Promise.reject(new Error(`unknown mode ${config.mode}`))).then(
  () => process.exit(0),
  async (error) => {
    await send({ error: String((error && error.stack) || error) }).catch(() => undefined);
    process.exit(1);
  },
);
