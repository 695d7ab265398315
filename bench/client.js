#!/usr/bin/env node
'use strict';
/*
 * npm run bench:client [-- --reps N --seconds S --clients C --dist /other/dist]
 *
 * Splits the client's CPU per contended cycle (a mutex, C callers in one process, hold 0) into the
 * protocol and the library's own JavaScript, by running three clients in turn against one
 * redis-server, each in a fresh process, interleaved over N repetitions:
 *   - bare:  a BLPOP/LPUSH token list (the floor: two commands, no records);
 *   - lean:  the library's protocol with no library around it: each caller's own connection sends
 *            BLMOVE + claim in one pipeline, and the release goes on a shared connection, both built
 *            by the library's script layer (dist/scripts.js), so the commands and arguments are
 *            exactly a semaphore's;
 *   - lib:   `Semaphore.lock()` / `unlock()`.
 * lean − bare is what the protocol costs the client (a third command, its arguments, its replies);
 * lib − lean is the library's own JavaScript. Prints client CPU µs per cycle (process.cpuUsage over
 * the measured window), the median (min–max) over repetitions, and the paired ratios.
 */
const { fork } = require('node:child_process');
const path = require('node:path');
const { startRedisServer } = require('../tools/redis-server');
const { num, ratioRange, range, table } = require('./lib/format');
const { summary } = require('./lib/metrics');
const { gitCommit } = require('./lib/provenance');
const { option } = require('./lib/report');

const KINDS = ['bare', 'lean', 'lib'];

// ---- One measured run, in a child process ----

async function child([kind, url, dist, clients, seconds]) {
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
    const scripts = require(path.join(dist, 'scripts.js'));
    const { semaphoreKeys } = require(path.join(dist, 'keys.js'));
    const keys = semaphoreKeys(name);
    const target = { keys, resources: 1, options: { staleClientTimeout: 30_000, expiration: null, useLocalTime: false, owner: 'bench' } };
    await main.sendCommand(scripts.evalCommand(scripts.create(target)));
    let grants = 0;
    for (let i = 0; i < clients; i++) {
      const connection = await connect();
      await connection.sendCommand(scripts.scriptLoadCommand(scripts.scripts.claim));
      await main.sendCommand(scripts.evalCommand(scripts.prepareWait(target, `r${i}`, 600_000)));
      connection.registration = `r${i}`;
      connections.push(connection);
    }
    await main.sendCommand(scripts.scriptLoadCommand(scripts.scripts.release));
    step = async (connection) => {
      const grantId = `g${++grants}`;
      const claim = scripts.claim(target, connection.registration, { grantId, nextLifetimeMs: 600_000, keep: true });
      for (;;) {
        connection.sendCommand(['BLMOVE', keys.available, keys.inbox(connection.registration), 'LEFT', 'RIGHT', '5']).catch(() => undefined);
        const { token } = claim.decode(await connection.sendCommand(scripts.evalshaCommand(claim)));
        if (token === null) continue;
        const release = scripts.release(target, token, grantId, true);
        release.decode(await main.sendCommand(scripts.evalshaCommand(release)));
        return;
      }
    };
  } else {
    const { Semaphore } = require(dist);
    const semaphore = new Semaphore(name, { redis: main, resources: 1 });
    await semaphore.existsOrCreate();
    for (let i = 0; i < clients; i++) connections.push(semaphore);
    step = async (s) => s.unlock(await s.lock(5000));
    close = () => semaphore.close();
  }
  // Warm up, then measure.
  let stop = Date.now() + 300;
  const loop = async (connection) => {
    let cycles = 0;
    while (Date.now() < stop) {
      await step(connection);
      cycles++;
    }
    return cycles;
  };
  await Promise.all(connections.map(loop));
  stop = Date.now() + seconds * 1000;
  const cpu0 = process.cpuUsage();
  const started = performance.now();
  const cycles = (await Promise.all(connections.map(loop))).reduce((a, b) => a + b, 0);
  const cpu = process.cpuUsage(cpu0);
  const elapsed = performance.now() - started;
  await close();
  for (const connection of new Set(connections)) if (connection !== main && connection.quit) await connection.quit();
  await main.quit();
  process.send({ cycles, perSecond: (cycles / elapsed) * 1000, cpuPerCycle: (cpu.user + cpu.system) / cycles });
}

function runChild(args) {
  return new Promise((resolve, reject) => {
    const worker = fork(__filename, ['--child', JSON.stringify(args)], { stdio: ['ignore', 'inherit', 'inherit', 'ipc'] });
    let result;
    worker.once('message', (message) => (result = message));
    worker.once('error', reject);
    worker.once('exit', (code) => (result ? resolve(result) : reject(new Error(`${args[0]} run exited with ${code}`))));
  });
}

// ---- The runner ----

async function main() {
  const reps = Number(option('reps', '5'));
  const seconds = Number(option('seconds', '3'));
  const clients = Number(option('clients', '8'));
  const dist = path.resolve(option('dist', path.join(__dirname, '..', 'dist')));
  const server = await startRedisServer(['--save', '', '--appendonly', 'no'], { stopOnExit: true });
  const runs = Object.fromEntries(KINDS.map((kind) => [kind, []]));
  try {
    for (let rep = 0; rep < reps; rep++) {
      for (const kind of KINDS) runs[kind].push(await runChild([kind, server.url, dist, clients, seconds]));
    }
  } finally {
    await server.stop();
  }
  const paired = (a, b) => summary(runs[a].map((run, i) => run.cpuPerCycle / runs[b][i].cpuPerCycle));
  const build = option('dist', null) === null ? `dist/ of ${gitCommit()}` : dist;
  console.log(`# Client CPU per contended cycle: protocol and library, ${build}\n`);
  console.log(`Mutex, ${clients} callers in one process, hold 0; ${reps} interleaved repetitions of ${seconds} s; one redis-server, not pinned.\n`);
  console.log(
    table(
      ['client', 'cycles/s', 'client CPU µs per cycle', '× bare (paired)', '× lean (paired)'],
      KINDS.map((kind) => [
        kind === 'bare' ? 'bare BLPOP/LPUSH list' : kind === 'lean' ? "lean: the library's commands, no library" : 'redis-token-semaphore',
        range(summary(runs[kind].map((run) => run.perSecond))),
        range(summary(runs[kind].map((run) => run.cpuPerCycle)), (x) => num(x, 1)),
        kind === 'bare' ? '1.00×' : ratioRange(paired(kind, 'bare')),
        kind === 'bare' ? '—' : kind === 'lean' ? '1.00×' : ratioRange(paired(kind, 'lean')),
      ]),
    ),
  );
  const cpu = (kind) => summary(runs[kind].map((run) => run.cpuPerCycle)).median;
  console.log(
    `\nThe protocol costs the client ${num(cpu('lean') - cpu('bare'), 1)} µs per cycle over the bare list; ` +
      `the library's own code ${num(cpu('lib') - cpu('lean'), 1)} µs over the lean client (medians).`,
  );
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
