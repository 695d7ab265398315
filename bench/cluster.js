#!/usr/bin/env node
'use strict';
// Owns the cluster benchmark: one semaphore workload over a standalone server and clusters of 1, 2 and 3 masters.
/*
 * npm run bench:cluster [-- --semaphores 1000 --workers 4 --concurrency 16 --duration 5000 --masters 1,2,3 --reps 1 --client redis]
 *
 * 1,000 semaphores (resources 1) spread over a Redis Cluster of 1, 2 and 3 masters, and over one
 * standalone redis-server, all started here on free loopback ports. Worker processes each run
 * `concurrency` loops of lock(random semaphore) → unlock for `duration` ms; the figure is aggregate
 * lock + unlock cycles per second. See docs/SCALING.md for what it shows and how far it extrapolates.
 */
const { fork, spawn, execFileSync } = require('node:child_process');
const os = require('node:os');
const path = require('node:path');
const { startRedisServer } = require('../tools/redis-server');

function arg(name, fallback) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 ? process.argv[i + 1] : fallback;
}

const settings = {
  semaphores: Number(arg('semaphores', 1000)),
  workers: Number(arg('workers', 4)),
  concurrency: Number(arg('concurrency', 16)),
  durationMs: Number(arg('duration', 5000)),
  masters: String(arg('masters', '1,2,3')).split(',').map(Number),
  reps: Number(arg('reps', 1)),
  /** The node-redis package: redis (v4), redis5 or redis6. */
  client: String(arg('client', 'redis')),
};

if (process.env.BENCH_CLUSTER_WORKER) worker(JSON.parse(process.env.BENCH_CLUSTER_WORKER));
else
  main().catch((error) => {
    console.error(error);
    process.exitCode = 1;
  });

/** One worker process: `concurrency` loops of lock → unlock on random semaphores until the deadline. */
async function worker({ topology, urls, semaphores, concurrency, durationMs, seed, client: pkg }) {
  redirectRedis(pkg);
  const { createClient, createCluster } = require('redis');
  const { Semaphore } = require(path.join(__dirname, '..', 'dist'));
  const client =
    topology === 'standalone'
      ? createClient({ url: urls[0] })
      : createCluster({ rootNodes: urls.map((url) => ({ url })) });
  client.on('error', () => undefined);
  await client.connect();
  const sems = Array.from(
    { length: semaphores },
    (_, i) => new Semaphore(`bench:${i}`, { redis: client, maxBlockingConnections: 2 }),
  );
  let state = seed;
  const random = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  process.send({ ready: true });
  await new Promise((resolve) => process.once('message', resolve));
  const deadline = Date.now() + durationMs;
  const cpu = process.cpuUsage();
  let cycles = 0;
  let misses = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < deadline) {
        const sem = sems[Math.floor(random() * sems.length)];
        const token = await sem.lock(0);
        if (token === null) {
          misses++;
          continue;
        }
        await sem.unlock(token);
        cycles++;
      }
    }),
  );
  const used = process.cpuUsage(cpu);
  process.send({ cycles, misses, cpuUs: used.user + used.system });
  await Promise.all(sems.map((sem) => sem.close()));
  await (client.close ?? client.quit).call(client);
  process.exit(0);
}

