'use strict';
// Owns the showcase: worker processes crawling one host under a semaphore, with every event and a summary printed.
/**
 * Polite crawlers: several worker processes fetch pages from one host, and a semaphore named after
 * the host (`crawler:example.com`) keeps at most 3 requests in flight to it at any moment.
 *
 *   npm run demo                                  # builds, then runs this file
 *   node examples/crawler-demo.js --workers 8 --fetches 4 --permits 2
 *   REDIS_URL=redis://127.0.0.1:6379 npm run demo # use a Redis you already run
 *
 * Each worker (crawler-worker.js, a process of its own) reports when it starts waiting, when it gets
 * a token and when it gives it back; this process prints every event with the current holders, then
 * a summary: fetches, the most tokens ever held at once, the tokens left at the end, wait times per
 * worker, and whether waiters were served in the order they started waiting.
 *
 * Without REDIS_URL it starts a throwaway redis-server (from PATH) on a free loopback port and stops
 * it at the end (examples/support/redis.js, as every example does). Exit code 0 when at most `permits` fetches ever overlapped and every token is back.
 */
const { fork } = require('node:child_process');
const path = require('node:path');
const { useRedis, redact, withTimeout } = require('./support/redis');
const { Semaphore } = require('..');

const USAGE = `Usage: node examples/crawler-demo.js [--workers N] [--fetches N] [--permits N]
  --workers N   worker processes (default 6; env DEMO_WORKERS)
  --fetches N   fetches per worker (default 5; env DEMO_FETCHES)
  --permits N   requests allowed at once to the host (default 3; env DEMO_PERMITS)
Uses REDIS_URL when set, otherwise starts redis-server from PATH on a free loopback port.`;

const WORKER_FILE = path.join(__dirname, 'crawler-worker.js');
/** FIFO report: lock calls that start closer than this race to Redis, so their order is a tie. */
const RACE_MS = 10;
/** FIFO report: waiters served closer than this were served by the same moment's releases. */
const SAME_MOMENT_MS = 2;
const HOST = 'example.com';

// ---------------------------------------------------------------------------------------------------
// Options

function parseOptions(argv, env) {
  const options = {
    workers: env.DEMO_WORKERS ?? '6',
    fetches: env.DEMO_FETCHES ?? '5',
    permits: env.DEMO_PERMITS ?? '3',
  };
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '--help' || arg === '-h') {
      console.log(USAGE);
      process.exit(0);
    }
    const match = /^--(workers|fetches|permits)(?:=(.*))?$/.exec(arg);
    if (!match) throw new UsageError(`Unknown argument ${JSON.stringify(arg)}`);
    const value = match[2] ?? argv[++i];
    if (value === undefined) throw new UsageError(`Expected a number after --${match[1]}`);
    options[match[1]] = value;
  }
  const limits = { workers: 64, fetches: 100, permits: 64 };
  for (const key of Object.keys(limits)) {
    const text = String(options[key]);
    const value = Number(text);
    if (!/^\d+$/.test(text) || value < 1 || value > limits[key]) {
      throw new UsageError(
        `Expected --${key} to be a whole number from 1 to ${limits[key]}, got ${JSON.stringify(text)}`,
      );
    }
    options[key] = value;
  }
  return options;
}

class UsageError extends Error {}

// ---------------------------------------------------------------------------------------------------
// Output

const useColor = process.stdout.isTTY && !process.env.NO_COLOR;
const paint = (code) => (text) => (useColor ? `\x1b[${code}m${text}\x1b[0m` : String(text));
const bold = paint('1');
const dim = paint('2');
const red = paint('31');
const green = paint('32');
const yellow = paint('33');
const cyan = paint('36');

/**
 * CLOCK_MONOTONIC in ms, which every process on the machine shares, so the workers' timestamps compare.
 * `performance.timeOrigin + performance.now()` does not: each process pairs it with the wall clock
 * once at start-up, and processes started under load disagree by a few ms.
 */
const now = () => Number(process.hrtime.bigint()) / 1e6;
const seconds = (ms) => `${(ms / 1000).toFixed(3)}s`.padStart(8);
const millis = (ms) => `${Math.round(ms)} ms`;
const plural = (n, word) => `${n} ${n === 1 ? word : word.endsWith('h') ? `${word}es` : `${word}s`}`;

