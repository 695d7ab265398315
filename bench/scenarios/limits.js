'use strict';
// Large semaphores and many holders (README "Limits"): how long creating 100,000 and 1,000,000
// tokens takes and how long another client waits for a PING meanwhile; the same for a re-creation
// after EXISTS was lost; and the latency of lock + unlock (a hit) and of lock(0) (a miss, which runs
// the stale-holder reclaim) with 0 to 10,000 other tokens held, which must not grow with the holders.
// Runs in this process against ctx.url; the library comes from ctx.dist (a built dist/).
const path = require('node:path');
const { createClient } = require('redis');
const { stallsDuring } = require('../../tools/redis-stalls');
const { percentile, median, summary } = require('../lib/metrics');
const f = require('../lib/format');

const CREATE_SIZES = [100_000, 1_000_000];
const HELD = [0, 10, 1_000, 10_000];
/** Tokens held (lock(0)) before EXISTS is deleted, in the re-creation cases. */
const KEPT = 3;
/** Every measured loop also stops at this deadline, whatever its count. */
const LOOP_DEADLINE_MS = 20_000;
/** The PING loop stops after this many PINGs even if the work has not finished. */
const MAX_PINGS = 2_000_000;
/** Concurrent lock(0) calls while the helper takes its tokens. */
const TAKE_CONCURRENCY = 100;

function ms(x) {
  return f.fix(x, 2);
}

/**
 * Runs `work()` while a separate client PINGs in a loop (tools/redis-stalls.js); resolves the work's
 * time, the slowest PING and how long each script Redis ran meanwhile took (ms), which is Redis' own
 * figure (SLOWLOG), whatever the scheduler did to the PINGs.
 */
async function withPingLoop(url, work) {
  const { workMs, pingMs, pings, scriptsMs } = await stallsDuring(url, work, {
    maxPings: MAX_PINGS,
    deadlineMs: LOOP_DEADLINE_MS * 3,
  });
  return {
    workMs,
    pingMs,
    pings,
    scripts: scriptsMs.length,
    scriptMedianMs: median(scriptsMs),
    scriptMaxMs: scriptsMs.length ? Math.max(...scriptsMs) : null,
  };
}

/** `count` lock(0) calls on `sem`, at most TAKE_CONCURRENCY at a time; every one must be a hit. */
async function take(sem, count) {
  const tokens = [];
  for (let done = 0; done < count;) {
    const n = Math.min(TAKE_CONCURRENCY, count - done);
    const got = await Promise.all(Array.from({ length: n }, () => sem.lock(0)));
    if (got.some((token) => token === null))
      throw new Error(`lock(0) missed while taking ${count} tokens of ${sem.resources}`);
    tokens.push(...got);
    done += n;
  }
  return tokens;
}

/** Runs `once()` `warmup` times, then up to `cycles` times (bounded by LOOP_DEADLINE_MS); resolves the measured durations (ms) and the Redis deltas. */
async function measure(ctx, once, { warmup, cycles }) {
  for (let i = 0; i < warmup; i++) await once();
  const before = await ctx.monitor.snapshot();
  const durations = [];
  const deadline = performance.now() + LOOP_DEADLINE_MS;
  for (let i = 0; i < cycles && performance.now() < deadline; i++) {
    const t0 = performance.now();
    await once();
    durations.push(performance.now() - t0);
  }
  const after = await ctx.monitor.snapshot();
  const n = durations.length;
  // A script's usec includes the commands it calls; those are counted again under their own names.
  const scriptUsec = Object.keys(after.usec)
    .filter((name) => /^(eval|evalsha|fcall)/.test(name))
    .reduce((sum, name) => sum + after.usec[name] - (before.usec[name] ?? 0), 0);
  const sorted = [...durations].sort((a, b) => a - b);
  return {
    n,
    p50: percentile(sorted, 50),
    p99: percentile(sorted, 99),
    max: sorted.at(-1) ?? null,
    // INFO's own call is not counted (server.monitor skips it).
    callsPer: n ? (after.calls - before.calls) / n : null,
    scriptUsecPer: n ? scriptUsec / n : null,
  };
}

