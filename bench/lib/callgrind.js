'use strict';
// What the instruction benchmarks (instructions.js, scripts.js) share: a redis-server under callgrind, its counters zeroed and dumped around the measured work, and a dump's total.
const { execFileSync } = require('node:child_process');
const { mkdtempSync, readdirSync, readFileSync, statSync } = require('node:fs');
const { tmpdir } = require('node:os');
const path = require('node:path');
const { startRedisServer } = require('../../tools/redis-server');

function hasCommand(command, args) {
  try {
    execFileSync(command, args, { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Whether valgrind and callgrind_control are installed. */
function hasCallgrind() {
  return hasCommand('valgrind', ['--version']) && hasCommand('callgrind_control', ['--help']);
}

/**
 * A redis-server under `valgrind --tool=callgrind`, dumping into a fresh temporary directory:
 * `{ server, dir }`. Under valgrind it starts slowly; `stopOnExit` kills it however the process ends.
 */
async function startUnderCallgrind(args = []) {
  const dir = mkdtempSync(path.join(tmpdir(), 'rts-callgrind-'));
  const server = await startRedisServer(args, {
    wrapper: ['valgrind', '--tool=callgrind', `--callgrind-out-file=${dir}/cg.%p`],
    readyTimeoutMs: 60_000,
    stopOnExit: true,
  });
  return { server, dir };
}

/** Zeroes the server's counters (the measured window starts). */
function zeroCounters(server) {
  execFileSync('callgrind_control', ['-z', String(server.pid)], { stdio: 'ignore' });
}

/** Dumps the server's counters (the measured window ends): read them with `lastDumpTotal`. */
function dumpCounters(server) {
  execFileSync('callgrind_control', ['-d', String(server.pid)], { stdio: 'ignore' });
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

/** The newest dump's inclusive instructions of each of `functions` (by symbol name; 0 when absent), via callgrind_annotate. */
function lastDumpInclusive(dir, functions) {
  const [newest] = readdirSync(dir)
    .map((file) => path.join(dir, file))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs);
  const text = execFileSync('callgrind_annotate', ['--inclusive=yes', '--threshold=100', newest], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  });
  const counts = {};
  for (const name of functions) {
    const line = text.split('\n').find((l) => new RegExp(`[?:]${name} \\[`).test(l));
    counts[name] = line ? Number(line.trim().split(/\s+/)[0].replaceAll(',', '')) : 0;
  }
  return counts;
}

module.exports = { hasCallgrind, startUnderCallgrind, zeroCounters, dumpCounters, lastDumpTotal, lastDumpInclusive };
