#!/usr/bin/env node
'use strict';
/*
 * npm run bench:client [-- --reps N --seconds S --clients C[,C2] --dist /other/dist]
 * node bench/client.js --instructions [--clients 1,8 --cycles 4000,10000 --reps 2]
 * node bench/client.js --allocations [--top]
 *
 * Splits the client's CPU per cycle (a mutex, C callers in one process, hold 0: 8 by default, 1 is
 * the uncontended cycle) into the protocol and the library's own JavaScript, by running three
 * clients in turn against one redis-server, each in a fresh process, interleaved over N repetitions:
 *   - bare:  a BLPOP/LPUSH token list (the floor: two commands, no records);
 *   - lean:  the library's commands with no library around them (bench/lib/lean.js: tryLock while
 *            uncontended; BLMOVE + claim in one pipeline on each caller's own connection while
 *            contended; release on a shared one; built by the library's script layer, dist/redis/),
 *            so the commands and arguments are exactly a semaphore's;
 *   - lib:   `Semaphore.lock()` / `unlock()`.
 * lean − bare is what the protocol costs the client (a third command, its arguments, its replies);
 * lib − lean is the library's own JavaScript. Prints client CPU µs per cycle (process.cpuUsage over
 * the measured window), the median (min–max) over repetitions, and the paired ratios.
 *
 * Wall-clock CPU on a small VM is bimodal (runs of the same code differ 1.6×), so two deterministic
 * measures of the same cycle replace it on request:
 *   --instructions  client user-space instructions per cycle, uncontended and with 8 callers unless
 *                   --clients says otherwise, against issue 31's target (the library ≤ 1.15× the
 *                   lean client): each client runs under
 *                   `valgrind --tool=callgrind` (Redis does not) for a fixed number of cycles, twice
 *                   (--cycles N1,N2, default 4000,10000, shared by the callers); (I2 − I1) / (N2 − N1)
 *                   cancels start-up and JIT warm-up. 2 repetitions by default; needs valgrind.
 *                   The library runs with `waitSlice` and `lock()` at 60 s, so no wait slice ends.
 *   --allocations   bytes allocated on the JS heap per cycle over the measured window, by the
 *                   inspector's sampling heap profiler (every 1 KiB, objects collected since included);
 *                   with --top, also the library client's 10 largest allocating functions.
 */
const { fork } = require('node:child_process');
const path = require('node:path');
const { hasCallgrind } = require('./lib/callgrind');
const { now } = require('./lib/clock');
const { leanClients } = require('./lib/lean');
const { startRedisServer } = require('../tools/redis-server');
const { num, ratioRange, range, table } = require('./lib/format');
const { summary } = require('./lib/metrics');
const { gitCommit } = require('./lib/provenance');
const { option, privateDist } = require('./lib/report');

const KINDS = ['bare', 'lean', 'lib'];
const NAMES = {
  bare: 'bare BLPOP/LPUSH list',
  lean: "lean: the library's commands, no library",
  lib: 'redis-token-semaphore',
};
const VALGRIND = ['--tool=callgrind', '--callgrind-out-file=/dev/null', '--smc-check=all-non-file'];

// ---- One measured run, in a child process ----

/** Starts the sampling heap profiler; the function it returns stops it and gives bytes per cycle, overall and by function. */
async function sampleAllocations() {
  const { Session } = require('node:inspector/promises');
  const session = new Session();
  session.connect();
  await session.post('HeapProfiler.startSampling', {
    samplingInterval: 1024,
    includeObjectsCollectedByMinorGC: true,
    includeObjectsCollectedByMajorGC: true,
  });
  return async (cycles) => {
    const { profile } = await session.post('HeapProfiler.stopSampling');
    session.disconnect();
    const sites = {};
    const walk = ({ callFrame: { functionName, url, lineNumber }, selfSize, children }) => {
      const site = `${functionName || '(anonymous)'}@${url.replace(/^file:\/\//, '').replace(`${path.dirname(__dirname)}/`, '')}:${lineNumber + 1}`;
      sites[site] = (sites[site] ?? 0) + selfSize / cycles;
      children.forEach(walk);
    };
    walk(profile.head);
    return { bytesPerCycle: Object.values(sites).reduce((a, b) => a + b, 0), sites };
  };
}

