'use strict';
// Owns the Redis server the benchmark runs against (started by tools/redis-server.js), CPU pinning, and INFO snapshots.
const { execFileSync } = require('node:child_process');
const os = require('node:os');
const { createClient } = require('redis');
const { startRedisServer } = require('../../tools/redis-server');
const { now } = require('./clock');

const SERVER_CPU = 0;
const CLIENT_CPU = 1;

function hasTaskset() {
  try {
    execFileSync('taskset', ['-V'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** Pins this process (every thread) to `cpu` (the client CPU by default); forked workers inherit it. */
function pinSelf(cpu = CLIENT_CPU) {
  execFileSync('taskset', ['-a', '-p', '-c', String(cpu), String(process.pid)], { stdio: 'ignore' });
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Starts `redis-server` on a free loopback port (pinned to `cpu`, SERVER_CPU by default, when `pin`), waits until it
 * answers PING, and returns { url, pid, stop, killNow }. A SIGKILL at this process's exit backs up
 * `stop()`; `killNow()` is the synchronous SIGKILL for a signal handler.
 */
async function startServer({ pin, cpu = SERVER_CPU }) {
  const wrapper = pin ? ['taskset', '-c', String(cpu)] : [];
  const server = await startRedisServer(['--maxclients', '10000'], { wrapper, stopOnExit: true });
  return {
    url: server.url,
    pid: server.pid,
    stop: () => server.stop(),
    killNow: () => void server.kill('SIGKILL'), // the signal goes out at once; the exit is not awaited
  };
}

function parseInfo(text) {
  const info = {};
  for (const line of text.split('\r\n')) {
    if (!line || line.startsWith('#')) continue;
    const i = line.indexOf(':');
    if (i > 0) info[line.slice(0, i)] = line.slice(i + 1);
  }
  return info;
}

/** A monitor connection that takes INFO snapshots: commands (all, including calls made inside scripts), CPU, connections, memory. */
async function monitor(url) {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  return {
    client,
    async snapshot() {
      const info = parseInfo(await client.sendCommand(['INFO', 'everything']));
      const commands = {};
      const usec = {};
      let calls = 0;
      for (const [field, value] of Object.entries(info)) {
        if (!field.startsWith('cmdstat_')) continue;
        const name = field.slice(8);
        if (name === 'info') continue; // the monitor's own
        const n = Number(/calls=(\d+)/.exec(value)?.[1] ?? 0);
        commands[name] = n;
        usec[name] = Number(/usec=(\d+)/.exec(value)?.[1] ?? 0);
        calls += n;
      }
      return {
        at: now(),
        calls,
        commands,
        usec,
        cpu: Number(info.used_cpu_sys) + Number(info.used_cpu_user),
        connections: Number(info.total_connections_received),
        connected: Number(info.connected_clients),
        memory: Number(info.used_memory),
      };
    },
    async version() {
      return parseInfo(await client.sendCommand(['INFO', 'server'])).redis_version;
    },
    /** Deletes every key matching `pattern` (SCAN, bounded). */
    async deleteMatching(pattern) {
      let cursor = '0';
      for (let i = 0; i < 10000; i++) {
        const [next, keys] = await client.sendCommand(['SCAN', cursor, 'MATCH', pattern, 'COUNT', '1000']);
        if (keys.length > 0) await client.sendCommand(['UNLINK', ...keys]);
        cursor = next;
        if (cursor === '0') break;
      }
    },
    close: () => client.quit().catch(() => client.disconnect()),
  };
}

function cpuModel() {
  return os.cpus()[0]?.model?.trim() ?? 'unknown';
}

module.exports = { hasTaskset, pinSelf, startServer, monitor, cpuModel, SERVER_CPU, CLIENT_CPU, sleep };
