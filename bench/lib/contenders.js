'use strict';
// The contenders, as seen by one worker process: each makes `clients` lock handles
// { lock(deadline) -> handle | null, unlock(handle) } over the connections it would use in real life.
const path = require('node:path');
const { createClient } = require('redis');
const Redis = require('ioredis');

const { now } = require('./clock');
const { leanClients } = require('./lean');

/** Commands sent by this process (top-level only: calls made inside scripts are not counted here). */
const sent = { count: 0 };

function countSendCommand(proto) {
  const original = proto.sendCommand;
  if (original.__counted) return;
  const counted = function (...args) {
    sent.count++;
    return original.apply(this, args);
  };
  counted.__counted = true;
  proto.sendCommand = counted;
}

(function instrument() {
  // node-redis v4: this library and the bare list send every command through sendCommand.
  let proto = Object.getPrototypeOf(createClient({ url: 'redis://127.0.0.1:1' }));
  while (proto && !Object.prototype.hasOwnProperty.call(proto, 'sendCommand')) proto = Object.getPrototypeOf(proto);
  if (proto) countSendCommand(proto);
  // ioredis: every command (SET, EVALSHA, EVAL…) goes through Redis.prototype.sendCommand.
  countSendCommand(Redis.prototype);
})();

async function nodeRedis(url) {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function ioredis(url) {
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

const seconds = (ms) => (Math.max(1, ms) / 1000).toFixed(3);

/** BLPOP in bounded slices until `deadline`. */
async function blpop(connection, key, deadline) {
  for (let i = 0; i < 1000; i++) {
    const remaining = deadline - now();
    if (remaining <= 0) return null;
    const reply = await connection.sendCommand(['BLPOP', key, seconds(Math.min(remaining, 5000))]);
    if (reply) return reply[1];
  }
  return null;
}

const contenders = {
  /**
   * This library: one Semaphore per process (its defaults: blocking pool of 10 connections) over one
   * node-redis client. `options.weights` (not a Semaphore option): client n of the cell takes
   * weights[n % length] permits a lock (the `permits` option), and counts as that many holders.
   */
  async lib({ url, key, permits, clients, firstClient = 0, options = {} }) {
    // The runner's private copy of dist/ (see run.js), or dist/ itself.
    const { Semaphore } = require(process.env.BENCH_DIST ?? path.join(__dirname, '..', '..', 'dist'));
    const { weights, ...semaphoreOptions } = options;
    const client = await nodeRedis(url);
    const semaphore = new Semaphore(key, { redis: client, resources: permits, ...semaphoreOptions });
    await semaphore.existsOrCreate();
    const handle = {
      lock: async (deadline) => semaphore.lock(Math.max(1, deadline - now())),
      unlock: (token) => semaphore.unlock(token),
    };
    const weighted = (weight) => ({
      weight,
      lock: async (deadline) => semaphore.lock(Math.max(1, deadline - now()), { permits: weight }),
      unlock: handle.unlock,
    });
    return {
      clients: Array.from({ length: clients }, (_, i) =>
        weights ? weighted(weights[(firstClient + i) % weights.length]) : handle,
      ),
      close: async () => {
        await semaphore.close();
        await client.quit().catch(() => client.disconnect());
      },
    };
  },

  /** The library's exact commands with no library around them (lean.js): one connection per client and a main one. */
  lean({ url, key, permits, clients }) {
    const dist = process.env.BENCH_DIST ?? path.join(__dirname, '..', '..', 'dist');
    return leanClients({ dist, name: key, permits, clients, connect: () => nodeRedis(url) });
  },

  /** The reference design: a list of tokens; BLPOP to take one, LPUSH to give it back. No crash safety. One connection per client. */
  async bare({ url, key, clients }) {
    const connections = await Promise.all(Array.from({ length: clients }, () => nodeRedis(url)));
    return {
      clients: connections.map((connection) => ({
        lock: (deadline) => blpop(connection, key, deadline),
        unlock: (token) => connection.sendCommand(['LPUSH', key, token]),
      })),
      close: () => Promise.all(connections.map((c) => c.quit().catch(() => c.disconnect()))),
    };
  },

  /** swarthy's redis-semaphore: SET NX / a Lua script polled every `retryInterval` ms; one ioredis client per process. */
  async rs({ url, key, permits, clients, options = {}, acquireTimeout }) {
    const { Mutex, Semaphore } = require('redis-semaphore');
    const client = await ioredis(url);
    const lockOptions = { acquireTimeout, ...options };
    const handles = Array.from({ length: clients }, () => {
      const lock =
        permits === 1 ? new Mutex(client, key, lockOptions) : new Semaphore(client, key, permits, lockOptions);
      return {
        lock: async () => {
          try {
            await lock.acquire();
            return lock;
          } catch (error) {
            if (error && error.name === 'TimeoutError') return null;
            throw error;
          }
        },
        unlock: (held) => held.release(),
      };
    });
    return { clients: handles, close: () => client.quit().catch(() => client.disconnect()) };
  },

  /** redlock 4 on one ioredis client: SET NX PX, retried after retryDelay ± retryJitter (defaults 200 ± 100 ms). */
  async redlock({ url, key, clients, options = {}, acquireTimeout }) {
    const Redlock = require('redlock');
    const client = await ioredis(url);
    const retryDelay = options.retryDelay ?? 200;
    const redlock = new Redlock([client], { ...options, retryCount: Math.ceil(acquireTimeout / retryDelay) });
    redlock.on('clientError', () => undefined);
    const handle = {
      lock: async () => {
        try {
          return await redlock.lock(key, 10000);
        } catch (error) {
          if (error instanceof Redlock.LockError) return null;
          throw error;
        }
      },
      unlock: (held) => held.unlock(),
    };
    return {
      clients: Array.from({ length: clients }, () => handle),
      close: () => client.quit().catch(() => client.disconnect()),
    };
  },
};

/** The floors: one connection, one command in flight at a time. */
const floors = {
  async ping({ url }) {
    const client = await nodeRedis(url);
    return { op: () => client.sendCommand(['PING']), close: () => client.quit() };
  },
  async evalsha({ url }) {
    const client = await nodeRedis(url);
    const sha = await client.sendCommand(['SCRIPT', 'LOAD', 'return 1']);
    return { op: () => client.sendCommand(['EVALSHA', sha, '0']), close: () => client.quit() };
  },
};

/** The hand-off floor (worker.js runPingpong): one connection per client; the token list is prepared by the runner. */
floors.pingpong = async ({ url, key, clients }) => {
  const connections = await Promise.all(Array.from({ length: clients }, () => nodeRedis(url)));
  return {
    connections,
    // 2 s slices: a client whose token never comes back ends the floor by itself.
    blpop: (connection) => connection.sendCommand(['BLPOP', key, '2']),
    close: () => Promise.all(connections.map((c) => c.quit().catch(() => c.disconnect()))),
  };
};

module.exports = { contenders, floors, sent, now };
