#!/usr/bin/env node
'use strict';
/*
 * npm run bench [-- --quick] [-- --colocated] [-- --reps N --duration MS --warmup MS --only uncontended,mutex-8x1,weighted --no-pin --no-sweep --note TEXT]
 *
 * Runs this library, its peers and the floors against one redis-server (started here on a free
 * loopback port, pinned to CPU 0, with client processes pinned to CPU 1; or REDIS_URL), and writes
 * bench/results/<date>-cross-cpu.md, .json and .svg. With --colocated, redis-server and every client
 * process share one vCPU (CPU 1), so throughput = 1 / (Redis + client CPU per cycle), and the tables
 * show that CPU per cycle (bench/results/<date>-colocated.md). See bench/README.md.
 */
const fs = require('node:fs');
const path = require('node:path');
const server = require('./lib/server');
const { gitCommit, localDate, resultsName } = require('./lib/provenance');
const { killWorkers, closeWorkers } = require('./lib/cell');
const { check } = require('./lib/targets');
const { chart } = require('./lib/chart');

const SCENARIOS = {
  uncontended: require('./scenarios/uncontended'),
  contended: require('./scenarios/contended'),
  weighted: require('./scenarios/weighted'),
  waiters: require('./scenarios/waiters'),
  idle: require('./scenarios/idle'),
  sweep: require('./scenarios/sweep'),
};

function parseArgs(argv) {
  const args = { quick: false, pin: true, sweep: true, colocated: false };
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
    else if (a === '--colocated') args.colocated = true;
    else if (a === '--cpu') args.cpu = Number(value());
    else if (a === '--save')
      args.save = true; // results are always saved; accepted for symmetry with bench:limits
    else if (a === '--verbose') args.verbose = true;
    else if (a === '--reps') args.reps = Number(value());
    else if (a === '--duration') args.durationMs = Number(value());
    else if (a === '--warmup') args.warmMs = Number(value());
    else if (a === '--only') args.only = value().split(',');
    else if (a === '--out') args.out = value();
    else if (a === '--note') args.note = value();
    else if (a === '--help' || a === '-h') {
      process.stdout.write(fs.readFileSync(path.join(__dirname, 'README.md'), 'utf8'));
      process.exit(0);
    } else throw new TypeError(`Unknown option ${a}`);
  }
  return args;
}

/** A command-line argument as a shell would need it. */
const quoted = (arg) => (/^[\w.,=/-]+$/.test(arg) ? arg : `'${arg.replace(/'/g, "'\\''")}'`);

