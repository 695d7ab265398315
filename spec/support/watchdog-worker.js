'use strict';
/*
 * A child process for spec/protocol/grant-identity.spec.ts: a watchdog (`startWatchdog`) on a Semaphore of its
 * own, in a process whose event loop the parent's stalls do not block.
 *
 * It runs lib/ from its TypeScript sources, transpiled in memory with the project's typescript, so
 * that it is the very code the spec runs under jest (dist/ may be stale, and a concurrent build may
 * remove it). REDIS_CLIENT (redis, redis5, redis6) picks the node-redis major, as jest.config.js does.
 *
 * Configured by the JSON in WATCHDOG_WORKER: { url, name, intervalMs, armAt?, lifetimeMs? }.
 *   - reports `{ ready: true }` once connected;
 *   - starts the watchdog at `armAt` (a Date.now() time), or at the one the message `{ armAt }` gives
 *     (a parent about to stall its event loop can still send it), reporting `{ armed: at }`;
 *   - reports `{ reclaimed: count, at }` for each run that returned tokens;
 *   - on the message 'stop', stops the watchdog, closes, reports `{ stopped: true }` and exits;
 *   - exits by itself after `lifetimeMs` (default 60 s), so it can never outlive a failed spec.
 * Also `{ error }` if something throws.
 */
const { createHash } = require('node:crypto');
const { mkdirSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { tmpdir } = require('node:os');
const { join } = require('node:path');

// REDIS_CLIENT picks the node-redis major for this process and the library (worker-redis.js).
require('./worker-redis');

// Each file's output is kept by the hash of its source, so the children of a run after the first
// start without loading typescript (a cold start took seconds of CPU beside another spec).
const CACHE = join(tmpdir(), 'rts-watchdog-worker-transpiled');
let ts;
require.extensions['.ts'] = (module, filename) => {
  const source = readFileSync(filename, 'utf8');
  const cached = join(CACHE, `${createHash('sha256').update(filename).update('\0').update(source).digest('hex')}.js`);
  let outputText;
  try {
    outputText = readFileSync(cached, 'utf8');
  } catch {
    ts ??= require('typescript');
    ({ outputText } = ts.transpileModule(source, {
      compilerOptions: { module: ts.ModuleKind.CommonJS, target: ts.ScriptTarget.ES2022, esModuleInterop: true },
      fileName: filename,
    }));
    mkdirSync(CACHE, { recursive: true });
    const partial = `${cached}.${process.pid}`;
    writeFileSync(partial, outputText);
    renameSync(partial, cached); // whole files only, whichever child writes last
  }
  module._compile(outputText, filename);
};

const { Semaphore } = require(join(__dirname, '../../lib'));

const config = JSON.parse(process.env.WATCHDOG_WORKER || '{}');

function send(message) {
  return new Promise((resolve) => process.send(message, () => resolve()));
}

async function main() {
  const lifetime = setTimeout(() => process.exit(3), config.lifetimeMs ?? 60_000);
  lifetime.unref();
  const sem = new Semaphore(config.name, { url: config.url });
  sem.on('reclaimed', ({ count }) => void send({ reclaimed: count, at: Date.now() }));
  await sem.existsOrCreate();
  let watchdog;
  const arm = () => {
    watchdog = sem.startWatchdog(config.intervalMs, { onError: (error) => void send({ error: String(error) }) });
    void send({ armed: Date.now() });
  };
  let armTimer;
  const armAt = (at) => {
    clearTimeout(armTimer);
    armTimer = setTimeout(arm, Math.max(0, at - Date.now()));
  };
  if (config.armAt !== undefined) armAt(config.armAt);
  process.on('message', async (message) => {
    if (message && typeof message.armAt === 'number') return armAt(message.armAt);
    if (message !== 'stop') return;
    clearTimeout(armTimer);
    if (watchdog) await watchdog.stop();
    await sem.close();
    await send({ stopped: true });
    process.exit(0);
  });
  await send({ ready: true });
}

main().catch(async (error) => {
  await send({ error: String(error && error.stack) });
  process.exit(1);
});