async function child({ kind, url, dist, clients, seconds, cycles, allocations }) {
  const { createClient } = require('redis');
  const connect = async () => {
    const client = createClient({ url });
    client.on('error', () => undefined);
    await client.connect();
    return client;
  };
  const main = await connect();
  const name = `client-bench-${process.pid}`;
  const connections = [];
  let step;
  let close = async () => undefined;
  if (kind === 'bare') {
    const key = `${name}:bare`;
    await main.sendCommand(['RPUSH', key, 't']);
    for (let i = 0; i < clients; i++) connections.push(await connect());
    step = async (connection) => {
      const [, token] = await connection.sendCommand(['BLPOP', key, '5']);
      await main.sendCommand(['LPUSH', key, token]);
    };
  } else if (kind === 'lean') {
    // A fixed-cycle run is slow under valgrind: 60 s slices, as the library's below.
    const waitSlice = cycles ? 60_000 : undefined;
    const lean = await leanClients({ dist, name, permits: 1, clients, connect, waitSlice });
    connections.push(...lean.clients);
    step = async (caller) => caller.unlock(await caller.lock(now() + (cycles ? 60_000 : 5000)));
    close = lean.close;
  } else {
    const { Semaphore } = require(dist);
    // A fixed-cycle run is slow under valgrind: 60 s slices, so that no wait slice ends empty.
    const wait = cycles ? 60_000 : 5000;
    const semaphore = new Semaphore(name, { redis: main, resources: 1, ...(cycles && { waitSlice: wait }) });
    await semaphore.existsOrCreate();
    for (let i = 0; i < clients; i++) connections.push(semaphore);
    step = async (s) => s.unlock(await s.lock(wait));
    close = () => semaphore.close();
  }
  const run = async (more) => {
    const loop = async (connection) => {
      let n = 0;
      for (; more(); n++) await step(connection);
      return n;
    };
    return (await Promise.all(connections.map(loop))).reduce((a, b) => a + b, 0);
  };
  const until = (ms) => {
    const stop = Date.now() + ms;
    return () => Date.now() < stop;
  };
  let result;
  if (cycles) {
    // Under valgrind: a fixed number of cycles, no warm-up (the parent subtracts two runs).
    let left = cycles;
    result = { cycles: await run(() => left-- > 0) };
  } else {
    await run(until(300)); // warm up
    const stopSampling = allocations ? await sampleAllocations() : null;
    const cpu0 = process.cpuUsage();
    const started = performance.now();
    const done = await run(until(seconds * 1000));
    const cpu = process.cpuUsage(cpu0);
    const elapsed = performance.now() - started;
    result = {
      cycles: done,
      perSecond: (done / elapsed) * 1000,
      cpuPerCycle: (cpu.user + cpu.system) / done,
      ...(stopSampling && (await stopSampling(done))),
    };
  }
  await close();
  for (const connection of new Set(connections)) if (connection !== main && connection.quit) await connection.quit();
  await main.quit();
  process.send(result);
}

/** Runs one child; under valgrind its result also has `instructions` (callgrind's "Collected" total). */
function runChild(config, underValgrind = false) {
  return new Promise((resolve, reject) => {
    const worker = fork(__filename, ['--child', JSON.stringify(config)], {
      stdio: ['ignore', 'inherit', underValgrind ? 'pipe' : 'inherit', 'ipc'],
      ...(underValgrind && { execPath: 'valgrind', execArgv: [...VALGRIND, process.execPath] }),
    });
    let result;
    let stderr = '';
    worker.stderr?.on('data', (data) => (stderr += data));
    worker.once('message', (message) => (result = message));
    worker.once('error', reject);
    worker.once('close', (code) => {
      const collected = /Collected : (\d+)/.exec(stderr);
      if (!result || (underValgrind && !collected))
        reject(new Error(`${config.kind} run exited with ${code}\n${stderr}`));
      else resolve(underValgrind ? { ...result, instructions: Number(collected[1]) } : result);
    });
  });
}

/** Client instructions per cycle: two fixed-cycle runs under callgrind, (I2 − I1) / (N2 − N1). */
async function instructionsPerCycle(config, [n1, n2]) {
  const first = await runChild({ ...config, cycles: n1 }, true);
  const second = await runChild({ ...config, cycles: n2 }, true);
  return { instructionsPerCycle: (second.instructions - first.instructions) / (n2 - n1) };
}

/** One row per client: its `field` as median (min–max) over repetitions, and the paired ratios to bare and lean. */
function rows(runs, field, format) {
  const paired = (a, b) => summary(runs[a].map((run, i) => run[field] / runs[b][i][field]));
  return KINDS.map((kind) => [
    NAMES[kind],
    range(summary(runs[kind].map((run) => run[field])), format),
    kind === 'bare' ? '1.00×' : ratioRange(paired(kind, 'bare')),
    kind === 'bare' ? '—' : kind === 'lean' ? '1.00×' : ratioRange(paired(kind, 'lean')),
  ]);
}

/** "The protocol costs the client … over the bare list; the library's own code … over the lean client (medians)." */
function split(runs, field, format, unit) {
  const median = (kind) => summary(runs[kind].map((run) => run[field])).median;
  return (
    `\nThe protocol costs the client ${format(median('lean') - median('bare'))}${unit} per cycle over the bare list; ` +
    `the library's own code ${format(median('lib') - median('lean'))}${unit} over the lean client (medians).`
  );
}

// ---- The runner ----

/** Issue 31's target: client instructions per cycle ≤ 1.15× the lean client's. */
const TARGET_OVER_LEAN = 1.15;

/** "uncontended (1 caller)" or "mutex, 8 callers in one process". */
const shape = (clients) => (clients === 1 ? 'uncontended: one caller' : `mutex, ${clients} callers in one process`);

