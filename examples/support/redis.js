'use strict';
/**
 * What the examples share: a Redis to run against, and a bound on each run.
 *
 * `useRedis()` connects to REDIS_URL when it is set; otherwise it starts a throwaway redis-server
 * (from PATH, no persistence) on a free loopback port, and `stop()` stops it again. Each example
 * calls it once in its main process and hands the URL to the processes it starts.
 */
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');

// The examples load the package built from this repository (`require('..')`): say so if it is not built.
if (!fs.existsSync(path.join(__dirname, '..', '..', 'dist', 'index.js'))) {
  console.error('The library is not built yet: run `npm install` and `npm run build` first.');
  process.exit(1);
}
const { createClient } = require('redis');

const HOW_TO_GET_REDIS = `The examples need Redis 6.2 or later. Either install redis-server, so they can start a
throwaway one (sudo apt-get install redis-server, or brew install redis), or run one and set
REDIS_URL: docker compose up -d && REDIS_URL=redis://127.0.0.1:6379 node examples/<example>.js`;

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

function answersPing(port) {
  return new Promise((resolve) => {
    const socket = net.connect(port, '127.0.0.1');
    socket.setTimeout(500);
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

/** Starts redis-server on a free port; resolves `{ url, pid, stop }` once it answers PING (within 5 s). */
async function startRedisServer() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'rts-example-redis-'));
  const port = await freePort();
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
    stdio: 'ignore',
  });
  const stop = () =>
    new Promise((resolve) => {
      const done = () => {
        fs.rmSync(dir, { recursive: true, force: true });
        resolve();
      };
      if (child.exitCode !== null || child.signalCode !== null) return done();
      child.once('exit', done);
      child.kill('SIGTERM');
    });
  // However this process ends (even process.exit() after an error), the server goes with it.
  const killOnExit = () => {
    child.kill('SIGTERM');
    fs.rmSync(dir, { recursive: true, force: true });
  };
  process.once('exit', killOnExit);
  child.once('exit', () => process.off('exit', killOnExit));
  const failed = new Promise((resolve) => child.once('error', resolve));
  for (const deadline = Date.now() + 5000; Date.now() < deadline; ) {
    const error = await Promise.race([failed, new Promise((resolve) => setTimeout(resolve, 25))]);
    if (error) {
      fs.rmSync(dir, { recursive: true, force: true });
      throw new Error(error.code === 'ENOENT' ? 'REDIS_URL is not set and there is no redis-server on PATH.' : error.message);
    }
    if (child.exitCode !== null) break;
    if (await answersPing(port)) return { url: `redis://127.0.0.1:${port}`, pid: child.pid, stop };
  }
  await stop();
  throw new Error(`redis-server did not start on port ${port}`);
}

/**
 * A connected node-redis client on REDIS_URL, or on a throwaway redis-server.
 * Resolves `{ url, client, origin, stop }`; `stop()` quits the client and stops the server it started.
 */
async function useRedis() {
  let server;
  let url = process.env.REDIS_URL;
  try {
    if (!url) {
      server = await startRedisServer();
      url = server.url;
      process.env.REDIS_URL = url; // the library's default, and what the example's processes inherit
    }
    const client = createClient({ url, socket: { connectTimeout: 3000, reconnectStrategy: false } });
    client.on('error', () => undefined); // failures reach us as rejected commands
    await client.connect().catch((error) => {
      throw new Error(`Cannot connect to Redis at ${url}: ${error.message}`);
    });
    const stop = async () => {
      if (client.isOpen) await client.quit().catch(() => client.disconnect().catch(() => undefined));
      if (server) await server.stop();
    };
    return { url, client, origin: server ? `a throwaway redis-server, pid ${server.pid}` : 'REDIS_URL', stop };
  } catch (error) {
    if (server) await server.stop();
    console.error(`${error.message}\n\n${HOW_TO_GET_REDIS}`);
    process.exit(1);
  }
}

/** A name no earlier run used: the examples may share a Redis with other runs and tests. */
function uniqueSuffix() {
  return `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
}

/** Fails the run if it is still going after `ms` (each example finishes in a few seconds). */
function exitAfter(ms, what) {
  setTimeout(() => {
    console.error(`${what} did not finish within ${ms / 1000} s`);
    process.exit(1);
  }, ms).unref();
}

module.exports = { useRedis, uniqueSuffix, exitAfter };