function settings(args) {
  const quick = args.quick;
  return {
    quick,
    reps: args.reps ?? (quick ? 1 : 5),
    warmMs: args.warmMs ?? (quick ? 50 : 250),
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
  if (!fs.existsSync(path.join(dist, 'index.js')))
    throw new Error('No dist/: run `npm run build` first (`npm run bench` does)');
  fs.cpSync(dist, distCopy, { recursive: true });
  process.env.BENCH_DIST = distCopy;
  const removeDistCopy = () => fs.rmSync(distCopy, { recursive: true, force: true });
  process.on('exit', removeDistCopy);

  let redis = null;
  let url = process.env.REDIS_URL;
  let pinning;
  const cpus = require('node:os').cpus().length;
  const colocated = args.colocated;
  // Co-located: redis-server and every client on one vCPU (CPU 1 unless --cpu), so a cycle's cost is
  // Redis CPU + client CPU, with no idle waiting for the other CPU and no cross-CPU wake-ups.
  const clientCpu = colocated ? (args.cpu ?? server.CLIENT_CPU) : server.CLIENT_CPU;
  const serverCpu = colocated ? clientCpu : server.SERVER_CPU;
  if (clientCpu >= cpus)
    throw new RangeError(`Expected --cpu to be a CPU of this machine (0 to ${cpus - 1}), got ${clientCpu}`);
  const canPin = args.pin && server.hasTaskset() && cpus >= (colocated ? 1 : 2);
  if (colocated && !canPin) throw new Error(`--colocated needs taskset (and not --no-pin)`);
  if (colocated && process.env.REDIS_URL) throw new Error('--colocated starts its own redis-server: unset REDIS_URL');
  if (url) {
    pinning = 'not pinned (REDIS_URL given: the server is not ours to pin)';
  } else {
    redis = await server.startServer({ pin: canPin, cpu: serverCpu });
    url = redis.url;
    pinning = colocated
      ? `co-located: redis-server and every client process (and the runner) on CPU ${clientCpu} (taskset); throughput = 1 / (Redis + client CPU per cycle)`
      : canPin
        ? `pinned: redis-server on CPU ${serverCpu}, every client process on CPU ${clientCpu} (taskset)`
        : `NOT pinned (${args.pin ? 'taskset unavailable or fewer than 2 CPUs' : '--no-pin'}): figures include scheduler noise`;
  }
  if (!process.env.REDIS_URL && canPin) server.pinSelf(clientCpu);
  const mode = colocated ? 'colocated' : canPin && !process.env.REDIS_URL ? 'cross-cpu' : 'unpinned';

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
    colocated,
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

  // Taken at the start: the results are named by the commit that ran, whatever HEAD is at the end.
  const commit = gitCommit();
  const pkg = require('../package.json');
  const dev = pkg.devDependencies ?? {};
  const versions = {
    redis: await monitor.version(),
    node: process.version,
    cpu: server.cpuModel(),
    cpus: require('node:os').cpus().length,
    library: `${pkg.name} ${pkg.version} (${commit})`,
    peers: `redis-semaphore ${dev['redis-semaphore']}, redlock ${dev.redlock}, ioredis ${dev.ioredis}, node-redis ${require('redis/package.json').version}`,
  };
  const date = localDate();
  const loadAtStart = require('node:os').loadavg()[0];
  const header = [
    `# redis-token-semaphore benchmark, ${date}, ${colocated ? 'co-located (one vCPU)' : mode === 'cross-cpu' ? 'cross-CPU' : 'unpinned'}${cfg.quick ? ' (quick)' : ''}`,
    '',
    `- Redis ${versions.redis} (${redis ? 'started by the benchmark: --save "" --appendonly no, loopback' : 'REDIS_URL'}), Node ${versions.node}, CPU ${versions.cpu} × ${versions.cpus}`,
    `- ${pinning}`,
    `- ${versions.library}; peers: ${versions.peers}`,
    `- ${cfg.reps} repetition(s) per cell, interleaved; each cell: fresh worker processes, ${cfg.warmMs} ms warm-up then ${cfg.durationMs} ms measured; medians, (min–max) across repetitions`,
    `- Ratios (× floor, × bare list, × redis-semaphore, CPU × bare) are paired: the median (min–max) over repetitions of repetition i of a contender against repetition i of the reference, which ran right next to it`,
    `- Command: \`npm run bench${process.argv.length > 2 ? ` -- ${process.argv.slice(2).map(quoted).join(' ')}` : ''}\``,
    `- Load average (1 min) at start ${loadAtStart.toFixed(2)} on ${versions.cpus} CPUs${args.note ? `; ${args.note}` : ''}`,
    '',
  ].join('\n');
  process.stdout.write(`${header}\n`);

  const results = {};
  // Co-located runs measure CPU per cycle: the loop cells only (waiters, idle and the sweep when --only names them).
  const order =
    colocated && !args.only
      ? ['uncontended', 'contended']
      : ['uncontended', 'contended', 'weighted', 'waiters', 'idle', ...(args.sweep && !colocated ? ['sweep'] : [])];
  try {
    for (const id of order) {
      const wanted =
        !args.only ||
        id === 'uncontended' ||
        args.only.some((o) => id.startsWith(o) || (id === 'contended' && /^(mutex|sem)/.test(o)));
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

  const targets = check(results, { colocated });
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
  const base = path.join(outDir, resultsName(`${mode}${cfg.quick ? '-quick' : ''}`, commit));
  const sections = order.filter((id) => results[id]).map((id) => results[id].markdown);
  const svgName = `${path.basename(base)}.svg`;
  const chartLine = results.sweep ? `![cycles/s and p99 wait against client count](${svgName})\n` : '';
  fs.writeFileSync(`${base}.md`, [header, targets, ...sections, chartLine, footer].join('\n'));
  fs.writeFileSync(
    `${base}.json`,
    JSON.stringify(
      {
        date,
        mode,
        settings: cfg,
        versions,
        pinning,
        floors: ctx.floors,
        failures,
        runSeconds: Number(seconds),
        results: Object.fromEntries(Object.entries(results).map(([k, v]) => [k, v.data ?? v])),
      },
      null,
      1,
    ),
  );
  if (results.sweep) {
    fs.writeFileSync(
      `${base}.svg`,
      chart(
        results.sweep.data,
        `Mutex, hold 0, one process — Redis ${versions.redis}, ${pinning.startsWith('pinned') ? 'pinned' : 'unpinned'}, ${date}`,
      ),
    );
  }
  log(`wrote ${base}.md, .json${results.sweep ? ', .svg' : ''} in ${seconds} s`);
  process.exitCode = failures.length ? 1 : 0;
}

main().catch((error) => {
  process.stderr.write(`${error.stack ?? error}\n`);
  killWorkers();
  process.exit(1);
});
