'use strict';
// Owns one measurement: how long Redis kept its other clients waiting while some work ran.
/*
 * Shared by the specs (spec/faults/bounds.spec.ts, typed by redis-stalls.d.ts next to this file) and
 * the benchmarks (bench/scenarios/limits.js). Two views of the same stalls: the duration of each
 * script Redis ran meanwhile, by its own SLOWLOG (what a large creation must keep short), and the
 * slowest PING a separate connection saw, which also counts both processes' scheduling.
 */
const { createClient } = require('redis');

/** Entries the slow log keeps: every script of a creation of 1,000,000 tokens (about 100) and the PINGs between them. */
const LOG_LENGTH = 10_000;

/**
 * Runs `work()` while a separate connection to `url` PINGs in a loop (at most `maxPings`, until
 * `deadlineMs` at the latest). Logs every command meanwhile (`slowlog-log-slower-than 0`, left so).
 */
async function stallsDuring(url, work, { maxPings = Infinity, deadlineMs = Infinity } = {}) {
  const pinger = createClient({ url, socket: { reconnectStrategy: false } });
  pinger.on('error', () => undefined);
  await pinger.connect();
  try {
    await pinger.sendCommand(['CONFIG', 'SET', 'slowlog-log-slower-than', '0', 'slowlog-max-len', String(LOG_LENGTH)]);
    await pinger.sendCommand(['SLOWLOG', 'RESET']);
    let running = true;
    let pingMs = 0;
    let pings = 0;
    const deadline = performance.now() + deadlineMs;
    const loop = (async () => {
      while (running && pings < maxPings && performance.now() < deadline) {
        const sent = performance.now();
        await pinger.sendCommand(['PING']);
        pingMs = Math.max(pingMs, performance.now() - sent);
        pings++;
      }
    })();
    // Let the loop reach its first PING before the work starts.
    await new Promise((resolve) => setImmediate(resolve));
    const started = performance.now();
    let workMs;
    try {
      await work();
      workMs = performance.now() - started;
    } finally {
      running = false;
      await loop;
    }
    const logged = await pinger.sendCommand(['SLOWLOG', 'GET', String(LOG_LENGTH)]);
    const scriptsMs = logged
      .filter((entry) => /^(eval|evalsha|fcall)$/i.test(String(entry[3][0])))
      .map((entry) => Number(entry[2]) / 1000);
    return { workMs, pingMs, pings, scriptsMs };
  } finally {
    await pinger.disconnect().catch(() => undefined);
  }
}

module.exports = { stallsDuring };
