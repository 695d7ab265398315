'use strict';
// One worker process of a cell: makes the contender's clients, runs them when told, reports every
// cycle's times (acquire called, granted, release called), its CPU, commands sent and memory.
const { contenders, floors, sent, now } = require('./contenders');

const MAX_CYCLES_PER_CLIENT = 2_000_000;

const sleepUntil = (t) => new Promise((resolve) => setTimeout(resolve, Math.max(0, t - now())));
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const cpuMicros = () => {
  const { user, system } = process.cpuUsage();
  return user + system;
};
const send = (message) => new Promise((resolve) => process.send(message, resolve));

let setup;
let instance;

function events() {
  return { c: [], a: [], g: [], r: [] };
}

/** Takes counters at time t: CPU, commands sent, memory. */
function markAt(t, marks, name) {
  return sleepUntil(t).then(() => {
    marks[name] = { at: now(), cpu: cpuMicros(), sent: sent.count, memory: process.memoryUsage() };
  });
}

async function runLoop(run) {
  const { holdMs, firstClient } = setup;
  const out = events();
  const marks = {};
  let holders = 0;
  let maxHolders = 0;
  let timeouts = 0;
  const markers = [markAt(run.warmEnd, marks, 'start'), markAt(run.endAt, marks, 'end')];
  await sleepUntil(run.startAt);
  await Promise.all(
    instance.clients.map(async (client, i) => {
      const id = firstClient + i;
      for (let n = 0; n < MAX_CYCLES_PER_CLIENT && now() < run.endAt; n++) {
        const a = now();
        const held = await client.lock(run.hardDeadline);
        if (held === null || held === undefined) {
          timeouts++;
          if (now() >= run.hardDeadline) break;
          continue;
        }
        const g = now();
        // A weighted client holds `weight` permits (contenders.js).
        const weight = client.weight ?? 1;
        if ((holders += weight) > maxHolders) maxHolders = holders;
        if (holdMs > 0) await sleep(holdMs);
        holders -= weight;
        const r = now();
        await client.unlock(held);
        out.c.push(id);
        out.a.push(a);
        out.g.push(g);
        out.r.push(r);
      }
    }),
  );
  await Promise.all(markers);
  return { events: out, marks, maxHolders, timeouts };
}

/** A holder takes the lock; `waiters` clients each call lock once, in order, and release at once when granted. */
async function runBurst(run) {
  const { firstClient } = setup;
  const [holder, ...waiters] = instance.clients;
  const out = events();
  const marks = {};
  let timeouts = 0;
  await sleepUntil(run.startAt);
  const held = await holder.lock(run.hardDeadline);
  if (held === null || held === undefined) throw new Error('the holder could not take the lock');
  marks.base = { at: now(), cpu: cpuMicros(), sent: sent.count, memory: process.memoryUsage() };
  await sleepUntil(run.waitersAt);
  const served = waiters.map(async (client, i) => {
    const a = now();
    const token = await client.lock(run.hardDeadline);
    const g = now();
    if (token === null || token === undefined) {
      timeouts++;
      return;
    }
    await client.unlock(token);
    out.c.push(firstClient + 1 + i);
    out.a.push(a);
    out.g.push(g);
    out.r.push(g);
  });
  await markAt(run.idleStart, marks, 'idleStart');
  await markAt(run.idleEnd, marks, 'idleEnd');
  await sleepUntil(run.releaseAt);
  const released = now();
  await holder.unlock(held);
  await Promise.all(served);
  marks.done = { at: now(), cpu: cpuMicros(), sent: sent.count, memory: process.memoryUsage() };
  return { events: out, marks, released, timeouts, maxHolders: 0 };
}

/**
 * The hand-off floor: clients pass one token around a list, each sending its LPUSH and its next BLPOP
 * together, so the others are always already blocked when the token comes back: every hand-off is one
 * reply plus one command, and nothing else.
 */
async function runPingpong(run) {
  const { firstClient } = setup;
  const out = events();
  const marks = {};
  const markers = [markAt(run.warmEnd, marks, 'start'), markAt(run.endAt, marks, 'end')];
  await sleepUntil(run.startAt);
  await Promise.all(
    instance.connections.map(async (connection, i) => {
      const id = firstClient + i;
      let a = now();
      let next = instance.blpop(connection);
      for (let n = 0; n < MAX_CYCLES_PER_CLIENT; n++) {
        const reply = await next;
        if (!reply) break;
        const g = now();
        const r = now();
        out.c.push(id);
        out.a.push(a);
        out.g.push(g);
        out.r.push(r);
        const pushed = connection.sendCommand(['LPUSH', setup.key, reply[1]]);
        if (r >= run.endAt) {
          await pushed;
          break;
        }
        a = now();
        next = instance.blpop(connection);
        await pushed;
      }
    }),
  );
  await Promise.all(markers);
  return { events: out, marks, maxHolders: 0, timeouts: 0 };
}

async function runFloor(run) {
  const marks = {};
  let ops = 0;
  const markers = [markAt(run.warmEnd, marks, 'start'), markAt(run.endAt, marks, 'end')];
  await sleepUntil(run.startAt);
  let inWindow = 0;
  for (let n = 0; n < 50_000_000 && now() < run.endAt; n++) {
    await instance.op();
    ops++;
    const t = now();
    if (t >= run.warmEnd && t < run.endAt) inWindow++;
  }
  await Promise.all(markers);
  return { ops, inWindow, marks };
}

process.on('message', async (message) => {
  try {
    if (message.type === 'setup') {
      setup = message;
      instance =
        message.mode === 'floor' || message.mode === 'pingpong'
          ? await floors[message.contender](message)
          : await contenders[message.contender](message);
      await send({ type: 'ready', memory: process.memoryUsage() });
    } else if (message.type === 'run') {
      const result =
        setup.mode === 'loop'
          ? await runLoop(message)
          : setup.mode === 'burst'
            ? await runBurst(message)
            : setup.mode === 'pingpong'
              ? await runPingpong(message)
              : await runFloor(message);
      await send({ type: 'done', result });
    } else if (message.type === 'close') {
      // Ends this cell's clients; the process stays for the next cell unless told to exit.
      await Promise.race([instance?.close(), sleep(5000)]);
      instance = undefined;
      setup = undefined;
      sent.count = 0;
      await send({ type: 'closed' });
    } else if (message.type === 'exit') {
      process.exit(0);
    }
  } catch (error) {
    await send({ type: 'error', message: String(error && error.stack ? error.stack : error) });
    process.exit(1);
  }
});
process.on('disconnect', () => process.exit(0));
