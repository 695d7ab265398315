'use strict';
// One process of a measured loop for bench/instructions.js: `clients` callers lock and unlock at once
// (hold 0) over this library (from `dist`) or the bare BLPOP/LPUSH list. It connects, says
// { ready }, runs for `seconds` when told { go }, says { cycles }, and closes when told { exit }, so
// the parent counts Redis instructions between `go` and the last `cycles` only (connections, script
// loading and creation excluded). The bare list's tokens are pushed by the process with `pushTokens`.
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
  if (config.pushTokens) await connections[0].sendCommand(['RPUSH', config.key, ...tokens]);
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

const send = (message) => new Promise((resolve) => process.send(message, resolve));

/** Messages from the parent, queued so none is missed between two waits. */
const inbox = [];
let waiter = null;
process.on('message', (message) => {
  if (waiter) waiter(message);
  else inbox.push(message);
});

/** The next message from the parent, which must be of `type`, or an error after `timeoutMs`. */
function next(type, timeoutMs) {
  return new Promise((resolve, reject) => {
    const check = (message) => {
      waiter = null;
      clearTimeout(timer);
      if (message.type === type) resolve(message);
      else reject(new Error(`expected ${type}, got ${message.type}`));
    };
    const timer = setTimeout(() => {
      waiter = null;
      reject(new Error(`no ${type} within ${timeoutMs} ms`));
    }, timeoutMs);
    if (inbox.length > 0) check(inbox.shift());
    else waiter = check;
  });
}

async function main() {
  const { callers, close } = await CONTENDERS[config.contender]();
  await send({ type: 'ready' });
  await next('go', 120_000);
  const end = performance.now() + config.seconds * 1000;
  let cycles = 0;
  await Promise.all(
    callers.map(async (caller) => {
      for (let n = 0; n < 10_000_000 && performance.now() < end; n++) {
        const token = await caller.lock();
        if (token === null) continue;
        await caller.unlock(token);
        cycles++;
      }
    }),
  );
  await send({ type: 'cycles', cycles });
  await next('exit', 120_000);
  await close();
  process.exit(0);
}

process.on('disconnect', () => process.exit(0));
main().catch((error) => {
  console.error(error);
  process.exit(1);
});
