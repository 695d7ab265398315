'use strict';
// Owns throwaway redis-server processes: a free loopback port, start with given args, wait for PING, stop by pid, remove the temp dir.
/*
 * The one copy, for every part of the repository that starts a Redis of its own: the specs
 * (spec/support/redis-server.ts re-exports it, typed by redis-server.d.ts next to this file), the
 * benchmarks (bench/lib/server.js, bench/cluster.js, bench/instructions.js), the soak (soak/) and the
 * examples (examples/support/redis.js). Plain CommonJS, so that bench/, soak/ and examples/ require
 * it without a build step. It lives here rather than in examples/support because the examples are
 * not self-contained anyway (they load the library built from this repository, `require('..')`),
 * and a copy kept for readers would be the sixth copy this file replaced.
 *
 * Only processes this module spawned are ever signalled, by their own pid; nothing listens beyond
 * 127.0.0.1.
 */
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

const HOST = '127.0.0.1';
/** A SIGTERM that has not ended the server within this long becomes a SIGKILL (a primary may wait for its replicas). */
const STOP_GRACE_MS = 5000;
/** Starts that lose the race for their free port (another process took it first) are retried this many times. */
const PORT_ATTEMPTS = 3;

/** A TCP port nothing on 127.0.0.1 listens on at the moment of asking. */
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.once('error', reject);
    server.listen(0, HOST, () => {
      const address = server.address();
      server.close(() =>
        address && typeof address === 'object' ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** Whether a Redis on `port` answers PING with PONG within `timeoutMs` (a raw socket: no client needed). */
function answersPing(port, timeoutMs = 500) {
  return new Promise((resolve) => {
    const socket = net.connect(port, HOST);
    socket.setTimeout(timeoutMs);
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.once('data', (data) => {
      socket.destroy();
      resolve(data.toString().startsWith('+PONG'));
    });
    socket.once('error', () => resolve(false));
    socket.once('timeout', () => {
      socket.destroy();
      resolve(false);
    });
  });
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const hasExited = (child) => child.exitCode !== null || child.signalCode !== null;

/**
 * Starts `redis-server` on a free loopback port, with no persistence and a temp dir of its own
 * (later `args` override: `['--appendonly', 'yes']`), and resolves once it answers PING.
 *
 * options.config        a config file, passed first (a Sentinel's: `args` then holds `--sentinel`)
 * options.wrapper       a command to run it under: `['taskset', '-c', '0']`, `['valgrind', …]`
 * options.readyTimeoutMs how long to wait for PONG (default 10 s)
 * options.stopOnExit    SIGKILL it if this process exits while it runs (scripts that may `process.exit()`)
 *
 * Resolves `{ port, url, pid, dir, stop(), kill(signal), restart() }`; see redis-server.d.ts.
 * Rejects with an error whose `code` is 'ENOENT' when the command is not on PATH.
 */
async function startRedisServer(args = [], options = {}) {
  const { config, wrapper = [], readyTimeoutMs = 10_000, stopOnExit = false } = options;
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rts-redis-'));
  const removeDir = () => fs.rmSync(dir, { recursive: true, force: true });
  let port = 0;
  let child;

  const launch = async () => {
    const serverArgs = [
      ...(config ? [config] : []),
      '--port',
      String(port),
      '--bind',
      HOST,
      '--save',
      '',
      '--appendonly',
      'no',
      '--dir',
      dir,
      ...args,
    ];
    const [command, ...commandArgs] = [...wrapper, 'redis-server', ...serverArgs];
    child = spawn(command, commandArgs, { stdio: ['ignore', 'pipe', 'pipe'] });
    const current = child;
    let output = ''; // redis-server logs to stdout; its last lines explain a failed start
    const collect = (chunk) => (output = (output + chunk).slice(-4000));
    current.stdout.on('data', collect);
    current.stderr.on('data', collect);
    const failed = new Promise((resolve) => current.once('error', resolve));
    const deadline = Date.now() + readyTimeoutMs;
    for (;;) {
      const error = await Promise.race([failed, sleep(25)]);
      if (error) {
        const reason =
          error.code === 'ENOENT' ? `${command} is not on PATH` : `cannot start ${command}: ${error.message}`;
        throw Object.assign(new Error(reason), { code: error.code });
      }
      if (hasExited(current)) {
        throw Object.assign(new Error(`redis-server on port ${port} exited at start: ${output.trim()}`), { output });
      }
      if (await answersPing(port)) return;
      if (Date.now() > deadline) {
        await signal(current, 'SIGKILL');
        throw new Error(
          `redis-server on port ${port} did not answer PING within ${readyTimeoutMs / 1000} s: ${output.trim()}`,
        );
      }
    }
  };

  const onExit = () => child && !hasExited(child) && child.kill('SIGKILL');
  if (stopOnExit) process.once('exit', onExit);
  try {
    for (let attempt = 1; ; attempt++) {
      port = await freePort();
      try {
        await launch();
        break;
      } catch (error) {
        // Only a port taken between freePort() and the server's bind is worth another try.
        if (attempt >= PORT_ATTEMPTS || !/already in use/i.test(error.output ?? '')) throw error;
      }
    }
  } catch (error) {
    if (stopOnExit) process.off('exit', onExit);
    removeDir();
    throw error;
  }

  return {
    port,
    url: `redis://${HOST}:${port}`,
    get pid() {
      return child.pid ?? -1;
    },
    dir,
    async stop() {
      await signal(child, 'SIGTERM');
      if (stopOnExit) process.off('exit', onExit);
      removeDir();
    },
    kill: (how = 'SIGKILL') => signal(child, how),
    restart: launch,
  };
}

/** Sends `how` to `child` (by its own pid) and resolves once it exited; a SIGTERM escalates to SIGKILL after STOP_GRACE_MS. */
function signal(child, how) {
  return new Promise((resolve) => {
    if (hasExited(child) || child.pid === undefined) return resolve();
    const escalate = how === 'SIGKILL' ? undefined : setTimeout(() => child.kill('SIGKILL'), STOP_GRACE_MS);
    child.once('exit', () => {
      clearTimeout(escalate);
      resolve();
    });
    child.kill(how);
  });
}

module.exports = { freePort, answersPing, startRedisServer };
