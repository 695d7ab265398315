#!/usr/bin/env node
'use strict';
/*
 * npm run bench:locks [-- --names N --waited N --waiters N --bound N --seconds N --save --out DIR]
 *
 * The lock manager (createLocks) at scale, against a private redis-server on a free loopback port:
 * 10,000 names each held once; then waiters on a few hundred of them; then a release of every
 * holder, and a run of lock(name, fn) cycles across those names. Prints what the manager opened
 * (blocking connections by its own count and Redis' connected_clients), heap per held name and per
 * waiter (after a GC: run with --expose-gc, as the npm script does), and grants per second. Beside
 * it, the same waiters with one `Semaphore` per name, as the library was used before `createLocks`
 * (a pool of up to 10 connections per name), for the connections that costs.
 * Prints Markdown; --save also writes bench/results/<date>-locks.md.
 */
const fs = require('node:fs');
const os = require('node:os');
const { createClient } = require('redis');
const server = require('./lib/server');
const { gitCommit, localDate } = require('./lib/provenance');
const { finish, privateDist, runMain } = require('./lib/report');

/** The whole run is killed (redis-server first) if it takes longer than this. */
const RUN_DEADLINE_MS = 5 * 60_000;

function parseArgs(argv) {
  const args = { names: 10_000, waited: 300, waiters: 3, bound: 50, seconds: 5, save: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new TypeError(`Expected a value after ${a}`);
      return Number(v);
    };
    if (a === '--save') args.save = true;
    else if (a === '--out') args.out = argv[++i];
    else if (['--names', '--waited', '--waiters', '--bound', '--seconds'].includes(a)) args[a.slice(2)] = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${fs.readFileSync(__filename, 'utf8').split('*/')[0]}*/\n`);
      process.exit(0);
    } else throw new TypeError(`Unknown option ${a}`);
  }
  for (const key of ['names', 'waited', 'waiters', 'bound', 'seconds']) {
    if (!Number.isInteger(args[key]) || args[key] < 1 || args[key] > 100_000)
      throw new TypeError(`--${key}: expected an integer 1–100,000`);
  }
  if (args.waited > args.names) throw new TypeError('--waited: at most --names');
  return args;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Heap in use after a full GC (when --expose-gc gave us `gc`). */
async function heapUsed() {
  if (typeof global.gc === 'function') {
    for (let i = 0; i < 3; i++) {
      global.gc();
      await sleep(20);
    }
  }
  return process.memoryUsage().heapUsed;
}

async function until(check, timeoutMs, what) {
  const started = performance.now();
  while (!(await check())) {
    if (performance.now() - started > timeoutMs) throw new Error(`Timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(20);
  }
}

/** In batches, so 10,000 calls do not all start in one tick. */
async function inBatches(items, size, fn) {
  const results = [];
  for (let i = 0; i < items.length; i += size) results.push(...(await Promise.all(items.slice(i, i + size).map(fn))));
  return results;
}

async function info(admin) {
  const text = await admin.sendCommand(['INFO', 'clients']);
  const field = (name) => Number(new RegExp(`${name}:(\\d+)`).exec(text)?.[1] ?? 0);
  return { connected: field('connected_clients'), blocked: field('blocked_clients') };
}

