// Promises, timers and clock reads the library makes per lock + unlock cycle, counted with async_hooks
// and by wrapping performance.now (a count, not a timing).

import { createHook } from 'node:async_hooks';
import { useFixture } from '../support/fixture';
import { ioredisPackage, uniqueName } from '../support/redis';

const fixture = useFixture();

/** Whether the first frame outside Node's internals and this file is the library's (not its client's). */
function startedByLibrary(stack: string): boolean {
  const frame = stack
    .split('\n')
    .slice(1)
    .find((line) => !line.includes('node:') && !line.includes('hot-path-counts.spec'));
  return frame !== undefined && !frame.includes('node_modules');
}

interface Counts {
  promises: number;
  timers: number;
  /** performance.now() calls the library makes. */
  clock: number;
  /** How long the counted run took. */
  seconds: number;
}

/**
 * What `run` creates, per cycle: promises, timers (setTimeout/setInterval) the library itself starts,
 * and its reads of the clock.
 */
async function countPerCycle(cycles: number, run: () => Promise<void>): Promise<Counts> {
  const counts = { promises: 0, timers: 0, clock: 0 };
  const hook = createHook({
    init(_id, type) {
      if (type === 'PROMISE') counts.promises++;
      else if (type === 'Timeout' && startedByLibrary(new Error().stack ?? '')) counts.timers++;
    },
  });
  const started = performance.now();
  const own = Object.getOwnPropertyDescriptor(performance, 'now');
  const now = performance.now.bind(performance);
  performance.now = () => {
    if (startedByLibrary(new Error().stack ?? '')) counts.clock++;
    return now();
  };
  hook.enable();
  try {
    await run();
  } finally {
    hook.disable();
    if (own) Object.defineProperty(performance, 'now', own);
    else delete (performance as { now?: unknown }).now; // the prototype's again
  }
  const seconds = (performance.now() - started) / 1000;
  return { promises: counts.promises / cycles, timers: counts.timers / cycles, clock: counts.clock / cycles, seconds };
}

/**
 * What the library adds per cycle to what its client creates for two bare round trips (4 promises:
 * the client's 2 and the loop's 2 awaits), at most, on node-redis and ioredis alike (the ioredis
 * adapter adds no promise: lib/redis/client/ioredis.ts). Issue 31's targets count the whole cycle,
 * the client's promises included: 8 / 0 uncontended, that is 4 beyond the bare round trips, and
 * 10 / 0 contended, 6 beyond them. Both are met: a call is two promises, its own and one `.then` on
 * its reply (contended, the lock's own is the claim's `.then`, and BLMOVE's reply has the other), and
 * a contended cycle's third command adds its client's promise (see docs/PERFORMANCE.md). A little
 * slack for timers (a process-wide deadline timer re-arms about once a second, the contended loop's
 * interval now and then). Measured at the commit that set these (node-redis v4, v5, v6, ioredis 5
 * and 6): 8.0 / 0 and 9.1 / 0 in all, so 4.0 and 5.1 beyond the bare round trips. Clock reads
 * (`performance.now()`, the library's own, whole): 3 uncontended and 4 contended (one per advance
 * registration kept), with slack for timers that ring meanwhile (more of them on a loaded machine).
 */
const BOUNDS = {
  uncontended: { promises: 4.2, timers: 0.02, clock: 3.5 },
  contended: { promises: 5.4, timers: 0.1, clock: 5 },
};

const CYCLES = 200;

/** Two bare round trips on the semaphores' own client: what any lock + unlock costs at least. */
async function bare(): Promise<Counts> {
  const client = fixture.semaphoreRedis as unknown as {
    ping(): Promise<unknown>;
    sendCommand(args: string[]): Promise<unknown>;
  };
  const ping = ioredisPackage() ? () => client.ping() : () => client.sendCommand(['PING']);
  for (let i = 0; i < 50; i++) await ping();
  return countPerCycle(CYCLES, async () => {
    for (let i = 0; i < CYCLES; i++) {
      await ping();
      await ping();
    }
  });
}

const excess = (library: Counts, lean: Counts): Counts => ({
  promises: library.promises - lean.promises,
  timers: library.timers - lean.timers,
  clock: library.clock,
  seconds: library.seconds,
});

/**
 * The timers per cycle allowed: `bound`, and what a process-wide timer re-arming twice a second
 * adds over the run (not per cycle: a loaded machine runs fewer cycles a second, each then sharing more).
 */
const timersAllowed = (bound: number, own: Counts) => bound + (2 * own.seconds) / CYCLES;

test.each([
  ['lock(0)', 0],
  ['lock()', undefined],
] as const)(
  'an uncontended %s + unlock: promises, timers and clock reads per cycle beyond two bare round trips',
  async (form, timeout) => {
    const sem = fixture.semaphore({ resources: 1 });
    for (let i = 0; i < 50; i++) {
      await sem.lock(timeout);
      await sem.unlock();
    }
    const lean = await bare();
    const library = await countPerCycle(CYCLES, async () => {
      for (let i = 0; i < CYCLES; i++) {
        await sem.lock(timeout);
        await sem.unlock();
      }
    });
    console.log(
      `uncontended ${form}, per cycle: library ${JSON.stringify(library)}, two bare round trips ${JSON.stringify(lean)}`,
    );
    expect(lean.promises).toBeGreaterThan(0);
    const own = excess(library, lean);
    expect(own.timers).toBeLessThanOrEqual(timersAllowed(BOUNDS.uncontended.timers, own));
    expect(own.promises).toBeLessThanOrEqual(BOUNDS.uncontended.promises);
    expect(own.clock).toBeGreaterThan(0);
    expect(own.clock).toBeLessThanOrEqual(BOUNDS.uncontended.clock);
  },
);

test('a contended mutex, 8 instances looping lock + unlock: promises, timers and clock reads per grant beyond two bare round trips', async () => {
  const name = uniqueName();
  const instances = Array.from({ length: 8 }, () => fixture.semaphore({ resources: 1 }, name));
  const loop = async (cycles: number) => {
    await Promise.all(
      instances.map(async (sem) => {
        for (let i = 0; i < cycles; i++) {
          await sem.lock(10_000);
          await sem.unlock();
        }
      }),
    );
  };
  await loop(20);
  const lean = await bare();
  const perGrant = await countPerCycle(CYCLES, () => loop(CYCLES / 8));
  console.log(
    `contended (mutex, 8 instances), per grant: ${JSON.stringify(perGrant)}, two bare round trips ${JSON.stringify(lean)}`,
  );
  const own = excess(perGrant, lean);
  expect(own.timers).toBeLessThanOrEqual(timersAllowed(BOUNDS.contended.timers, own));
  expect(own.promises).toBeLessThanOrEqual(BOUNDS.contended.promises);
  expect(own.clock).toBeGreaterThan(0);
  expect(own.clock).toBeLessThanOrEqual(BOUNDS.contended.clock);
});
