#!/usr/bin/env node
'use strict';
/*
 * npm run bench [-- --quick] [-- --reps N --duration MS --only uncontended,mutex-8x1 --no-pin --no-sweep]
 *
 * Runs this library, its peers and the floors against one redis-server (started here on a free
 * loopback port, pinned to CPU 0, with client processes pinned to CPU 1; or REDIS_URL), and writes
 * bench/results/<date>.md, .json and .svg. See bench/README.md.
 */
const fs = require('node:fs');
const path = require('node:path');
const server = require('./lib/server');
const { gitCommit, localDate } = require('./lib/provenance');
const { killWorkers, closeWorkers } = require('./lib/cell');
const { check } = require('./lib/targets');
const { chart } = require('./lib/chart');

const SCENARIOS = {
  uncontended: require('./scenarios/uncontended'),
  contended: require('./scenarios/contended'),
  waiters: require('./scenarios/waiters'),
  idle: require('./scenarios/idle'),
  sweep: require('./scenarios/sweep'),
};

function parseArgs(argv) {
  const args = { quick: false, pin: true, sweep: true };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new TypeError(`Expected a value after ${a}`);
      return v;
    };
    if (a === '--quick') args.quick = true;
    else if (a === '--no-pin') args.pin = false;
    else if (a === '--no-sweep') args.sweep = false;
    else if (a === '--verbose') args.verbose = true;
    else if (a === '--reps') args.reps = Number(value());
    else if (a === '--duration') args.durationMs = Number(value());
    else if (a === '--only') args.only = value().split(',');
    else if (a === '--out') args.out = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(fs.readFileSync(path.join(__dirname, 'README.md'), 'utf8'));
      process.exit(0);
    } else throw new TypeError(`Unknown option ${a}`);
  }
  return args;
}

function settings(args) {
  const quick = args.quick;
  return {
    quick,
    reps: args.reps ?? (quick ? 1 : 5),
    warmMs: quick ? 50 : 250,
    durationMs: args.durationMs ?? (quick ? 200 : 1000),
    drainMs: 20000,
    idleMs: quick ? 250 : 1000,
    sweepClients: quick ? [1, 64] : [1, 2, 4, 8, 16, 32, 64, 128, 256],
    sweepWarmMs: quick ? 50 : 200,
    sweepDurationMs: quick ? 150 : 600,
  };
}

