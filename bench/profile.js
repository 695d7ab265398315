#!/usr/bin/env node
'use strict';
/*
 * node bench/profile.js [--seconds S] [--clients C] [--colocated] [--top N] [--dist /other/dist]
 *
 * Where the library's client spends its CPU in a contended cycle: a mutex, C callers (8) in this
 * process looping lock → unlock with hold 0 against one redis-server, sampled by V8's CPU profiler
 * (every 100 µs) over S seconds (6) after 2 s of warm-up. Prints the client CPU per cycle
 * (process.cpuUsage), then the busy samples by file and the N (30) functions with the most self
 * time. Redis and the client run on their own CPUs (as `npm run bench` does), or with --colocated
 * on one. Native frames (`writeUtf8String`, `writev`: the socket writes, system calls included) show
 * as the functions they are; `(program)` is V8 and the event loop outside JavaScript.
 */
const path = require('node:path');
const { Session } = require('node:inspector/promises');
const { createClient } = require('redis');
const { CLIENT_CPU, SERVER_CPU, hasTaskset, pinSelf, sleep, startServer } = require('./lib/server');
const { option, privateDist, runMain } = require('./lib/report');
const { gitCommit } = require('./lib/provenance');

const seconds = Number(option('seconds', '6'));
const clients = Number(option('clients', '8'));
const top = Number(option('top', '30'));
const colocated = process.argv.includes('--colocated');
const dist = option('dist', null) ?? privateDist('bench:profile');
/** What a crash must stop. */
const started = {};

/** A profile's script URL, short: `<package>/<path>` in node_modules, `dist/<file>` for the library, `(native)` for none. */
function fileOf(url) {
  if (url === '') return '(native)';
  if (url.includes('/node_modules/')) return url.replace(/^.*\/node_modules\//, '');
  return url.replace(/^.*\/\.?dist[^/]*\//, 'dist/');
}

/** Self-time samples of `profile` (a V8 CPU profile), by function and by file, without idle time. */
function selfTime(profile) {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const byFunction = new Map();
  const byFile = new Map();
  let busy = 0;
  for (const id of profile.samples) {
    const { functionName, url, lineNumber } = nodes.get(id).callFrame;
    if (functionName === '(idle)') continue;
    busy++;
    const file = fileOf(url);
    const name = `${functionName || '(anonymous)'} ${file}${url ? `:${lineNumber + 1}` : ''}`;
    byFunction.set(name, (byFunction.get(name) ?? 0) + 1);
    byFile.set(file, (byFile.get(file) ?? 0) + 1);
  }
  return { busy, byFunction, byFile };
}

function rows(counts, busy, limit) {
  return [...counts]
    .sort((a, b) => b[1] - a[1])
    .slice(0, limit)
    .map(([name, count]) => `| ${name.replaceAll('|', '\\|')} | ${((100 * count) / busy).toFixed(1)}% |`)
    .join('\n');
}

async function main() {
  const pin = hasTaskset();
  const server = await startServer({ pin, cpu: colocated ? CLIENT_CPU : SERVER_CPU });
  started.redis = server;
  if (pin) pinSelf(CLIENT_CPU);
  const redis = createClient({ url: server.url });
  redis.on('error', () => undefined);
  await redis.connect();
  const { Mutex } = require(path.resolve(dist));
  const mutex = new Mutex(`profile:${process.pid}`, { redis });
  await mutex.existsOrCreate();
  let cycles = 0;
  let stop = false;
  const caller = async () => {
    while (!stop) {
      await mutex.unlock(await mutex.lock());
      cycles++;
    }
  };
  const callers = Array.from({ length: clients }, caller);
  await sleep(2000);
  const session = new Session();
  session.connect();
  await session.post('Profiler.enable');
  await session.post('Profiler.setSamplingInterval', { interval: 100 });
  await session.post('Profiler.start');
  const before = { cycles, cpu: process.cpuUsage(), at: performance.now() };
  await sleep(seconds * 1000);
  const cpu = process.cpuUsage(before.cpu);
  const counted = cycles - before.cycles;
  const elapsed = (performance.now() - before.at) / 1000;
  const { profile } = await session.post('Profiler.stop');
  session.disconnect();
  stop = true;
  await Promise.all(callers);
  await mutex.close();
  await redis.quit();
  await server.stop();

  const { busy, byFunction, byFile } = selfTime(profile);
  const where = colocated
    ? 'Redis and the client on one CPU'
    : pin
      ? 'Redis and the client on CPUs of their own'
      : 'not pinned (no taskset)';
  console.log(`# Client CPU profile: mutex, ${clients} callers in one process, hold 0 (${gitCommit()})\n`);
  console.log(`${where}; ${seconds} s sampled every 100 µs after 2 s of warm-up.\n`);
  console.log(
    `${counted} cycles, ${Math.round(counted / elapsed)}/s; client CPU ${Math.round((cpu.user + cpu.system) / counted)} µs per cycle (user ${Math.round(cpu.user / counted)}, system ${Math.round(cpu.system / counted)}).\n`,
  );
  console.log(`## Busy samples by file (${busy} samples)\n\n| file | share |\n|---|---|\n${rows(byFile, busy, 15)}\n`);
  console.log(
    `## The ${top} functions with the most self time\n\n| function | share |\n|---|---|\n${rows(byFunction, busy, top)}`,
  );
}

runMain(main, started);
