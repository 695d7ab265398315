'use strict';
// The lean client: the library's exact commands with no library around them, so "library × lean" is its own code's cost.
//
// It sends what a `Semaphore` sends, built by the build's own script layer (dist/redis/), so KEYS and
// ARGV are a semaphore's: while uncontended, `tryLock` on the main connection (a miss registers the
// caller); while contended (the last answer said others wait), straight to a slice on the caller's
// own connection: `prepareWait` when its registration may lapse, then `BLMOVE AVAILABLE INBOX:<id>`
// and `claim` in one pipeline; a claim that keeps the registration for the next wait (others wait,
// no token free) leaves it as an advance registration; `release` on the main connection. By FCALL
// where the build has the function library, as a semaphore calls them. No deadline timers, leases,
// refreshes, events, recovery or checks: where the library would recover, this throws.
const { hostname } = require('node:os');
const fs = require('node:fs');
const path = require('node:path');
const { randomBytes } = require('node:crypto');
const { scriptLayer } = require('./report');
const { now } = require('./clock');

/** The first slice under an advance registration (TURN_MS in lib/lock/timing.ts). */
const SHORT_SLICE_MS = 1000;

/** Ids as the library makes them: a 12-character process prefix and a counter. */
const prefix = randomBytes(9).toString('base64url');
let counter = 0;
const newId = () => `${prefix}${(++counter).toString(36)}`;

/**
 * `clients` lean callers over the build in `dist`, on semaphore `name` with `permits` tokens:
 * { clients: [{ lock(deadline) -> grant | null, unlock(grant) }], close() }. `connect()` opens a
 * node-redis connection; each caller gets one of its own for its slices, and all share a main one.
 * `waitSlice`: the library's option (its default, 10 s); a registration lives two slices and a grace.
 */
async function leanClients({ dist, name, permits, clients, connect, waitSlice = 10_000 }) {
  const graceMs = Math.max(1000, waitSlice / 2);
  const lifetimeMs = 2 * waitSlice + graceMs;
  const layer = scriptLayer(dist);
  if (!layer) throw new Error(`${dist} has no script layer (dist/redis/)`);
  const { semaphoreKeys } = require(path.join(dist, 'redis', 'keys.js'));
  const keys = semaphoreKeys(name);
  const target = {
    keys,
    resources: permits,
    options: {
      staleClientTimeout: 30_000,
      expiration: null,
      useLocalTime: false,
      owner: `${hostname()}:${process.pid}`,
    },
  };
  const main = await connect();
  const library = path.join(dist, 'redis', 'functions.js');
  target.functions = fs.existsSync(library) && (await require(library).loadFunctionLibrary(main));
  const stored = layer.storedCommand ?? layer.evalshaCommand;
  const run = (connection, call) => connection.sendCommand(stored(call)).then(call.decode);
  for (let i = 0; i < 100; i++) {
    const created = layer.create(target);
    if (created.decode(await main.sendCommand(layer.evalCommand(created))) !== 'batches-remain') break;
  }
  for (const script of ['tryLock', 'claim', 'release', 'prepareWait'])
    await main.sendCommand(layer.scriptLoadCommand(layer.scripts[script]));
  const connections = [];
  for (let i = 0; i < clients; i++) connections.push(await connect());

  // As a Semaphore keeps them for all its callers: whether others wait, and the advance registrations.
  let contended = false;
  const advance = [];

  /** Slices on `connection` until a token comes or `deadline` passes. */
  async function block(connection, registered, deadline) {
    let registration = registered;
    for (;;) {
      const remaining = deadline - now();
      if (remaining <= 0 && registration === null) {
        // A wait that timed out proves nothing about contention: try first next time.
        contended = false;
        return null;
      }
      const slice = Math.min(
        Math.max(remaining, 1),
        registration?.advance ? Math.min(SHORT_SLICE_MS, waitSlice) : waitSlice,
      );
      registration ??= { id: newId(), until: 0 };
      const { id } = registration;
      const sent = now();
      const prepare = registration.until - sent < slice + graceMs / 2;
      if (prepare) connection.sendCommand(layer.evalCommand(layer.prepareWait(target, id, lifetimeMs))).catch(noop);
      connection
        .sendCommand(['BLMOVE', keys.available, keys.inbox(id), 'LEFT', 'RIGHT', (slice / 1000).toFixed(3)])
        .catch(noop);
      const grantId = newId();
      const nextLifetimeMs = slice >= remaining ? null : lifetimeMs;
      const reply = await run(
        connection,
        layer.claim(target, id, { grantId, nextLifetimeMs, keep: true, pipelined: true }),
      );
      if (reply.token === null) {
        registration = reply.renewed ? { id, until: sent + lifetimeMs } : null;
        continue;
      }
      contended = reply.others;
      if (reply.renewed) advance.push({ id, until: prepare ? sent + lifetimeMs : registration.until, advance: true });
      return { token: reply.token, id: grantId };
    }
  }

  const handles = connections.map((connection) => ({
    async lock(deadline) {
      if (contended) return block(connection, advance.pop() ?? null, deadline);
      const id = newId();
      const sent = now();
      const { token } = await run(main, layer.tryLock(target, id, lifetimeMs));
      contended = token === null;
      if (token !== null) return { token, id };
      return block(connection, { id, until: sent + lifetimeMs }, deadline);
    },
    unlock: (grant) => run(main, layer.release(target, grant.token, grant.id, true)),
  }));
  return {
    clients: handles,
    close: () => Promise.all([main, ...connections].map((c) => c.quit().catch(() => c.disconnect()))),
  };
}

function noop() {}

module.exports = { leanClients };
