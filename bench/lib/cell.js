'use strict';
// Runs one cell (one contender, one configuration, one repetition) in worker processes (kept between
// cells, or fresh for memory figures) and turns what they report plus Redis INFO deltas into metrics.
const { fork } = require('node:child_process');
const path = require('node:path');
const { randomBytes } = require('node:crypto');
const { now } = require('./clock');
const m = require('./metrics');

const WORKER = path.join(__dirname, 'worker.js');
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Every worker started and not yet gone, so the runner can end them (by pid) on the way out. */
const live = new Set();

function killWorkers() {
  spare.length = 0;
  for (const child of live) {
    try {
      process.kill(child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  }
  live.clear();
}

function startWorker() {
  const child = fork(WORKER, [], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
  live.add(child);
  const inbox = [];
  const waiting = [];
  let gone = false;
  child.on('message', (message) => {
    const w = waiting.shift();
    if (w) w(message);
    else inbox.push(message);
  });
  const exited = new Promise((resolve) =>
    child.on('exit', () => {
      gone = true;
      live.delete(child);
      resolve();
      for (const w of waiting.splice(0)) w({ type: 'error', message: 'worker exited' });
    }),
  );
  const worker = {
    child,
    exited,
    get gone() {
      return gone;
    },
    next(timeoutMs) {
      if (inbox.length > 0) return Promise.resolve(inbox.shift());
      if (gone) return Promise.resolve({ type: 'error', message: 'worker exited' });
      return new Promise((resolve) => {
        const timer = setTimeout(() => {
          const i = waiting.indexOf(done);
          if (i >= 0) waiting.splice(i, 1);
          resolve({ type: 'error', message: `no reply within ${timeoutMs} ms` });
        }, timeoutMs);
        const done = (message) => {
          clearTimeout(timer);
          resolve(message);
        };
        waiting.push(done);
      });
    },
    send: (message) => child.connected && child.send(message),
    /** Ends the cell's clients; true when the worker can take another cell. */
    async endCell() {
      if (gone) return false;
      worker.send({ type: 'close' });
      const reply = await worker.next(10000);
      return reply.type === 'closed' && inbox.length === 0;
    },
    async kill() {
      worker.send({ type: 'exit' });
      await Promise.race([exited, sleep(3000)]);
      if (!gone) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
        await exited;
      }
    },
  };
  return worker;
}

/** Idle workers kept between cells (their modules loaded, as in a long-running service). */
const spare = [];

async function withWorkers(count, fn, { fresh = false } = {}) {
  const workers = [];
  for (let i = 0; i < count; i++) workers.push((!fresh && spare.pop()) || startWorker());
  let ok = false;
  try {
    const result = await fn(workers);
    ok = true;
    return result;
  } finally {
    await Promise.all(
      workers.map(async (w) => {
        if (ok && !fresh && (await w.endCell())) spare.push(w);
        else await w.kill();
      }),
    );
  }
}

/** Ends the idle workers (at the end of the run). */
async function closeWorkers() {
  await Promise.all(spare.splice(0).map((w) => w.kill()));
}

function expectType(message, type) {
  if (message.type !== type) throw new Error(message.message ?? `expected ${type}, got ${message.type}`);
  return message;
}

function delta(before, after) {
  const commands = {};
  for (const [name, calls] of Object.entries(after.commands)) {
    const d = calls - (before.commands[name] ?? 0);
    if (d > 0) commands[name] = d;
  }
  const usec = {};
  for (const [name, total] of Object.entries(after.usec)) {
    const d = total - (before.usec[name] ?? 0);
    if (d > 0) usec[name] = d;
  }
  return {
    ms: after.at - before.at,
    calls: after.calls - before.calls,
    commands,
    usec,
    cpuMicros: (after.cpu - before.cpu) * 1e6,
  };
}

/** Puts `permits` tokens on a bare list. */
async function prepareBare(monitor, key, permits) {
  await monitor.client.sendCommand(['DEL', key]);
  await monitor.client.sendCommand(['RPUSH', key, ...Array.from({ length: permits }, (_, i) => String(i))]);
}

/** Splits `clients` over `procs` processes as evenly as possible. */
function split(clients, procs) {
  return Array.from({ length: procs }, (_, p) => Math.floor(clients / procs) + (p < clients % procs ? 1 : 0));
}

async function setupWorkers(workers, base, perProcess) {
  let first = 0;
  workers.forEach((w, p) => {
    w.send({ type: 'setup', ...base, clients: perProcess[p], firstClient: first });
    first += perProcess[p];
  });
  const ready = await Promise.all(workers.map((w) => w.next(60000)));
  ready.forEach((message) => expectType(message, 'ready'));
  return ready;
}

/**
 * A loop cell: `clients` clients over `procs` processes, each locking, holding `holdMs`, unlocking,
 * for `warmMs` + `durationMs`; metrics come from the last `durationMs`.
 */
async function loopCell(
  ctx,
  { contender, options, permits, clients, procs = 1, holdMs, warmMs, durationMs, drainMs, mode = 'loop' },
) {
  const key = `bench:${randomBytes(6).toString('hex')}`;
  if (contender === 'bare' || mode === 'pingpong') await prepareBare(ctx.monitor, key, permits);
  const connectionsBefore = (await ctx.monitor.snapshot()).connections;
  const base = {
    mode,
    contender,
    options,
    url: ctx.url,
    key,
    permits,
    holdMs,
    acquireTimeout: durationMs + warmMs + drainMs,
  };
  const perProcess = split(clients, procs);
  const { results, server } = await withWorkers(procs, async (workers) => {
    await setupWorkers(workers, base, perProcess);
    const startAt = now() + 50 + 5 * procs;
    const run = { type: 'run', startAt, warmEnd: startAt + warmMs, endAt: startAt + warmMs + durationMs };
    run.hardDeadline = run.endAt + drainMs;
    workers.forEach((w) => w.send(run));
    const snapshots = {};
    const at = (t, name) =>
      sleep(Math.max(0, t - now())).then(async () => (snapshots[name] = await ctx.monitor.snapshot()));
    const taken = Promise.all([at(run.warmEnd, 'start'), at(run.endAt, 'end')]);
    const done = await Promise.all(workers.map((w) => w.next(run.hardDeadline - now() + 15000)));
    await taken;
    return { results: done.map((message) => expectType(message, 'done').result), server: { run, ...snapshots } };
  });
  const connections = (await ctx.monitor.snapshot()).connections - connectionsBefore;
  await ctx.monitor.deleteMatching(`*${key}*`);

  const { run } = server;
  const from = run.warmEnd;
  const to = run.endAt;
  const cycles = m.merge(results.map((r) => r.events));
  const inWindow = [];
  for (let i = 0; i < cycles.g.length; i++) if (cycles.g[i] >= from && cycles.g[i] < to) inWindow.push(i);
  const grants = inWindow.length;
  // Waits: of grants in the window, and of calls made in the window but served only after it (a
  // client starved in the window is served in the drain, and its whole wait counts).
  const waits = inWindow.map((i) => cycles.g[i] - cycles.a[i]);
  for (let i = 0; i < cycles.g.length; i++)
    if (cycles.g[i] >= to && cycles.a[i] < to) waits.push(cycles.g[i] - cycles.a[i]);
  waits.sort((x, y) => x - y);
  const holds = inWindow.map((i) => cycles.r[i] - cycles.g[i]);
  // Permits a grant takes: a weighted contender's client n takes weights[n % length] (contenders.js).
  const weights = options?.weights;
  const permitsTaken = inWindow.reduce((sum, i) => sum + (weights ? weights[cycles.c[i] % weights.length] : 1), 0);
  const perClient = new Array(clients).fill(0);
  for (const i of inWindow) perClient[cycles.c[i]]++;
  const gaps = m.handoffGaps(cycles, permits, from, to).sort((x, y) => x - y);
  const redis = delta(server.start, server.end);
  const windowMs = to - from;
  const clientCpu = results.reduce((sum, r) => sum + (r.marks.end.cpu - r.marks.start.cpu), 0);
  const sent = results.reduce((sum, r) => sum + (r.marks.end.sent - r.marks.start.sent), 0);
  const perCycle = (x) => (grants > 0 ? x / grants : null);
  return {
    cyclesPerSec: (grants / windowMs) * 1000,
    permitsPerSec: (permitsTaken / windowMs) * 1000,
    grants,
    gapP50: m.percentile(gaps, 50),
    gapP99: m.percentile(gaps, 99),
    handoffs: gaps.length,
    waitP50: m.percentile(waits, 50),
    waitP99: m.percentile(waits, 99),
    waitMax: waits.length ? waits[waits.length - 1] : null,
    holdMean: holds.length ? holds.reduce((x, y) => x + y, 0) / holds.length : null,
    jain: m.jain(perClient),
    // A grant overtook a waiter that called > 1 ms earlier and was served > 1 ms later (grants within
    // 1 ms of each other are simultaneous as far as a client can observe); strict: served at all later.
    overtook: clients > 1 ? m.overtakes(cycles, from, to, 1, 1) : null,
    overtookStrict: clients > 1 ? m.overtakes(cycles, from, to, 1, 0) : null,
    sentPerCycle: perCycle(sent),
    callsPerCycle: perCycle(redis.calls),
    redisCpuPerCycle: perCycle(redis.cpuMicros),
    clientCpuPerCycle: perCycle(clientCpu),
    commands: Object.fromEntries(Object.entries(redis.commands).map(([k, v]) => [k, perCycle(v)])),
    // Time Redis spent executing each command (INFO commandstats usec; a script's includes its calls).
    commandUsec: Object.fromEntries(Object.entries(redis.usec).map(([k, v]) => [k, perCycle(v)])),
    connections,
    maxHolders: Math.max(m.maxHolders(cycles), ...results.map((r) => r.maxHolders)),
    permits,
    timeouts: results.reduce((sum, r) => sum + r.timeouts, 0),
    ...(ctx.keepEvents ? { events: cycles, window: { from, to } } : {}),
  };
}

/** A floor: one connection sending one command at a time. */
async function floorCell(ctx, { floor, warmMs, durationMs }) {
  const { result, server } = await withWorkers(1, async ([worker]) => {
    await setupWorkers([worker], { mode: 'floor', contender: floor, url: ctx.url }, [1]);
    const startAt = now() + 50;
    const run = { type: 'run', startAt, warmEnd: startAt + warmMs, endAt: startAt + warmMs + durationMs };
    worker.send(run);
    const snapshots = {};
    const at = (t, name) =>
      sleep(Math.max(0, t - now())).then(async () => (snapshots[name] = await ctx.monitor.snapshot()));
    const taken = Promise.all([at(run.warmEnd, 'start'), at(run.endAt, 'end')]);
    const done = expectType(await worker.next(durationMs + warmMs + 30000), 'done');
    await taken;
    return { result: done.result, server: { run, ...snapshots } };
  });
  const windowMs = server.run.endAt - server.run.warmEnd;
  const redis = delta(server.start, server.end);
  const ops = result.inWindow;
  return {
    opsPerSec: (ops / windowMs) * 1000,
    callsPerOp: redis.calls / ops,
    redisCpuPerOp: redis.cpuMicros / ops,
    clientCpuPerOp: (result.marks.end.cpu - result.marks.start.cpu) / ops,
    sentPerOp: (result.marks.end.sent - result.marks.start.sent) / ops,
  };
}

/**
 * A burst: a holder takes the lock; `waiters` clients in one process call lock once each, in order;
 * after `idleMs` blocked, the holder releases and every waiter is served and releases at once.
 */
async function burstCell(ctx, { contender, options, waiters, idleMs, settleMs, drainMs, fresh }) {
  const key = `bench:${randomBytes(6).toString('hex')}`;
  if (contender === 'bare') await prepareBare(ctx.monitor, key, 1);
  const before = await ctx.monitor.snapshot();
  const base = {
    mode: 'burst',
    contender,
    options,
    url: ctx.url,
    key,
    permits: 1,
    holdMs: 0,
    acquireTimeout: settleMs + idleMs + drainMs,
  };
  const { result, server, ready } = await withWorkers(
    1,
    async ([worker]) => {
      const [readyMessage] = await setupWorkers([worker], base, [waiters + 1]);
      const setupSnapshot = await ctx.monitor.snapshot();
      const startAt = now() + 50;
      const run = {
        type: 'run',
        startAt,
        waitersAt: startAt + 50,
        idleStart: startAt + 50 + settleMs,
        idleEnd: startAt + 50 + settleMs + idleMs,
        releaseAt: startAt + 50 + settleMs + idleMs + 5,
      };
      run.hardDeadline = run.releaseAt + drainMs;
      worker.send(run);
      const snapshots = { setup: setupSnapshot };
      const at = (t, name) =>
        sleep(Math.max(0, t - now())).then(async () => (snapshots[name] = await ctx.monitor.snapshot()));
      const taken = Promise.all([at(run.idleStart, 'idleStart'), at(run.idleEnd, 'idleEnd')]);
      const done = expectType(await worker.next(run.hardDeadline - now() + 15000), 'done');
      await taken;
      snapshots.done = await ctx.monitor.snapshot();
      return { result: done.result, server: { run, ...snapshots }, ready: readyMessage };
    },
    { fresh },
  );
  await ctx.monitor.deleteMatching(`*${key}*`);
  const after = await ctx.monitor.snapshot();

  const cycles = result.events;
  const served = cycles.g.length;
  const lastGrant = served ? Math.max(...cycles.g) : result.released;
  const drainMsTaken = lastGrant - result.released;
  const idle = delta(server.idleStart, server.idleEnd);
  const idleSeconds = idle.ms / 1000;
  const idleRate = idle.calls / idleSeconds;
  const drain = delta(server.idleEnd, server.done);
  // The drain window opens a few ms before the release; take out what idle waiting sent meanwhile.
  const drainCalls = Math.max(0, drain.calls - idleRate * ((result.released - server.idleEnd.at) / 1000));
  const sentIdle = result.marks.idleEnd.sent - result.marks.idleStart.sent;
  const sentDrain = result.marks.done.sent - result.marks.idleEnd.sent;
  const waitsFromRelease = cycles.g.map((g) => g - result.released).sort((x, y) => x - y);
  const peak = result.marks.idleEnd.memory;
  const base0 = result.marks.base.memory;
  return {
    waiters,
    served,
    timeouts: result.timeouts,
    drainMs: drainMsTaken,
    cyclesPerSec: drainMsTaken > 0 ? (served / drainMsTaken) * 1000 : null,
    grantAfterReleaseP50: m.percentile(waitsFromRelease, 50),
    grantAfterReleaseMax: waitsFromRelease.length ? waitsFromRelease[waitsFromRelease.length - 1] : null,
    fifoViolations: m.fifoViolations(cycles, () => 0),
    overtook: m.overtakes(cycles, -Infinity, Infinity, 0),
    idleCallsPerSec: idleRate,
    idleSentPerSec: sentIdle / ((result.marks.idleEnd.at - result.marks.idleStart.at) / 1000),
    idleRedisCpuPerSec: idle.cpuMicros / idleSeconds / 1e6,
    drainCallsPerCycle: served ? drainCalls / served : null,
    drainSentPerCycle: served ? sentDrain / served : null,
    drainRedisCpuPerCycle: served ? drain.cpuMicros / served : null,
    connections: after.connections - before.connections - 0,
    connectedWhileBlocked: server.idleEnd.connected - before.connected,
    rssPerWaiterKB: (peak.rss - base0.rss) / 1024 / waiters,
    heapPerWaiterKB: (peak.heapUsed - base0.heapUsed) / 1024 / waiters,
    rssMB: peak.rss / 1048576,
    redisMemoryPerWaiterKB: (server.idleEnd.memory - before.memory) / 1024 / waiters,
    readyRssMB: ready.memory.rss / 1048576,
  };
}

module.exports = { loopCell, floorCell, burstCell, killWorkers, closeWorkers };
