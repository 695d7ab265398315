#!/usr/bin/env node
'use strict';
/*
 * npm run bench:limits [-- --save --reps N --cycles N --warmup N --no-pin --out DIR]
 *
 * Large semaphores and many holders, against a private redis-server (started here on a free
 * loopback port; redis-server on CPU 0 and this process on CPU 1 when taskset is there): creation
 * and re-creation of 100,000 and 1,000,000 tokens against a PING loop, and lock latency with 0 to
 * 10,000 other tokens held. Prints Markdown; --save also writes bench/results/<date>-limits.md.
 * See bench/README.md and bench/scenarios/limits.js.
 */
const fs = require('node:fs');
const os = require('node:os');
const server = require('./lib/server');
const { gitCommit, localDate } = require('./lib/provenance');
const { finish, privateDist, runMain } = require('./lib/report');
const limits = require('./scenarios/limits');

/** The whole run is killed (redis-server first) if it takes longer than this. */
const RUN_DEADLINE_MS = 5 * 60_000;

function parseArgs(argv) {
  const args = { save: false, pin: true, reps: 3, cycles: 2000, warmup: 200 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new TypeError(`Expected a value after ${a}`);
      return v;
    };
    if (a === '--save') args.save = true;
    else if (a === '--no-pin') args.pin = false;
    else if (a === '--reps') args.reps = Number(value());
    else if (a === '--cycles') args.cycles = Number(value());
    else if (a === '--warmup') args.warmup = Number(value());
    else if (a === '--out') args.out = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(`${fs.readFileSync(__filename, 'utf8').split('*/')[0]}*/\n`);
      process.exit(0);
    } else throw new TypeError(`Unknown option ${a}`);
  }
  if (!Number.isInteger(args.reps) || args.reps < 1 || args.reps > 20)
    throw new TypeError('--reps: expected an integer 1–20');
  for (const key of ['cycles', 'warmup']) {
    if (!Number.isInteger(args[key]) || args[key] < 0 || args[key] > 1_000_000)
      throw new TypeError(`--${key}: expected an integer 0–1,000,000`);
  }
  return args;
}

/** What main() started, for the error path. */
const started = { redis: null };

async function main() {
  const startedAt = Date.now();
  const args = parseArgs(process.argv.slice(2));
  const log = (line) => process.stderr.write(`${line}\n`);

  const distCopy = privateDist('bench:limits');

  const canPin = args.pin && server.hasTaskset() && os.cpus().length >= 2;
  const redis = await server.startServer({ pin: canPin });
  started.redis = redis;
  const pinning = canPin
    ? `pinned: redis-server on CPU ${server.SERVER_CPU}, this process on CPU ${server.CLIENT_CPU} (taskset)`
    : `NOT pinned (${args.pin ? 'taskset unavailable or fewer than 2 CPUs' : '--no-pin'}): figures include scheduler noise`;
  if (canPin) server.pinSelf();

  let stopping = false;
  const abort = (why, code) => {
    if (stopping) return;
    stopping = true;
    log(`\n${why}: stopping redis-server (pid ${redis.pid})`);
    redis.stop().finally(() => process.exit(code));
  };
  for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => abort(signal, 130));
  setTimeout(() => {
    log(`\nrun deadline (${RUN_DEADLINE_MS / 1000} s) passed: killing redis-server (pid ${redis.pid})`);
    redis.killNow();
    process.exit(1);
  }, RUN_DEADLINE_MS).unref();

  const monitor = await server.monitor(redis.url);
  const pkg = require('../package.json');
  const date = localDate();
  const loadAtStart = os.loadavg()[0];
  const header = [
    `# redis-token-semaphore limits, ${date}`,
    '',
    `- Redis ${await monitor.version()} (started by the benchmark: --save "" --appendonly no, loopback), Node ${process.version}, CPU ${server.cpuModel()} × ${os.cpus().length}`,
    `- ${pinning}`,
    `- ${pkg.name} ${pkg.version} (${gitCommit()}), node-redis ${require('redis/package.json').version} (the library's own clients and the PING client)`,
    `- Command: \`npm run bench:limits${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}\``,
    '',
  ].join('\n');
  process.stdout.write(`${header}\n`);

  let result;
  try {
    log('limits…');
    result = await limits.run({
      url: redis.url,
      monitor,
      dist: distCopy,
      log,
      reps: args.reps,
      lockCycles: { warmup: args.warmup, cycles: args.cycles },
    });
    process.stdout.write(`${result.markdown}\n`);
  } finally {
    await monitor.close();
    await redis.stop();
  }

  finish({ name: 'limits', date, header, result, startedAt, loadAtStart, args, log });
}

runMain(main, started);
