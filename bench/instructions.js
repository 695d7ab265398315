'use strict';
// Owns the instruction-count benchmark: Redis instructions per lock + unlock cycle, counted by callgrind.
//
// Deterministic where wall-clock
// figures on a shared VM are not, so a protocol change can be judged by one run. Runs this library
// and the bare BLPOP/LPUSH list, one after the other, against one redis-server under
// `valgrind --tool=callgrind`; only the measured window is counted (callgrind_control -z / -d).
//
//   npm run bench:instructions                      # this build (dist/)
//   node bench/instructions.js --dist /other/dist   # another build, to compare
//   node bench/instructions.js --seconds 4          # measured window per cell (default 4 s)
const { execFileSync, fork } = require('node:child_process');
const { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } = require('node:fs');
const { tmpdir } = require('node:os');
const path = require('node:path');
const { sleep } = require('./lib/server');
const { startRedisServer } = require('../tools/redis-server');

const NAMES = {
  bare: 'bare BLPOP/LPUSH list',
  evalsha: 'floor: 2× EVALSHA `return 1`',
  lib: 'redis-token-semaphore',
};

const CELLS = [
  { id: 'uncontended', clients: 1, permits: 1 },
  { id: 'mutex-8', clients: 8, permits: 1 },
  { id: 'sem4-32', clients: 32, permits: 4 },
];

function option(name, fallback) {
  const at = process.argv.indexOf(`--${name}`);
  return at >= 0 && process.argv[at + 1] !== undefined ? process.argv[at + 1] : fallback;
}

function hasCommand(command, args) {
  try {
    execFileSync(command, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Runs one worker (bench/lib/instructions-worker.js) to its end: resolves { cycles }. */
function runWorker(config) {
  return new Promise((resolve, reject) => {
    const child = fork(path.join(__dirname, 'lib', 'instructions-worker.js'), [JSON.stringify(config)], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const timer = setTimeout(() => child.kill('SIGKILL'), (config.seconds + 60) * 1000);
    child.on('message', (message) => resolve(message));
    child.on('exit', (code) => {
      clearTimeout(timer);
      if (code !== 0) reject(new Error(`worker exited with ${code}`));
    });
  });
}

/** The instruction total of callgrind's newest dump in `dir`. */
function lastDumpTotal(dir) {
  const [newest] = readdirSync(dir)
    .map((file) => path.join(dir, file))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const match = /^(?:summary|totals): (\d+)/m.exec(readFileSync(newest, 'utf8'));
  if (!match) throw new Error(`no totals in ${newest}`);
  return Number(match[1]);
}

async function main() {
  if (!hasCommand('valgrind', ['--version']) || !hasCommand('callgrind_control', ['--help'])) {
    console.error('bench/instructions.js needs valgrind (apt-get install valgrind)');
    process.exit(2);
  }
  const dist = path.resolve(option('dist', path.join(__dirname, '..', 'dist')));
  const seconds = Number(option('seconds', '4'));
  const dir = mkdtempSync(path.join(tmpdir(), 'rts-callgrind-'));
  // Under valgrind it starts slowly; `stopOnExit` kills it however this process ends (Ctrl-C too).
  const server = await startRedisServer([], {
    wrapper: ['valgrind', '--tool=callgrind', `--callgrind-out-file=${dir}/cg.%p`],
    readyTimeoutMs: 60_000,
    stopOnExit: true,
  });
  process.on('SIGINT', () => process.exit(130));
  const { url } = server;
  try {
    console.log(`Redis instructions per lock + unlock cycle (callgrind), ${seconds} s per cell, library from ${path.relative(process.cwd(), dist) || '.'}\n`);
    console.log('| cell | contender | cycles counted | Redis instructions per cycle | × bare list |');
    console.log('|---|---|---|---|---|');
    for (const cell of CELLS) {
      if (process.argv.includes('--only') && !option('only', '').split(',').includes(cell.id)) continue;
      const perCycle = {};
      for (const contender of cell.clients === 1 ? ['bare', 'evalsha', 'lib'] : ['bare', 'lib']) {
        const base = { url, dist, contender, clients: cell.clients, permits: cell.permits, key: `ir-${cell.id}-${contender}-${Date.now()}` };
        await runWorker({ ...base, seconds: 1 }); // warm-up: scripts loaded, connections made
        execFileSync('callgrind_control', ['-z', String(server.pid)], { stdio: 'ignore' });
        const { cycles } = await runWorker({ ...base, key: `${base.key}-m`, seconds });
        execFileSync('callgrind_control', ['-d', String(server.pid)], { stdio: 'ignore' });
        await sleep(500);
        perCycle[contender] = lastDumpTotal(dir) / cycles;
        const name = NAMES[contender];
        const ratio = `${(perCycle[contender] / perCycle.bare).toFixed(1)}×`;
        console.log(`| ${cell.id} (${cell.clients} client${cell.clients > 1 ? 's' : ''}, ${cell.permits} permit${cell.permits > 1 ? 's' : ''}) | ${name} | ${cycles} | ${Math.round(perCycle[contender]).toLocaleString('en-US')} | ${ratio} |`);
      }
    }
    console.log('\nThe window includes connection and worker start-up for neither contender (counters are zeroed after a warm-up run).');
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
