'use strict';
// Owns what the examples share: a Redis to run against (REDIS_URL or a throwaway server), and a bound on each run.
/*
 * `useRedis()` connects to REDIS_URL when it is set; otherwise it starts a throwaway redis-server
 * (from PATH, no persistence) on a free loopback port with the repository's one helper
 * (tools/redis-server.js), and `stop()` stops it again. Each example calls it once in its main
 * process and hands the URL to the processes it starts.
 */
const fs = require('node:fs');
const path = require('node:path');
const { startRedisServer } = require('../../tools/redis-server');

// The examples load the package built from this repository (`require('..')`): say so if it is not built.
if (!fs.existsSync(path.join(__dirname, '..', '..', 'dist', 'index.js'))) {
  console.error('The library is not built yet: run `npm install` and `npm run build` first.');
  process.exit(1);
}
const { createClient } = require('redis');
const { Semaphore, UnsupportedServerError } = require('../..');

const example = `examples/${path.basename(require.main?.filename ?? '<example>.js')}`;
const HOW_TO_GET_REDIS = `The examples need Redis 6.2 or later. Either install redis-server, so they can start a
throwaway one (sudo apt-get install redis-server on Debian 12 or Ubuntu 24.04 and later: Ubuntu
22.04's is 6.0, too old; or brew install redis), or run one and set REDIS_URL:
docker compose up -d && REDIS_URL=redis://127.0.0.1:6379 node ${example}`;

/** `url` with its password, if any, replaced by `***`: for printing. */
function redact(url) {
  try {
    const parsed = new URL(url);
    if (!parsed.password) return url;
    parsed.password = '***';
    return parsed.toString();
  } catch {
    return url;
  }
}

/** Bounds `promise` by `ms`: rejects after that long. */
function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} took longer than ${ms} ms`)), ms);
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
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
      // However this process ends (even process.exit() after an error), the server goes with it.
      server = await startRedisServer([], { readyTimeoutMs: 5000, stopOnExit: true }).catch((error) => {
        throw new Error(
          error.code === 'ENOENT' ? 'REDIS_URL is not set and there is no redis-server on PATH.' : error.message,
        );
      });
      url = server.url;
      process.env.REDIS_URL = url; // the library's default, and what the example's processes inherit
    }
    const client = createClient({ url, socket: { connectTimeout: 3000, reconnectStrategy: false } });
    client.on('error', () => undefined); // failures reach us as rejected commands
    await client.connect().catch((error) => {
      throw new Error(`Cannot connect to Redis at ${redact(url)}: ${error.message}`);
    });
    await assertSupported(client, url);
    const stop = async () => {
      if (client.isOpen)
        await withTimeout(client.quit(), 1000, 'quit').catch(() => client.disconnect().catch(() => undefined));
      if (server) await server.stop();
    };
    return { url, client, origin: server ? `a throwaway redis-server, pid ${server.pid}` : 'REDIS_URL', stop };
  } catch (error) {
    if (server) await server.stop();
    console.error(`${error.message}\n\n${HOW_TO_GET_REDIS}`);
    process.exit(1);
  }
}

/**
 * Rejects, before the example starts anything, when the server is older than the library supports:
 * the library's own check (at a semaphore's first use: `UnsupportedServerError`), asked once here
 * with a read-only call, so that an old Redis is named up front rather than in every process.
 */
async function assertSupported(client, url) {
  const probe = new Semaphore(`examples:server-check:${uniqueSuffix()}`, { redis: client });
  try {
    await withTimeout(probe.exists(), 5000, 'the server check');
  } catch (error) {
    if (!(error instanceof UnsupportedServerError)) return; // anything else: the example meets it and says so itself
    throw new Error(
      `Redis at ${redact(url)} is too old: it runs Redis ${error.version}, and the library needs ${error.minimum} or later (for BLMOVE).`,
    );
  } finally {
    await probe.close();
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

/**
 * `--name count` options: `defaults` names each option and its default; every value must be a whole
 * number from 1 to `max`, or the run prints `usage` and exits 2.
 */
function parseCounts(argv, defaults, max, usage) {
  const options = { ...defaults };
  for (let i = 0; i < argv.length; i += 2) {
    const key = argv[i]?.startsWith('--') ? argv[i].slice(2) : undefined;
    const value = Number(argv[i + 1]);
    if (key === undefined || !Object.hasOwn(defaults, key) || !Number.isInteger(value) || value < 1 || value > max) {
      console.error(usage);
      process.exit(2);
    }
    options[key] = value;
  }
  return options;
}

module.exports = { useRedis, uniqueSuffix, exitAfter, redact, withTimeout, parseCounts };