const kb = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`;

async function measure({ lib, url, args, log }) {
  const { createLocks, Semaphore } = lib;
  const admin = createClient({ url });
  admin.on('error', () => undefined);
  await admin.connect();
  const redis = createClient({ url });
  redis.on('error', () => undefined);
  await redis.connect();
  const rows = [];
  const failures = [];
  const run = `bench:${Date.now().toString(36)}`;
  const names = Array.from({ length: args.names }, (_, i) => `${run}:${i}`);
  const waited = names.slice(0, args.waited);
  try {
    const before = await info(admin);
    const locks = createLocks({ redis, maxBlockingConnections: args.bound, idleTimeout: 2000 });
    const heapEmpty = await heapUsed();

    log(`holding ${args.names} names…`);
    let started = performance.now();
    const leases = await inBatches(names, 500, (name) => locks.acquire(name));
    const holdSeconds = (performance.now() - started) / 1000;
    const heapHeld = await heapUsed();
    const afterHold = await info(admin);
    rows.push(['names held (one lease each)', args.names.toLocaleString('en')]);
    rows.push([
      'time to acquire them (batches of 500)',
      `${holdSeconds.toFixed(2)} s (${Math.round(args.names / holdSeconds).toLocaleString('en')}/s)`,
    ]);
    rows.push(['heap per held name (its semaphore and lease)', kb((heapHeld - heapEmpty) / args.names)]);
    rows.push(['blocking connections while nobody waits', String(locks.stats().connections)]);

    log(`${args.waiters} waiters on each of ${args.waited} names…`);
    const served = [];
    const waits = [];
    for (const name of waited)
      for (let i = 0; i < args.waiters; i++) waits.push(locks.lock(name, () => void served.push(name)));
    const waiterCount = waits.length;
    await until(
      async () => (await info(admin)).blocked >= Math.min(args.bound, waiterCount),
      30_000,
      'the pool to fill',
    );
    await sleep(500);
    const heapWaiting = await heapUsed();
    const whileWaiting = await info(admin);
    const opened = locks.stats().connections;
    rows.push(['waiters', `${waiterCount.toLocaleString('en')} (${args.waiters} on each of ${args.waited} names)`]);
    rows.push(['heap per waiter', kb((heapWaiting - heapHeld) / waiterCount)]);
    rows.push([
      `blocking connections while they wait (bound ${args.bound})`,
      `${opened} (the manager's count); Redis: ${whileWaiting.connected - before.connected} connections of this process, ${whileWaiting.blocked} blocked`,
    ]);
    if (opened > args.bound)
      failures.push(`the manager opened ${opened} blocking connections, more than its bound ${args.bound}`);
    if (whileWaiting.connected - afterHold.connected > args.bound + 1) {
      failures.push(
        `Redis counts ${whileWaiting.connected - afterHold.connected} new connections, more than the bound ${args.bound} (+1 control)`,
      );
    }

    log('releasing every holder…');
    started = performance.now();
    await inBatches(leases, 500, (lease) => lease.release());
    await Promise.all(waits);
    const drainSeconds = (performance.now() - started) / 1000;
    rows.push([
      `release all ${args.names.toLocaleString('en')} holders until every waiter was served`,
      `${drainSeconds.toFixed(2)} s`,
    ]);
    if (served.length !== waiterCount) failures.push(`${served.length} of ${waiterCount} waiters were served`);

    log(`lock(name, fn) cycles on ${args.waited} names for ${args.seconds} s…`);
    let grants = 0;
    let most = 0;
    const stopAt = performance.now() + args.seconds * 1000;
    await Promise.all(
      waited.flatMap((name) =>
        Array.from({ length: args.waiters }, async () => {
          while (performance.now() < stopAt) {
            await locks.lock(name, () => void grants++);
            most = Math.max(most, locks.stats().connections);
          }
        }),
      ),
    );
    rows.push([
      `grants per second (${waiterCount} callers on ${args.waited} names, no hold)`,
      `${Math.round(grants / args.seconds).toLocaleString('en')}/s, at most ${most} blocking connections`,
    ]);

    const stranded = [];
    for (const name of waited) {
      const free = await admin.sendCommand(['LLEN', `SEMAPHORE:${name}:AVAILABLE`]);
      if (free !== 1) stranded.push(`${name}: ${free} free`);
    }
    if (stranded.length > 0) failures.push(`tokens not back after the cycles: ${stranded.slice(0, 5).join(', ')}…`);

    log('idle…');
    await until(
      () => locks.stats().names === 0 && locks.stats().connections === 0,
      15_000,
      'idle names and connections to close',
    );
    rows.push([
      'after idleTimeout (2 s here)',
      `${locks.stats().names} names, ${locks.stats().connections} blocking connections`,
    ]);
    await locks.close();

    log(`the same waiters with one Semaphore per name…`);
    const holders = await inBatches(waited, 100, async (name) => {
      const sem = new Semaphore(name, { redis });
      return { sem, token: await sem.lock() };
    });
    const startedConnections = (await info(admin)).connected;
    const perName = holders.flatMap(({ sem }) => Array.from({ length: args.waiters }, () => sem.lock(() => undefined)));
    await until(async () => (await info(admin)).blocked >= waiterCount, 30_000, 'every per-name waiter to block');
    const perNameConnections = (await info(admin)).connected - startedConnections;
    rows.push([
      `one Semaphore per name: blocking connections for the same ${waiterCount} waiters`,
      String(perNameConnections),
    ]);
    for (const { sem, token } of holders) await sem.unlock(token);
    await Promise.all(perName);
    await Promise.all(holders.map(({ sem }) => sem.close()));
  } finally {
    await redis.quit().catch(() => redis.disconnect());
    await admin.quit().catch(() => admin.disconnect());
  }
  const table = ['| measure | value |', '|---|---|', ...rows.map(([what, value]) => `| ${what} | ${value} |`)].join(
    '\n',
  );
  return { markdown: table, failures };
}

const started = { redis: null };

async function main() {
  const startedAt = Date.now();
  const args = parseArgs(process.argv.slice(2));
  const log = (line) => process.stderr.write(`${line}\n`);
  const distCopy = privateDist('bench:locks');

  const redis = await server.startServer({ pin: false });
  started.redis = redis;
  setTimeout(() => {
    log(`\nrun deadline (${RUN_DEADLINE_MS / 1000} s) passed: killing redis-server (pid ${redis.pid})`);
    redis.killNow();
    process.exit(1);
  }, RUN_DEADLINE_MS).unref();
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => redis.stop().finally(() => process.exit(130)));

  const pkg = require('../package.json');
  const date = localDate();
  const loadAtStart = os.loadavg()[0];
  const header = [
    `# redis-token-semaphore lock manager, ${date}`,
    '',
    `- Redis (started by the benchmark, loopback), Node ${process.version}, CPU ${server.cpuModel()} × ${os.cpus().length}, not pinned`,
    `- ${pkg.name} ${pkg.version} (${gitCommit()}), node-redis ${require('redis/package.json').version}${typeof global.gc === 'function' ? '' : '; NO --expose-gc: heap figures include garbage'}`,
    `- Command: \`npm run bench:locks${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}\``,
    '',
  ].join('\n');
  process.stdout.write(`${header}\n`);
  let result;
  try {
    result = await measure({ lib: require(distCopy), url: redis.url, args, log });
    process.stdout.write(`${result.markdown}\n`);
  } finally {
    await redis.stop();
  }
  finish({ name: 'locks', date, header, result, startedAt, loadAtStart, args, log });
}

runMain(main, started);