async function main() {
  const instructions = process.argv.includes('--instructions');
  const allocations = process.argv.includes('--allocations');
  if (instructions && !hasCallgrind())
    throw new Error('bench/client.js --instructions needs valgrind (apt-get install valgrind)');
  const reps = Number(option('reps', instructions ? '2' : '5'));
  const seconds = Number(option('seconds', '3'));
  // Instructions: uncontended and contended, issue 31's two cells; CPU and allocations: contended.
  const counts = option('clients', instructions ? '1,8' : '8')
    .split(',')
    .map(Number);
  const cycles = option('cycles', '4000,10000').split(',').map(Number);
  const dist = privateDist('bench:client', option('dist', null));
  const build = option('dist', null) === null ? `dist/ of ${gitCommit()}` : path.resolve(option('dist'));
  const server = await startRedisServer(['--save', '', '--appendonly', 'no'], { stopOnExit: true });
  const all = [];
  try {
    for (const clients of counts) {
      const runs = Object.fromEntries(KINDS.map((kind) => [kind, []]));
      for (let rep = 0; rep < reps; rep++) {
        for (const kind of KINDS) {
          const config = { kind, url: server.url, dist, clients, seconds, allocations };
          runs[kind].push(await (instructions ? instructionsPerCycle(config, cycles) : runChild(config)));
        }
      }
      all.push([clients, runs]);
    }
  } finally {
    await server.stop();
  }
  const what = instructions ? 'instructions' : allocations ? 'JS heap allocations' : 'CPU';
  console.log(`# Client ${what} per cycle: protocol and library, ${build}\n`);
  for (const [clients, runs] of all) {
    if (all.length > 1) console.log(`## ${shape(clients)}, hold 0\n`);
    if (instructions) printInstructions(runs, clients, cycles, reps);
    else if (allocations) printAllocations(runs, clients, reps, seconds);
    else printCpu(runs, clients, reps, seconds);
    console.log('');
  }
}

function printInstructions(runs, clients, cycles, reps) {
  console.log(
    `${shape(clients)}, hold 0; each client under callgrind for ${num(cycles[0])} and then ${num(cycles[1])} cycles, ` +
      `instructions per cycle = the difference / ${num(cycles[1] - cycles[0])} (start-up and JIT warm-up cancel); ` +
      `${reps} interleaved repetitions; redis-server outside valgrind.\n`,
  );
  console.log(
    table(
      ['client', 'instructions per cycle', '× bare (paired)', '× lean (paired)'],
      rows(runs, 'instructionsPerCycle', (x) => num(x)),
    ),
  );
  console.log(split(runs, 'instructionsPerCycle', (x) => num(x), ' instructions'));
  const overLean = summary(runs.lib.map((run, i) => run.instructionsPerCycle / runs.lean[i].instructionsPerCycle));
  const ok = overLean.median <= TARGET_OVER_LEAN;
  console.log(
    `\nTarget (issue 31): the library ≤ ${TARGET_OVER_LEAN}× the lean client's instructions per cycle: ${ratioRange(overLean)}: ${ok ? '✓ met' : '✗ missed'}.`,
  );
}

function printAllocations(runs, clients, reps, seconds) {
  const kib = (x) => num(x / 1024, 1);
  console.log(
    `${shape(clients)}, hold 0; ${reps} interleaved repetitions of ${seconds} s; sampling heap profiler ` +
      `(every 1 KiB, objects already collected included) over the measured window.\n`,
  );
  console.log(
    table(
      ['client', 'KiB allocated per cycle', '× bare (paired)', '× lean (paired)'],
      rows(runs, 'bytesPerCycle', kib),
    ),
  );
  console.log(split(runs, 'bytesPerCycle', kib, ' KiB'));
  if (!process.argv.includes('--top')) return;
  const sites = {};
  for (const run of runs.lib)
    for (const [site, bytes] of Object.entries(run.sites)) sites[site] = (sites[site] ?? 0) + bytes / reps;
  const top = Object.entries(sites)
    .sort((a, b) => b[1] - a[1])
    .slice(0, 10);
  console.log(
    `\n## The library client's 10 largest allocating functions (self size per cycle, mean of ${reps} repetitions)\n`,
  );
  console.log(
    table(
      ['function@file:line', 'bytes per cycle'],
      top.map(([site, bytes]) => [`\`${site}\``, num(bytes)]),
    ),
  );
}

function printCpu(runs, clients, reps, seconds) {
  console.log(
    `${shape(clients)}, hold 0; ${reps} interleaved repetitions of ${seconds} s; one redis-server, not pinned.\n`,
  );
  const cpu = rows(runs, 'cpuPerCycle', (x) => num(x, 1));
  for (const [i, row] of cpu.entries()) row.splice(1, 0, range(summary(runs[KINDS[i]].map((run) => run.perSecond))));
  console.log(table(['client', 'cycles/s', 'client CPU µs per cycle', '× bare (paired)', '× lean (paired)'], cpu));
  console.log(split(runs, 'cpuPerCycle', (x) => num(x, 1), ' µs'));
}

if (process.argv[2] === '--child') {
  child(JSON.parse(process.argv[3])).catch((error) => {
    console.error(error);
    process.exit(1);
  });
} else {
  main().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });
}