async function main() {
  const started = Date.now();
  const args = parseArgs(process.argv.slice(2));
  const cfg = settings(args);
  const log = (line) => process.stderr.write(`${line}\n`);

  // Workers load the library from a private copy of dist/, so a rebuild in the same tree while the
  // benchmark runs (another `npm run build` or `npm test`) cannot pull it from under them.
  const distCopy = path.join(__dirname, `.dist-${process.pid}`);
  const dist = path.join(__dirname, '..', 'dist');
  if (!fs.existsSync(path.join(dist, 'index.js'))) throw new Error('No dist/: run `npm run build` first (`npm run bench` does)');
  fs.cpSync(dist, distCopy, { recursive: true });
  process.env.BENCH_DIST = distCopy;
  const removeDistCopy = () => fs.rmSync(distCopy, { recursive: true, force: true });
  process.on('exit', removeDistCopy);

  let redis = null;
  let url = process.env.REDIS_URL;
  let pinning;
  const canPin = args.pin && server.hasTaskset() && require('node:os').cpus().length >= 2;
  if (url) {
    pinning = 'not pinned (REDIS_URL given: the server is not ours to pin)';
  } else {
    redis = await server.startServer({ pin: canPin });
    url = redis.url;
    pinning = canPin
      ? `pinned: redis-server on CPU ${server.SERVER_CPU}, every client process on CPU ${server.CLIENT_CPU} (taskset)`
      : `NOT pinned (${args.pin ? 'taskset unavailable or fewer than 2 CPUs' : '--no-pin'}): figures include scheduler noise`;
  }
  if (!process.env.REDIS_URL && canPin) server.pinSelf();

  const cleanup = async () => {
    killWorkers();
    if (redis) await redis.stop();
  };
  let stopping = false;
  for (const signal of ['SIGINT', 'SIGTERM']) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      log(`\n${signal}: stopping workers and redis-server`);
      cleanup().finally(() => process.exit(130));
    });
  }

  const monitor = await server.monitor(url);
  const failures = [];
  const ctx = {
    ...cfg,
    url,
    monitor,
    only: args.only,
    log,
    floors: {},
    async guard(label, fn) {
      const t0 = performance.now();
      try {
        const result = await fn();
        if (args.verbose) log(`    ${label}: ${(performance.now() - t0).toFixed(0)} ms`);
        return result;
      } catch (error) {
        failures.push(`${label}: ${error.message.split('\n')[0]}`);
        log(`  ! ${label} failed: ${error.message.split('\n')[0]}`);
        killWorkers();
        return null;
      }
    },
  };

  const pkg = require('../package.json');
  const dev = pkg.devDependencies ?? {};
  const versions = {
    redis: await monitor.version(),
    node: process.version,
    cpu: server.cpuModel(),
    cpus: require('node:os').cpus().length,
    library: `${pkg.name} ${pkg.version} (${gitCommit()})`,
    peers: `redis-semaphore ${dev['redis-semaphore']}, redlock ${dev.redlock}, ioredis ${dev.ioredis}, node-redis ${require('redis/package.json').version}`,
  };
  const date = localDate();
  const loadAtStart = require('node:os').loadavg()[0];
  const header = [
    `# redis-token-semaphore benchmark, ${date}${cfg.quick ? ' (quick)' : ''}`,
    '',
    `- Redis ${versions.redis} (${redis ? 'started by the benchmark: --save "" --appendonly no, loopback' : 'REDIS_URL'}), Node ${versions.node}, CPU ${versions.cpu} × ${versions.cpus}`,
    `- ${pinning}`,
    `- ${versions.library}; peers: ${versions.peers}`,
    `- ${cfg.reps} repetition(s) per cell, interleaved; each cell: fresh worker processes, ${cfg.warmMs} ms warm-up then ${cfg.durationMs} ms measured; medians, (min–max) across repetitions`,
    `- Command: \`npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).join(' ')}` : ''}\``,
    '',
  ].join('\n');
  process.stdout.write(`${header}\n`);

  const results = {};
  const order = ['uncontended', 'contended', 'waiters', 'idle', ...(args.sweep ? ['sweep'] : [])];
  try {
    for (const id of order) {
      const wanted = !args.only || id === 'uncontended' || args.only.some((o) => id.startsWith(o) || (id === 'contended' && /^(mutex|sem)/.test(o)));
      if (!wanted) continue;
      const t0 = Date.now();
      log(`${id}…`);
      results[id] = await SCENARIOS[id].run(ctx);
      if (id === 'uncontended') results.floors = ctx.floors;
      process.stdout.write(`${results[id].markdown}\n`);
      log(`${id} done in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    }
  } finally {
    await closeWorkers();
    await monitor.close();
    await cleanup();
  }

  const targets = check(results);
  process.stdout.write(`${targets}\n`);
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  const load = `Load average (1 min) at start ${loadAtStart.toFixed(2)}, at end ${require('node:os').loadavg()[0].toFixed(2)}: other work on the machine adds noise.`;
  const footer = [
    failures.length ? `## Failed cells\n\n${failures.map((x) => `- ${x}`).join('\n')}\n` : '',
    `Run time: ${seconds} s. ${load}`,
    '',
  ].join('\n');
  process.stdout.write(footer);

  const outDir = args.out ?? path.join(__dirname, 'results');
  fs.mkdirSync(outDir, { recursive: true });
  const base = path.join(outDir, `${date}${cfg.quick ? '-quick' : ''}`);
  const sections = order.filter((id) => results[id]).map((id) => results[id].markdown);
  const svgName = `${path.basename(base)}.svg`;
  const chartLine = results.sweep ? `![cycles/s and p99 wait against client count](${svgName})\n` : '';
  fs.writeFileSync(`${base}.md`, [header, targets, ...sections, chartLine, footer].join('\n'));
  fs.writeFileSync(
    `${base}.json`,
    JSON.stringify({ date, settings: cfg, versions, pinning, floors: ctx.floors, failures, runSeconds: Number(seconds), results: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.data ?? v])) }, null, 1),
  );
  if (results.sweep) {
    fs.writeFileSync(`${base}.svg`, chart(results.sweep.data, `Mutex, hold 0, one process — Redis ${versions.redis}, ${pinning.startsWith('pinned') ? 'pinned' : 'unpinned'}, ${date}`));
  }
  log(`wrote ${base}.md, .json${results.sweep ? ', .svg' : ''} in ${seconds} s`);
  process.exitCode = failures.length ? 1 : 0;
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  killWorkers();
  process.exit(1);
});
