'use strict';
// The Redis server the benchmark runs against, CPU pinning, and INFO snapshots.
const { spawn, execFileSync } = require('node:child_process');
const net = require('node:net');
const os = require('node:os');
const { createClient } = require('redis');

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

/** Pins this process (every thread) to the client CPU; forked workers inherit it. */
function pinSelf() {
  execFileSync('taskset', ['-a', '-p', '-c', String(CLIENT_CPU), String(process.pid)], { stdio: 'ignore' });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/**
 * Starts `redis-server` on a free loopback port (pinned to SERVER_CPU when `pin`), waits until it
 * answers PING (bounded), and returns { url, pid, stop }.
 */
async function startServer({ pin }) {
  const port = await freePort();
  const serverArgs = ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--maxclients', '10000'];
  const [command, args] = pin ? ['taskset', ['-c', String(SERVER_CPU), 'redis-server', ...serverArgs]] : ['redis-server', serverArgs];
  const child = spawn(command, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk) => (stderr += chunk));
  let exited = false;
  child.on('exit', () => (exited = true));
  const url = `redis://127.0.0.1:${port}`;
  for (let attempt = 0; attempt < 100; attempt++) {
    if (exited) throw new Error(`redis-server exited at start: ${stderr}`);
    const client = createClient({ url, socket: { reconnectStrategy: false } });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.sendCommand(['PING']);
      await client.quit();
      break;
    } catch {
      await client.disconnect().catch(() => undefined);
      await sleep(50);
    }
    if (attempt === 99) throw new Error('redis-server did not answer PING within 5 s');
  }
  const stop = async () => {
    if (exited) return;
    const client = createClient({ url, socket: { reconnectStrategy: false } });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.sendCommand(['SHUTDOWN', 'NOSAVE']).catch(() => undefined);
    } catch {
      // fall through to the signal below
    }
    await client.disconnect().catch(() => undefined);
    for (let i = 0; i < 40 && !exited; i++) await sleep(50);
    if (!exited) child.kill('SIGKILL');
  };
  return { url, pid: child.pid, stop, killNow: () => !exited && child.kill('SIGKILL') };
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
        at: performance.timeOrigin + performance.now(),
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

module.exports = { hasTaskset, pinSelf, freePort, startServer, monitor, cpuModel, SERVER_CPU, CLIENT_CPU, sleep };