async function main() {
  const results = [];
  for (let rep = 0; rep < settings.reps; rep++) {
    for (const topology of ['standalone', ...settings.masters.map((n) => `cluster-${n}`)]) {
      const nodes =
        topology === 'standalone' ? [await startNode(false)] : await startCluster(Number(topology.split('-')[1]));
      try {
        const urls = nodes.map((node) => node.url);
        const started = Date.now();
        const workers = Array.from({ length: settings.workers }, (_, i) =>
          fork(__filename, [], {
            env: {
              ...process.env,
              BENCH_CLUSTER_WORKER: JSON.stringify({ ...settings, topology, urls, seed: 7919 * (i + 1) + rep }),
            },
          }),
        );
        const messages = (child) => {
          const queue = [];
          let waiting;
          child.on('message', (message) => (waiting ? (waiting(message), (waiting = undefined)) : queue.push(message)));
          return () => (queue.length ? Promise.resolve(queue.shift()) : new Promise((resolve) => (waiting = resolve)));
        };
        const next = workers.map(messages);
        await Promise.all(next.map((read) => read()));
        const cpuBefore = await Promise.all(nodes.map((node) => cpuSeconds(node.port)));
        for (const child of workers) child.send('go');
        const replies = await Promise.all(next.map((read) => read()));
        const cpuAfter = await Promise.all(nodes.map((node) => cpuSeconds(node.port)));
        await Promise.all(
          workers.map(
            (child) => new Promise((resolve) => (child.exitCode !== null ? resolve() : child.once('exit', resolve))),
          ),
        );
        const cycles = replies.reduce((sum, reply) => sum + reply.cycles, 0);
        const misses = replies.reduce((sum, reply) => sum + reply.misses, 0);
        const perNode = await Promise.all(nodes.map((node) => commandCalls(node.port)));
        // Redis CPU (user + sys, every node) per lock + unlock cycle: what one master can serve at most.
        const redisCpuUs = cpuAfter.reduce((sum, after, i) => sum + after - cpuBefore[i], 0) * 1e6;
        const clientCpuUs = replies.reduce((sum, reply) => sum + reply.cpuUs, 0);
        const row = {
          rep,
          topology,
          cyclesPerSecond: Math.round(cycles / (settings.durationMs / 1000)),
          misses,
          perNodeEvalsha: perNode,
          redisCpuUsPerCycle: Number((redisCpuUs / Math.max(1, cycles)).toFixed(1)),
          clientCpuUsPerCycle: Number((clientCpuUs / Math.max(1, cycles)).toFixed(1)),
          wallMs: Date.now() - started,
        };
        results.push(row);
        console.log(JSON.stringify(row));
      } finally {
        await Promise.all(nodes.map((node) => node.kill('SIGKILL').then(() => node.stop())));
      }
    }
  }
  const base = results.find((row) => row.topology === 'standalone')?.cyclesPerSecond ?? 1;
  const lines = [
    `| topology | cycles/s | vs one node | Redis CPU µs per cycle | client CPU µs per cycle | script calls per node (EVALSHA + EVAL) |`,
    `|---|---|---|---|---|---|`,
    ...results.map(
      (row) =>
        `| ${row.topology} | ${row.cyclesPerSecond} | ${(row.cyclesPerSecond / base).toFixed(2)}× | ${row.redisCpuUsPerCycle} | ${row.clientCpuUsPerCycle} | ${row.perNodeEvalsha.join(' / ')} |`,
    ),
  ];
  console.log(
    `\n${os.cpus().length} CPUs, ${settings.workers} worker processes × ${settings.concurrency} loops, ${settings.semaphores} semaphores, ${settings.durationMs} ms per cell, redis ${execFileSync('redis-server', ['--version']).toString().split(' ')[2]}, node-redis ${require(`${settings.client}/package.json`).version}\n`,
  );
  console.log(lines.join('\n'));
}

/** Makes `require('redis')` load `pkg` (redis5, redis6) in this process. */
function redirectRedis(pkg) {
  if (!pkg || pkg === 'redis') return;
  const Module = require('node:module');
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, ...rest) {
    return resolve.call(this, request === 'redis' ? pkg : request, ...rest);
  };
}

/** used_cpu_user + used_cpu_sys of a node, in seconds. */
async function cpuSeconds(port) {
  const info = await cli(port, 'INFO', 'cpu');
  const field = (name) => Number(new RegExp(`${name}:([\\d.]+)`).exec(info)?.[1] ?? 0);
  return field('used_cpu_user') + field('used_cpu_sys');
}

/** One redis-server (a cluster node when `cluster`); killed if this process exits first. */
function startNode(cluster) {
  const args = ['--maxclients', '10000'];
  if (cluster) args.push('--cluster-enabled', 'yes', '--cluster-node-timeout', '5000');
  return startRedisServer(args, { stopOnExit: true });
}

/** `masters` cluster nodes, slots split evenly, met by CLUSTER MEET (works for 1 and 2 masters too). */
async function startCluster(masters) {
  const nodes = [];
  for (let i = 0; i < masters; i++) nodes.push(await startNode(true));
  const per = Math.ceil(16384 / masters);
  for (let i = 0; i < masters; i++) {
    await cli(nodes[i].port, 'CLUSTER', 'ADDSLOTSRANGE', String(i * per), String(Math.min(16383, (i + 1) * per - 1)));
    if (i > 0) await cli(nodes[i].port, 'CLUSTER', 'MEET', '127.0.0.1', String(nodes[0].port));
  }
  for (let i = 0; i < 400; i++) {
    const views = await Promise.all(nodes.map((node) => cli(node.port, 'CLUSTER', 'INFO')));
    if (views.every((info) => info.includes('cluster_state:ok') && info.includes(`cluster_known_nodes:${masters}`)))
      return nodes;
    await sleep(50);
  }
  throw new Error('cluster did not come up');
}

async function commandCalls(port) {
  const stats = await cli(port, 'INFO', 'commandstats');
  const calls = (command) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
  return calls('evalsha') + calls('eval');
}

function cli(port, ...args) {
  return new Promise((resolve, reject) => {
    const child = spawn('redis-cli', ['-h', '127.0.0.1', '-p', String(port), ...args]);
    let out = '';
    child.stdout.on('data', (chunk) => (out += chunk));
    child.on('error', reject);
    child.on('exit', (code) => (code === 0 ? resolve(out) : reject(new Error(`redis-cli exited ${code}`))));
  });
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
