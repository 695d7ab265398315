'use strict';
// One measured loop for bench/instructions.js: `clients` callers lock and unlock at once (hold 0) for
// `seconds`, over this library (from `dist`) or the bare BLPOP/LPUSH list; reports { cycles }.
const { createClient } = require('redis');

const config = JSON.parse(process.argv[2]);

async function connect() {
  const client = createClient({ url: config.url });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

async function library() {
  const { Semaphore } = require(config.dist);
  const client = await connect();
  const semaphore = new Semaphore(config.key, { redis: client, resources: config.permits });
  await semaphore.existsOrCreate();
  return {
    callers: Array.from({ length: config.clients }, () => ({
      lock: () => semaphore.lock(5000),
      unlock: (token) => semaphore.unlock(token),
    })),
    close: async () => {
      await semaphore.close();
      await client.quit();
    },
  };
}

async function bare() {
  const connections = await Promise.all(Array.from({ length: config.clients }, connect));
  const tokens = Array.from({ length: config.permits }, (_, i) => String(i));
  await connections[0].sendCommand(['RPUSH', config.key, ...tokens]);
  return {
    callers: connections.map((connection) => ({
      lock: async () => ((await connection.sendCommand(['BLPOP', config.key, '5'])) ?? [])[1] ?? null,
      unlock: (token) => connection.sendCommand(['LPUSH', config.key, token]),
    })),
    close: () => Promise.all(connections.map((connection) => connection.quit())),
  };
}

/** The uncontended floor: two round trips of a script that does nothing (`return 1`), per cycle. */
async function evalsha() {
  const connection = await connect();
  const sha = await connection.sendCommand(['SCRIPT', 'LOAD', 'return 1']);
  const call = () => connection.sendCommand(['EVALSHA', sha, '0']);
  return {
    callers: [{ lock: async () => (await call(), '0'), unlock: call }],
    close: () => connection.quit(),
  };
}

const CONTENDERS = { lib: library, bare, evalsha };

async function main() {
  const { callers, close } = await CONTENDERS[config.contender]();
  const end = performance.now() + config.seconds * 1000;
  let cycles = 0;
  await Promise.all(
    callers.map(async (caller) => {
      while (performance.now() < end) {
        const token = await caller.lock();
        if (token === null) continue;
        await caller.unlock(token);
        cycles++;
      }
    }),
  );
  await close();
  process.send({ cycles }, () => process.exit(0));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