module.exports = {
  id: 'limits',
  async run(ctx) {
    const { Semaphore } = require(path.join(ctx.dist, 'index.js'));
    const url = ctx.url;
    const run = `${process.pid}-${Date.now().toString(36)}`;
    const dropKeys = (name) => ctx.monitor.deleteMatching(`SEMAPHORE:${name}:*`);
    const admin = createClient({ url });
    admin.on('error', () => undefined);
    await admin.connect();
    const opened = [];
    const open = (name, options) => {
      const sem = new Semaphore(name, { url, ...options });
      opened.push(sem);
      return sem;
    };

    /** Waits (bounded) until Redis has freed the keys dropped before in its background thread. */
    const settle = async () => {
      for (let i = 0; i < 100; i++) {
        const info = String(await admin.sendCommand(['INFO', 'memory']));
        if (Number(/lazyfree_pending_objects:(\d+)/.exec(info)?.[1] ?? 0) === 0) return;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    };

    const creation = Object.fromEntries(CREATE_SIZES.map((size) => [size, []]));
    const recreation = Object.fromEntries(CREATE_SIZES.map((size) => [size, []]));
    const hits = Object.fromEntries(HELD.map((held) => [held, []]));
    const misses = Object.fromEntries(HELD.map((held) => [held, []]));
    const failures = [];
    try {
      // 1 and 2: creation, then re-creation after EXISTS is lost with KEPT tokens held.
      for (let rep = 0; rep < ctx.reps; rep++) {
        for (const size of CREATE_SIZES) {
          const name = `bench:limits:${size}:${run}:${rep}`;
          const sem = open(name, { resources: size });
          await settle();
          ctx.log(`  rep ${rep + 1}: creating ${f.num(size)} tokens…`);
          const created = await withPingLoop(url, () => sem.existsOrCreate());
          const free = Number(await admin.sendCommand(['LLEN', `SEMAPHORE:${name}:AVAILABLE`]));
          creation[size].push(created);
          if (free !== size) failures.push(`creation of ${f.num(size)}: ${f.num(free)} free`);

          const held = await take(sem, KEPT);
          await admin.sendCommand(['DEL', `SEMAPHORE:${name}:EXISTS`]);
          ctx.log(`  rep ${rep + 1}: re-creating ${f.num(size)} tokens (${KEPT} held, EXISTS deleted)…`);
          const recreated = await withPingLoop(url, () => sem.existsOrCreate());
          const after = Number(await admin.sendCommand(['LLEN', `SEMAPHORE:${name}:AVAILABLE`]));
          const grabbed = Number(await admin.sendCommand(['HLEN', `SEMAPHORE:${name}:GRABBED`]));
          recreation[size].push(recreated);
          if (after + grabbed !== size)
            failures.push(`re-creation of ${f.num(size)}: ${f.num(after)} free + ${f.num(grabbed)} held`);
          for (const token of held) await sem.unlock(token);
          await sem.close();
          await dropKeys(name);
        }
      }
      await settle();

      // 3: lock + unlock (hit) and lock(0) (miss) with `held` other tokens held by another instance.
      // Every semaphore is set up first; the repetitions then interleave the cells.
      const cells = [];
      for (const held of HELD) {
        ctx.log(`  taking ${f.num(held)} tokens twice (hit and miss semaphores)…`);
        for (const kind of held > 0 ? ['hit', 'miss'] : ['hit']) {
          const name = `bench:limits:${kind}:${held}:${run}`;
          const resources = kind === 'hit' ? held + 1 : held;
          // staleClientTimeout null: the helper's grants never go stale (indexed in LEASES at +inf)
          // and it runs no refresh timers while the caller is measured.
          const helper = open(name, { resources, staleClientTimeout: null });
          await helper.existsOrCreate();
          await take(helper, held);
          cells.push({ held, kind, name, caller: open(name, { resources }) });
        }
      }
      for (let rep = 0; rep < ctx.reps; rep++) {
        ctx.log(`  rep ${rep + 1}: lock latency…`);
        for (const { held, kind, caller } of cells) {
          const once =
            kind === 'hit'
              ? async () => {
                  const token = await caller.lock();
                  if ((await caller.unlock(token)) === false) throw new Error('unlock resolved false');
                }
              : async () => {
                  if ((await caller.lock(0)) !== null) throw new Error('lock(0) got a token where none is free');
                };
          const m = await measure(ctx, once, ctx.lockCycles);
          if (m.n < ctx.lockCycles.cycles)
            failures.push(`${kind} with ${f.num(held)} held: the loop hit its ${LOOP_DEADLINE_MS / 1000} s deadline`);
          (kind === 'hit' ? hits : misses)[held].push(m);
        }
      }
      for (const { name } of cells) await dropKeys(name);
    } finally {
      await Promise.all(opened.map((sem) => sem.close().catch(() => undefined)));
      await admin.quit().catch(() => admin.disconnect());
    }

    const over = (runs, key) => summary(runs.map((r) => r[key]));
    const createTable = (title, results, what) =>
      [
        `## ${title}\n`,
        what,
        '',
        f.table(
          [
            'tokens',
            'existsOrCreate() wall time (ms)',
            'slowest PING meanwhile (ms)',
            'PINGs answered meanwhile',
            'scripts',
            'script median (ms)',
            'longest script (ms)',
          ],
          CREATE_SIZES.map((size) => [
            f.num(size),
            f.range(over(results[size], 'workMs')),
            f.range(over(results[size], 'pingMs'), ms),
            f.range(over(results[size], 'pings')),
            f.range(over(results[size], 'scripts')),
            f.range(over(results[size], 'scriptMedianMs'), ms),
            f.range(over(results[size], 'scriptMaxMs'), ms),
          ]),
        ),
        '',
      ].join('\n');
    const cell = (runs, key, format) => (runs.length ? f.range(over(runs, key), format) : '—');
    const us = (x) => f.fix(x, 1);
    const calls = (x) => f.fix(x, 1);
    const markdown = [
      `Each figure: median (min–max) over ${ctx.reps} repetition(s).\n`,
      createTable(
        'Creation',
        creation,
        "`new Semaphore(name, { url, resources: N }).existsOrCreate()` on an empty server, while another client (a separate connection, same process) sends PING after PING; the library creates the tokens in batches, one script each. The slowest PING includes this machine's scheduling; the scripts' durations are Redis' own (SLOWLOG, which logs every command during these runs).",
      ),
      createTable(
        'Re-creation after a partial loss',
        recreation,
        `The same semaphore with ${KEPT} tokens held, after \`DEL SEMAPHORE:<name>:EXISTS\`: \`existsOrCreate()\` again. It finds the surviving tokens in batches (held, then free, then inboxes; 10,000 entries per script), then pushes the missing ones in batches.`,
      ),
      '## Lock latency against the number of holders\n',
      `One caller in a loop, ${f.num(ctx.lockCycles.cycles)} calls after ${f.num(ctx.lockCycles.warmup)} of warm-up, per cell and repetition. Another instance (staleClientTimeout null) first takes \`held\` tokens with \`lock(0)\`. Hit: resources = held + 1, so the caller always finds exactly one free token; \`await sem.lock(); await sem.unlock(token)\`. Miss: resources = held, \`lock(0)\` resolves null after the stale-holder reclaim (the LEASES index; no holder is stale). Redis µs: script time per call (INFO commandstats \`usec\` of EVALSHA); Redis calls: every command Redis executed per call, including the ones scripts call.`,
      '',
      f.table(
        [
          'other tokens held',
          'hit: lock + unlock p50 (ms)',
          'p99 (ms)',
          'Redis µs',
          'Redis calls',
          'miss: lock(0) p50 (ms)',
          'p99 (ms)',
          'Redis µs',
          'Redis calls',
        ],
        HELD.map((held) => [
          f.num(held),
          cell(hits[held], 'p50', ms),
          cell(hits[held], 'p99', ms),
          cell(hits[held], 'scriptUsecPer', us),
          cell(hits[held], 'callsPer', calls),
          cell(misses[held], 'p50', ms),
          cell(misses[held], 'p99', ms),
          cell(misses[held], 'scriptUsecPer', us),
          cell(misses[held], 'callsPer', calls),
        ]),
      ),
      '',
    ].join('\n');
    return { id: 'limits', markdown, failures, data: { creation, recreation, hits, misses } };
  },
};
