'use strict';
/**
 * One polite crawler, run as its own process by crawler-demo.js (child_process.fork).
 *
 * It shares a semaphore with the other workers, one per host, so that no more than `permits`
 * requests go to the host at once. Each "fetch" is a random 100–400 ms sleep inside
 * `sem.lock(timeout, fn)`, which takes a token, runs `fn` and puts the token back whatever happens.
 *
 * It reports to the parent over IPC, with timestamps from the machine's monotonic clock (ms with
 * sub-millisecond precision, the same in every process on one machine):
 *   { type: 'ready' }                          connected; waits for { type: 'go' }
 *   { type: 'waiting', fetch, t }              about to call lock()
 *   { type: 'acquired', fetch, token, t }      first thing inside fn: the token is held in Redis
 *   { type: 'released', fetch, token, t }      last thing inside fn: the library releases right after
 *   { type: 'done' }                           every fetch finished and the semaphore is closed
 *   { type: 'failed', message }                something went wrong; the process exits with 1
 * So each reported [acquired, released] interval lies inside the real holding time, and the parent
 * can count holders from them without ever over-counting.
 */
const { Semaphore } = require('../dist');

const config = JSON.parse(process.argv[2] ?? '{}');
/** lockTimeoutMs: how long one lock() may wait before the worker gives up (LockTimeoutError). */
const { id, name, url, permits, fetches, lockTimeoutMs } = config;

const now = () => Number(process.hrtime.bigint()) / 1e6;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const between = (min, max) => min + Math.random() * (max - min);

/** Sends a message to the parent and resolves once it is written (so nothing is lost at exit). */
function report(message) {
  return new Promise((resolve) => {
    if (!process.connected) return resolve();
    process.send(message, (error) => resolve(error));
  });
}

// Every worker uses the same name and the same options: that is all it takes to share the semaphore.
const sem = new Semaphore(name, {
  url,
  resources: permits,
  // A crawler that dies mid-fetch gives its token back once it has held it for 5 s.
  staleClientTimeout: 5_000,
  // The demo's keys vanish a minute after the last use, even if the demo is killed before cleaning up.
  expiration: 60_000,
});

async function crawl() {
  for (let fetch = 1; fetch <= fetches; fetch++) {
    void report({ type: 'waiting', fetch, t: now() });
    await sem.lock(lockTimeoutMs, async (token) => {
      void report({ type: 'acquired', fetch, token, t: now() });
      await sleep(between(100, 400)); // GET https://example.com/page/<n>, politely
      void report({ type: 'released', fetch, token, t: now() });
    });
    await sleep(between(0, 30)); // parse the page before asking for the next one
  }
}

async function main() {
  await sem.existsOrCreate(); // connects now, so the parent can start every worker at once
  const go = new Promise((resolve) => process.once('message', resolve));
  await report({ type: 'ready' });
  await go;
  await crawl();
  await sem.close();
  await report({ type: 'done' });
  process.disconnect();
}

// If the parent goes away, stop: the tokens held are put back (close() waits for running fetches).
process.once('disconnect', () => {
  setTimeout(() => process.exit(0), 2000).unref(); // in case Redis is gone too and close() cannot finish
  void sem.close().finally(() => process.exit(0));
});
// Ctrl-C in the terminal reaches every process of the group: leave stopping to the parent.
process.on('SIGINT', () => undefined);

main().catch(async (error) => {
  await report({ type: 'failed', message: `worker ${id}: ${error?.stack ?? error}` });
  process.exit(1);
});