// ---------------------------------------------------------------------------------------------------
// Processes this demo started, and stopping them (by pid, nothing else)

const started = { workers: new Map(), redis: undefined }; // redis: what useRedis() resolved

function hasExited(child) {
  return child.exitCode !== null || child.signalCode !== null;
}

/** Sends `signal` to a child by its pid, then SIGKILL if it is still there after `graceMs`. */
function stopChild(child, signal, graceMs) {
  return new Promise((resolve) => {
    if (!child.pid || hasExited(child)) return resolve();
    const timer = setTimeout(() => {
      try {
        process.kill(child.pid, 'SIGKILL');
      } catch {
        // it exited between the check and the kill
      }
    }, graceMs);
    child.once('exit', () => {
      clearTimeout(timer);
      resolve();
    });
    try {
      process.kill(child.pid, signal);
    } catch {
      clearTimeout(timer);
      resolve();
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// Stopping, on every path: normal end, failure, Ctrl-C

let deadlineTimer; // bounds the whole run
let sem; // this process's view of the semaphore: creates it, checks it at the end, deletes it
let stopping;

/** Stops the workers, removes the semaphore's keys, stops redis-server if we started it, and exits. */
function finish(code) {
  stopping ??= (async () => {
    clearTimeout(deadlineTimer);
    await Promise.all([...started.workers.values()].map((worker) => stopChild(worker.child, 'SIGTERM', 1000)));
    if (sem && started.redis?.client.isReady) {
      await withTimeout(sem.delete(), 1000, 'delete').catch((error) =>
        console.error(dim(`(could not delete the semaphore's keys: ${error.message}; they expire in a minute)`)),
      );
    }
    await started.redis?.stop(); // quits our client, stops redis-server if it started one
    process.exit(code);
  })();
  return stopping;
}

let interrupted = false;
process.on('SIGINT', () => {
  if (interrupted) process.exit(130); // a second Ctrl-C: leave now
  interrupted = true;
  console.error(yellow('\nInterrupted: stopping the workers and Redis…'));
  void finish(130);
});
process.on('SIGTERM', () => void finish(143));
process.on('uncaughtException', (error) => {
  console.error(red(`Unexpected error: ${error.stack ?? error}`));
  void finish(1);
});
process.on('unhandledRejection', (error) => {
  console.error(red(`Unexpected error: ${error?.stack ?? error}`));
  void finish(1);
});

// ---------------------------------------------------------------------------------------------------
// The run

async function main() {
  let options;
  try {
    options = parseOptions(process.argv.slice(2), process.env);
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`${error.message}\n\n${USAGE}`);
    return finish(2);
  }
  const { workers, fetches, permits } = options;
  const runId = `${Date.now().toString(36)}${Math.random().toString(36).slice(2, 6)}`;
  // A real crawler would use just `crawler:<host>`; the run id keeps reruns on a shared Redis apart.
  const name = `crawler:${HOST}:${runId}`;

  console.log(
    bold(`Polite crawlers: ${workers} worker processes × ${fetches} fetches, at most ${permits} at once to ${HOST}`),
  );

  // Redis: REDIS_URL, or a throwaway redis-server. When neither works, useRedis() says how to get one and exits 1.
  started.redis = await useRedis();
  if (stopping) return stopping; // interrupted meanwhile
  const { url, client, origin } = started.redis;
  const version = /redis_version:(\S+)/.exec(await client.info('server'))?.[1] ?? '?';
  console.log(`Redis ${version} at ${redact(url)} (${origin})`);

  sem = new Semaphore(name, { redis: client, resources: permits, expiration: 60_000 });
  await sem.existsOrCreate();
  const initialTokens = await sem.allTokens();
  console.log(`Semaphore "${name}": tokens [${initialTokens.join(', ')}]\n`);

  // Workers: start them all, wait until each is connected, then let them go at the same moment.
  // A bound on the whole run however it goes: twice the time every fetch would take one after another.
  const limitMs = 8000 + (2 * workers * fetches * 430) / permits;
  deadlineTimer = setTimeout(() => {
    console.error(red(`\nThe demo did not finish within ${Math.round(limitMs / 1000)} s; stopping.`));
    void finish(1);
  }, limitMs);

  // How long one lock() may wait before its worker gives up: long enough to wait for everyone else.
  const lockTimeoutMs = Math.max(10_000, (2 * workers * 430) / permits);
  const run = new Run(permits);
  const allReady = []; // each worker's first message ('ready'), or its exit
  const allDone = [];
  for (let id = 1; id <= workers; id++) {
    const child = fork(WORKER_FILE, [JSON.stringify({ id, name, url, permits, fetches, lockTimeoutMs })], {
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const worker = { id, child, failed: undefined };
    started.workers.set(id, worker);
    allReady.push(
      new Promise((resolve) => {
        child.once('message', resolve);
        child.once('exit', resolve);
      }),
    );
    allDone.push(
      new Promise((resolve) => {
        child.on('message', (message) => {
          if (message.type === 'failed') worker.failed = message.message;
          else run.record(id, message);
        });
        child.once('exit', (code, signal) => {
          if (code !== 0 && !worker.failed) worker.failed = `worker ${id} exited with ${signal ?? `code ${code}`}`;
          resolve();
        });
      }),
    );
  }
  await Promise.all(allReady);
  if (stopping) return stopping; // interrupted, or out of time: finish() is already on it
  if (![...started.workers.values()].some((worker) => worker.failed)) {
    run.start();
    for (const { child } of started.workers.values()) if (child.connected) child.send({ type: 'go' });
    await Promise.all(allDone);
  }
  const wallMs = now() - run.t0;
  if (stopping) return stopping;
  if (reportFailures(workers)) return finish(1);

  // The semaphore as Redis has it now: every token should be back.
  const endTokens = await sem.allTokens();
  const available = await sem.availableCount();
  const ok = printSummary({ run, workers, fetches, permits, endTokens, available, initialTokens, wallMs });
  return finish(ok ? 0 : 1);
}

/** Prints what went wrong with workers that failed or exited early; true if any did. */
function reportFailures(workers) {
  const failures = [...started.workers.values()].filter((worker) => worker.failed);
  if (failures.length === 0) return false;
  for (const worker of failures) console.error(red(worker.failed));
  console.error(red(`\nFAILED: ${failures.length} of ${workers} workers did not finish.`));
  return true;
}

// ---------------------------------------------------------------------------------------------------
// What the workers report, live and in the summary

class Run {
  constructor(permits) {
    this.permits = permits;
    this.t0 = now();
    /** One entry per lock() call: worker, fetch, token, and its three timestamps. */
    this.attempts = new Map();
    /** Live view: token → worker id, and the workers waiting, in the order they started. */
    this.holders = new Map();
    this.waiting = [];
  }

  start() {
    this.t0 = now();
  }

  record(id, message) {
    if (!['waiting', 'acquired', 'released'].includes(message.type)) return;
    const key = `${id}:${message.fetch}`;
    const attempt = this.attempts.get(key) ?? { worker: id, fetch: message.fetch };
    this.attempts.set(key, attempt);
    let what;
    let warning = '';
    if (message.type === 'waiting') {
      attempt.tWait = message.t;
      this.waiting.push(id);
      what = yellow('waiting'.padEnd(18));
    } else if (message.type === 'acquired') {
      attempt.tAcquired = message.t;
      attempt.token = message.token;
      this.waiting.splice(this.waiting.indexOf(id), 1);
      const holder = this.holders.get(message.token);
      if (holder !== undefined) warning = red(`  !! token ${message.token} is also held by worker ${holder}`);
      this.holders.set(message.token, id);
      if (this.holders.size > this.permits) warning += red(`  !! ${this.holders.size} holders`);
      what = green(`acquired token ${message.token}`.padEnd(18));
    } else {
      attempt.tReleased = message.t;
      if (this.holders.get(message.token) === id) this.holders.delete(message.token);
      what = cyan(`released token ${message.token}`.padEnd(18));
    }
    const holders = [...this.holders]
      .sort(([a], [b]) => a.localeCompare(b, 'en', { numeric: true }))
      .map(([token, worker]) => `w${worker}:t${token}`);
    const line =
      `${seconds(message.t - this.t0)}  worker ${String(id).padEnd(2)}  ${what}  ` +
      `holders: ${`[${holders.join(', ')}]`.padEnd(6 + 7 * this.permits)}  ` +
      dim(`waiting: [${this.waiting.map((w) => `w${w}`).join(', ')}]`);
    console.log(line + warning);
  }

  /** Every lock() call that got its token and gave it back, oldest wait first. */
  completed() {
    return [...this.attempts.values()]
      .filter((a) => a.tWait !== undefined && a.tAcquired !== undefined && a.tReleased !== undefined)
      .sort((a, b) => a.tWait - b.tWait);
  }
}

/**
 * The most fetches in flight at once. Each [acquired, released] interval lies inside the real holding
 * time (see crawler-worker.js), so this never over-counts; at equal times a release counts first.
 */
function maxConcurrency(attempts) {
  const edges = attempts.flatMap((a) => [
    { t: a.tAcquired, delta: +1 },
    { t: a.tReleased, delta: -1 },
  ]);
  edges.sort((x, y) => x.t - y.t || x.delta - y.delta);
  let current = 0;
  let max = 0;
  let at = 0;
  for (const edge of edges) {
    current += edge.delta;
    if (current > max) [max, at] = [current, edge.t];
  }
  return { max, at };
}

/** Pairs of fetches that held the same token at the same time (should be none). */
function sharedTokens(attempts) {
  const byToken = new Map();
  for (const a of attempts) byToken.set(a.token, [...(byToken.get(a.token) ?? []), a]);
  const clashes = [];
  for (const list of byToken.values()) {
    list.sort((x, y) => x.tAcquired - y.tAcquired);
    for (let i = 1; i < list.length; i++) {
      if (list[i].tAcquired < list[i - 1].tReleased) clashes.push([list[i - 1], list[i]]);
    }
  }
  return clashes;
}

/** Whether a lock() call had to queue: another fetch gave its token back while it waited. */
function hadToQueue(attempt, attempts) {
  return attempts.some((b) => b !== attempt && attempt.tWait < b.tReleased && b.tReleased < attempt.tAcquired);
}

function workerIds(attempts) {
  return [...new Set(attempts.map((a) => a.worker))];
}

function percentile(values, p) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.max(0, Math.ceil((p / 100) * sorted.length) - 1)];
}

function printSummary({ run, workers, fetches, permits, endTokens, available, initialTokens, wallMs }) {
  const attempts = run.completed();
  const expected = workers * fetches;
  const problems = [];
  const row = (label, value) => console.log(`  ${label.padEnd(19)}${value}`);
  const mark = (good) => (good ? green('✓') : red('✗'));

  console.log(bold('\nSummary'));

  row(
    'fetches',
    `${attempts.length} of ${expected} (${workers} workers × ${fetches}) ${mark(attempts.length === expected)}`,
  );
  if (attempts.length !== expected) problems.push(`${expected - attempts.length} fetches are missing`);

  const { max, at } = maxConcurrency(attempts);
  row(
    'max concurrency',
    `${max} of ${permits} permits (first reached at ${seconds(at - run.t0).trim()}, from acquired/released events) ${mark(max <= permits)}`,
  );
  if (max > permits) problems.push(`${max} fetches overlapped, more than ${plural(permits, 'permit')} allow`);

  const clashes = sharedTokens(attempts);
  row(
    'token sharing',
    clashes.length === 0
      ? `none: no token was held by two fetches at once ${mark(true)}`
      : `${clashes.length} overlaps, e.g. token ${clashes[0][0].token} held by w${clashes[0][0].worker} and w${clashes[0][1].worker} ${mark(false)}`,
  );
  if (clashes.length > 0) problems.push(`${clashes.length} times a token was held by two fetches at once`);

  const sortedTokens = [...endTokens].sort((a, b) => a.localeCompare(b, 'en', { numeric: true }));
  const distinct = new Set(endTokens).size === endTokens.length;
  const seen = [...new Set(attempts.map((a) => a.token))].filter((token) => !endTokens.includes(token));
  const tokensOk = available === permits && endTokens.length === permits && distinct && seen.length === 0;
  row(
    'tokens at the end',
    `${available} of ${permits} available, allTokens() = [${sortedTokens.join(', ')}] ${mark(tokensOk)}`,
  );
  if (!tokensOk) {
    problems.push(
      `Redis has ${available} of ${permits} tokens available and these tokens: [${sortedTokens.join(', ')}]` +
        ` (at the start: [${initialTokens.join(', ')}]${seen.length ? `; used but now gone: [${seen.join(', ')}]` : ''})`,
    );
  }

  // Fairness: among the lock calls that had to queue, the order they were served in against the
  // order they started waiting. Reported, never asserted: calls that start a few ms apart race to
  // Redis (what counts is the order their BLMOVE reaches it, which no client clock sees), and tokens
  // released at the same moment reach their waiters in either order.
  const queued = attempts.filter((a) => hadToQueue(a, attempts));
  const served = [...queued].sort((a, b) => a.tAcquired - b.tAcquired);
  const overtaken = []; // [started first, served first]
  let nearTies = 0;
  for (const a of queued) {
    for (const b of queued) {
      if (!(a.tWait < b.tWait && b.tAcquired < a.tAcquired)) continue;
      if (b.tWait - a.tWait < RACE_MS || a.tAcquired - b.tAcquired < SAME_MOMENT_MS) nearTies++;
      else overtaken.push([a, b]);
    }
  }
  if (queued.length === 0) {
    row('FIFO', `no lock call had to queue (${plural(permits, 'permit')} were enough for everyone)`);
  } else {
    row(
      'FIFO',
      `${queued.length} of ${attempts.length} lock calls had to queue; ` +
        (overtaken.length === 0
          ? `served in the order they started waiting ${mark(true)}`
          : yellow(`${overtaken.length} served before an earlier waiter (reported, not a failure)`)),
    );
  }
  const shown = 36;
  const list = (items) =>
    items
      .slice(0, shown)
      .map((a) => `w${a.worker}`)
      .join(' ') + (items.length > shown ? ' …' : '');
  if (queued.length > 0) {
    row('', dim(`started waiting: ${list(queued)}`));
    row('', dim(`served:          ${list(served)}`));
  }
  // A process's first blocking wait opens its dedicated connection before it joins Redis' queue.
  const firstWait = new Set(workerIds(queued).map((id) => queued.find((a) => a.worker === id)));
  for (const [late, early] of overtaken.slice(0, 3)) {
    row(
      '',
      yellow(
        `w${late.worker} (fetch ${late.fetch}) started waiting ${millis(early.tWait - late.tWait)} before ` +
          `w${early.worker} (fetch ${early.fetch}) but got its token ${millis(late.tAcquired - early.tAcquired)} later`,
      ) + (firstWait.has(late) ? dim(` (its first wait: opens a blocking connection before queueing)`) : ''),
    );
  }
  if (overtaken.length > 3) row('', yellow(`… and ${overtaken.length - 3} more`));
  if (nearTies > 0) {
    row(
      '',
      dim(
        `${nearTies} near-${nearTies === 1 ? 'tie' : 'ties'} not counted: started < ${RACE_MS} ms or served < ${SAME_MOMENT_MS} ms apart`,
      ),
    );
  }

  console.log(`  ${'wait per worker'.padEnd(19)}${dim('worker  fetches       p50       max')}`);
  for (let id = 1; id <= workers; id++) {
    const waits = attempts.filter((a) => a.worker === id).map((a) => a.tAcquired - a.tWait);
    if (waits.length === 0) continue;
    row(
      '',
      `${`w${id}`.padEnd(6)}  ${String(waits.length).padStart(7)}  ${millis(percentile(waits, 50)).padStart(8)}  ${millis(Math.max(...waits)).padStart(8)}`,
    );
  }
  row('wall time', `${(wallMs / 1000).toFixed(2)} s`);

  if (problems.length === 0) {
    const back = permits === 1 ? 'the token is back' : `all ${permits} tokens are back`;
    console.log(`\n${green(bold(`OK: never more than ${plural(permits, 'fetch')} at once, and ${back}.`))}`);
    return true;
  }
  for (const problem of problems) console.error(red(`FAILED: ${problem}`));
  return false;
}

main().catch((error) => {
  console.error(red(`Unexpected error: ${error?.stack ?? error}`));
  void finish(1);
});
