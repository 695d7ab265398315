'use strict';
// Owns the instruction-count benchmark: Redis instructions per lock + unlock cycle, counted by callgrind.
//
// Deterministic where wall-clock
// figures on a shared VM are not, so a protocol change can be judged by one run. Runs this library
// and the bare BLPOP/LPUSH list, one after the other, against one redis-server under
// `valgrind --tool=callgrind`; only the measured window is counted (callgrind_control -z / -d, after
// every worker process has connected and before any closes).
//
//   npm run bench:instructions                      # this build (dist/)
//   node bench/instructions.js --dist /other/dist   # another build, to compare
//   node bench/instructions.js --seconds 4          # measured window per cell (default 4 s)
//   node bench/instructions.js --only mutex-8x8     # some cells (uncontended, mutex-8, mutex-8x8, sem4-32)
//   node bench/instructions.js --save               # also writes bench/results/<date>-instructions.md
const { fork } = require('node:child_process');
const { cpSync, rmSync, writeFileSync } = require('node:fs');
const { cpus, loadavg } = require('node:os');
const path = require('node:path');
const { sleep } = require('./lib/server');
const { dumpCounters, hasCallgrind, lastDumpTotal, startUnderCallgrind, zeroCounters } = require('./lib/callgrind');
const { option } = require('./lib/report');
const { gitCommit, localDate, resultsName } = require('./lib/provenance');

const NAMES = {
  bare: 'bare BLPOP/LPUSH list',
  evalsha: 'floor: 2× EVALSHA `return 1`',
  lib: 'redis-token-semaphore',
};

const CELLS = [
  { id: 'uncontended', clients: 1, procs: 1, permits: 1 },
  { id: 'mutex-8', clients: 8, procs: 1, permits: 1 },
  { id: 'mutex-8x8', clients: 8, procs: 8, permits: 1 },
  { id: 'sem4-32', clients: 32, procs: 1, permits: 4 },
];

/** Issue 31's targets: Redis instructions per cycle of the library, by cell. */
const TARGETS = { uncontended: 100_000, 'mutex-8': 145_000 };

/** Forks one worker (bench/lib/instructions-worker.js) with a queue of its messages. */
function startWorker(config) {
  const child = fork(path.join(__dirname, 'lib', 'instructions-worker.js'), [JSON.stringify(config)], {
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  const inbox = [];
  const waiting = [];
  let exitCode = null;
  child.on('message', (message) => (waiting.length ? waiting.shift()(message) : inbox.push(message)));
  const exited = new Promise((resolve) =>
    child.on('exit', (code) => {
      exitCode = code ?? 1;
      for (const w of waiting.splice(0)) w({ type: 'error', message: `worker exited with ${exitCode}` });
      resolve();
    }),
  );
  return {
    /** The next message, which must be of `type`, within `timeoutMs`. */
    next(type, timeoutMs) {
      const message = inbox.length
        ? Promise.resolve(inbox.shift())
        : exitCode !== null
          ? Promise.resolve({ type: 'error', message: `worker exited with ${exitCode}` })
          : new Promise((resolve) => {
              const timer = setTimeout(
                () => resolve({ type: 'error', message: `no ${type} within ${timeoutMs} ms` }),
                timeoutMs,
              );
              waiting.push((m) => {
                clearTimeout(timer);
                resolve(m);
              });
            });
      return message.then((m) => {
        if (m.type !== type) throw new Error(m.message ?? `expected ${type}, got ${m.type}`);
        return m;
      });
    },
    send: (message) => child.connected && child.send(message),
    /** Ends the worker by its pid if it has not exited within `ms`. */
    async end(ms) {
      const timer = setTimeout(() => {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }, ms);
      await exited;
      clearTimeout(timer);
    },
  };
}

/**
 * Runs one loop over `procs` worker processes (`clients` callers split between them): all connect,
 * then `between.before()` runs, all loop for `seconds`, then `between.after()` runs before any
 * closes. Resolves the cycles completed.
 */
async function runLoop(config, procs, between = { before() {}, after() {} }) {
  const per = Array.from(
    { length: procs },
    (_, p) => Math.floor(config.clients / procs) + (p < config.clients % procs ? 1 : 0),
  );
  const workers = per.map((clients, p) => startWorker({ ...config, clients, pushTokens: p === 0 }));
  try {
    await Promise.all(workers.map((w) => w.next('ready', 120_000)));
    await between.before();
    for (const w of workers) w.send({ type: 'go' });
    const counts = await Promise.all(workers.map((w) => w.next('cycles', (config.seconds + 120) * 1000)));
    between.after();
    return counts.reduce((sum, m) => sum + m.cycles, 0);
  } finally {
    for (const w of workers) w.send({ type: 'exit' });
    await Promise.all(workers.map((w) => w.end(30_000)));
  }
}

/** How long each cell counts an idle Redis, with its workers connected, before its measured window. */
const IDLE_MS = 1000;

/** Redis instructions per ms while nothing is sent (its timers), over IDLE_MS. */
async function idleRate(server, dir) {
  const start = zeroed(server);
  await sleep(IDLE_MS);
  dumpCounters(server);
  const ms = performance.now() - start;
  await sleep(500);
  return lastDumpTotal(dir) / ms;
}

/** Zeroes the counters; resolves when, on performance.now(). */
function zeroed(server) {
  zeroCounters(server);
  return performance.now();
}

async function main() {
  if (!hasCallgrind()) {
    console.error('bench/instructions.js needs valgrind (apt-get install valgrind)');
    process.exit(2);
  }
  const source = path.resolve(option('dist', path.join(__dirname, '..', 'dist')));
  // Workers load a private copy (inside the repository, so its requires find node_modules), so a
  // rebuild of dist/ during the run cannot pull it from under them.
  const dist = path.join(__dirname, `.dist-${process.pid}`);
  cpSync(source, dist, { recursive: true });
  process.on('exit', () => rmSync(dist, { recursive: true, force: true }));
  const seconds = Number(option('seconds', '4'));
  const { server, dir } = await startUnderCallgrind();
  process.on('SIGINT', () => process.exit(130));
  const { url } = server;
  const lines = [];
  const print = (line) => {
    console.log(line);
    lines.push(line);
  };
  try {
    print(`# Redis instructions per lock + unlock cycle (callgrind), ${localDate()}\n`);
    print(
      `${seconds} s per cell, library from ${path.relative(process.cwd(), source) || '.'} (${gitCommit()}); clients split over the processes named; hold 0. ` +
        `Load average (1 min) at the start ${loadavg()[0].toFixed(2)} on ${cpus().length} CPUs.\n`,
    );
    print(
      `| cell | contender | cycles counted | Redis instructions per cycle | the same before taking out idle Redis | × bare list |`,
    );
    print('|---|---|---|---|---|---|');
    const only = process.argv.includes('--only') ? option('only', '').split(',') : null;
    const lib = {};
    for (const cell of CELLS) {
      if (only && !only.includes(cell.id)) continue;
      const perCycle = {};
      for (const contender of cell.clients === 1 ? ['bare', 'evalsha', 'lib'] : ['bare', 'lib']) {
        const base = {
          url,
          dist,
          contender,
          clients: cell.clients,
          permits: cell.permits,
          key: `ir-${cell.id}-${contender}-${Date.now()}`,
        };
        await runLoop({ ...base, seconds: 1 }, cell.procs); // warm-up: scripts loaded, code paths warm
        const window = {};
        const cycles = await runLoop({ ...base, key: `${base.key}-m`, seconds }, cell.procs, {
          async before() {
            window.idlePerMs = await idleRate(server, dir);
            window.start = zeroed(server);
          },
          after() {
            dumpCounters(server);
            window.ms = performance.now() - window.start;
          },
        });
        await sleep(500);
        const total = lastDumpTotal(dir);
        const raw = total / cycles;
        perCycle[contender] = (total - window.idlePerMs * window.ms) / cycles;
        const name = NAMES[contender];
        const ratio = `${(perCycle[contender] / perCycle.bare).toFixed(1)}×`;
        const shape = `${cell.clients} client${cell.clients > 1 ? 's' : ''}${cell.procs > 1 ? ` in ${cell.procs} processes` : ''}, ${cell.permits} permit${cell.permits > 1 ? 's' : ''}`;
        const n = (x) => Math.round(x).toLocaleString('en-US');
        print(`| ${cell.id} (${shape}) | ${name} | ${cycles} | ${n(perCycle[contender])} | ${n(raw)} | ${ratio} |`);
      }
      if (perCycle.lib) lib[cell.id] = perCycle.lib;
    }
    print(
      `\nCounters are zeroed after every worker process has connected (and the semaphore exists) and dumped before any closes. ` +
        `What an idle Redis executes meanwhile (its timers: serverCron, clientsCron), counted over ${IDLE_MS} ms with the same ` +
        `connections open right before, is taken out in proportion to the window: on a loaded machine fewer cycles share it.`,
    );
    for (const [id, target] of Object.entries(TARGETS)) {
      if (lib[id] === undefined) continue;
      const k = (x) => `${(x / 1000).toFixed(1)}k`;
      print(
        `\nTarget (issue 31): Redis instructions per ${id} cycle ≤ ${k(target)}: ${k(lib[id])}: ${lib[id] <= target ? '✓ met' : '✗ missed'}.`,
      );
    }
    if (process.argv.includes('--save')) {
      const out = path.join(__dirname, 'results', `${resultsName('instructions')}.md`);
      writeFileSync(out, `${lines.join('\n')}\n`);
      console.error(`wrote ${out}`);
    }
  } finally {
    await server.kill('SIGKILL');
    await server.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
