/**
 * Grant identity: every grant is recorded as GRABBED[token] = "<stamp> <grant id> <fence> <lease ms>",
 * and a release or refresh acts only when GRABBED names its grant. Exercised for real, with no mocks:
 * a refresh crossing a release (thousands of cycles), a release whose reply is lost in our TCP proxy
 * (spec/support/proxy.ts) while another caller of the same instance takes the token, an event-loop
 * stall during which a watchdog in another process (spec/support/watchdog-worker.js) reclaims the
 * token for a waiter of the same instance, and 10 s (6 s after the v4 pass) of connection resets under load with a history
 * check (spec/support/history.ts) and an exact census (spec/support/census.ts).
 */
import { fork, spawnSync, type ChildProcess } from 'node:child_process';
import { join } from 'node:path';
import { createClient } from 'redis';
import { LockLostError, Semaphore, type LostEvent, type SemaphoreOptions } from '../../lib';
import { scripts } from '../../lib/redis/registry';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { checkHistory, type HistoryEvent } from '../support/history';
import { PrivateServers } from '../support/private-servers';
import { carried, carriedCall, FaultProxy, type Filter } from '../support/proxy';
import type { RedisServer } from '../support/redis-server';
import { isFirstPass, sleep, uniqueName, until, type Client } from '../support/redis';

let server: RedisServer;
let admin: Client;
let proxy: FaultProxy;
const shared = new PrivateServers(); // the file's redis-server and its admin client
const opened = new PrivateServers(); // what each test makes

beforeAll(async () => {
  ({ server, admin } = await shared.start());
  // Loaded up front, so the first EVALSHA of a release runs rather than answer NOSCRIPT: the faults
  // below must hit a release that ran (or one that never reached Redis), not a NOSCRIPT round trip.
  for (const script of Object.values(scripts)) await admin.scriptLoad(script.source);
});
beforeEach(async () => {
  proxy = await FaultProxy.start(server.port);
});
afterEach(async () => {
  await opened.close();
  await Promise.all(proxiedClients.splice(0).map(closeBounded));
  await proxy.close();
});
afterAll(() => shared.close());

const grabbedKey = (name: string) => `SEMAPHORE:${name}:GRABBED`;

/** What `promise` settles to, or `fallback` if it has not within `ms` (the timer does not outlive the race). */
async function within<T, F>(promise: Promise<T>, ms: number, fallback: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<F>((resolve) => (timer = setTimeout(() => resolve(fallback), ms)));
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * A client through the proxy, closed after the test (after the semaphores on it). Its QUIT is bounded:
 * node-redis 5.12 sometimes never settles a QUIT sent around a reset (seen here with the proxy alone).
 */
const proxiedClients: Client[] = [];
async function proxiedClient(): Promise<Client> {
  const client = createClient({ url: proxy.url });
  client.on('error', () => undefined);
  await client.connect();
  proxiedClients.push(client);
  return client;
}

async function closeBounded(client: Client): Promise<'quit' | 'quit hung' | 'not ready'> {
  const index = proxiedClients.indexOf(client);
  if (index >= 0) proxiedClients.splice(index, 1);
  const ready = client.isReady;
  const quit = ready
    ? client.quit().then(
        () => true,
        () => false,
      )
    : Promise.resolve(false);
  if (await within(quit, 5000, false)) return 'quit';
  try {
    await client.disconnect();
  } catch {
    // already closed
  }
  return ready ? 'quit hung' : 'not ready';
}

/** The grant id and fence a GRABBED record names ("<stamp> <grant id> <fence> <lease ms>"). */
function grantOf(record: string | null | undefined): { id: string; fence: number } | null {
  const fields = record?.split(' ') ?? [];
  return fields.length >= 4 ? { id: fields[1]!, fence: Number(fields[2]) } : null;
}

/** How many connections Redis has blocked in BLMOVE. */
async function blockedInBlmove(): Promise<number> {
  const list = await admin.clientList();
  return list.filter((client) => client.cmd === 'blmove' && client.flags.includes('b')).length;
}

/** Every token back, nobody waiting (abandoned marks aside), no inbox key left. */
async function expectIdle(name: string, resources: number): Promise<void> {
  const census = await takeCensus(admin, name);
  expect({
    problems: censusProblems(census, resources, { idle: true, marksAllowed: true }),
    census: describeCensus(census),
  }).toEqual({
    problems: [],
    census: expect.any(String),
  });
  expect(await admin.keys(`SEMAPHORE:${name}:INBOX:*`)).toEqual([]);
}

/** Records the `lost` events of `sem`. */
function lossLog(sem: Semaphore): LostEvent[] {
  const losses: LostEvent[] = [];
  sem.on('lost', (event) => void losses.push(event));
  return losses;
}

const uniform = (min: number, max: number) => min + Math.random() * (max - min);

describe('a refresh that crosses a release', () => {
  test('is never reported as a loss, over thousands of lock/unlock cycles with refreshes every 33 ms', async () => {
    const CYCLES = 2000;
    const BUDGET_MS = 15_000;
    const CALLERS = 6;
    const resources = 3;
    const name = uniqueName('crossing');
    let onLockLostCalls = 0;
    const sem = opened.semaphore(name, {
      url: server.url,
      resources,
      staleClientTimeout: 100, // the shortest lease: refreshes every 33 ms
      onLockLost: () => void onLockLostCalls++,
    });
    // Where each acquisition (by fence) stands: released = its holder began giving it back.
    const releasing = new Set<number>();
    const falseLosses: Array<{ fence: number; reason: string; why: string }> = [];
    const heldLosses: LostEvent[] = []; // reported during a hold: leases that ran out on a loaded machine
    const checks: Array<Promise<void>> = [];
    const events = lossLog(sem);
    sem.on('lost', (event) => {
      if (releasing.has(event.fence)) {
        falseLosses.push({
          fence: event.fence,
          reason: event.reason,
          why: 'reported after its holder began to release it',
        });
        return;
      }
      if (event.reason !== 'reclaimed') return void heldLosses.push(event);
      // 'reclaimed' must mean Redis no longer records this grant: read GRABBED at once (nothing this
      // holder does can end it meanwhile: a release of a reclaimed holding never reaches Redis).
      checks.push(
        admin.hGet(grabbedKey(name), event.token).then((record) => {
          if (grantOf(record)?.fence === event.fence) {
            falseLosses.push({
              fence: event.fence,
              reason: event.reason,
              why: 'reported while GRABBED still recorded the grant',
            });
          } else heldLosses.push(event);
        }),
      );
    });
    // Refreshes counted by Redis itself: each grant writes GRABBED once (HSET), each refresh once more.
    await admin.configSet('notify-keyspace-events', 'Kh');
    const subscriber = admin.duplicate();
    subscriber.on('error', () => undefined);
    await subscriber.connect();
    let grabbedWrites = 0;
    await subscriber.subscribe(`__keyspace@0__:${grabbedKey(name)}`, (message) => {
      if (message === 'hset') grabbedWrites++;
    });

    let cycles = 0;
    let abortedSignals = 0;
    // unlock(token) or lease.release() resolving false while Redis still records that very grant: the
    // call ended nothing, and the caller, told its token was gone, will never give it back.
    const leaks: string[] = [];
    const leakedFences = new Set<number>();
    const checkFalse = async (what: string, token: string, fence: number, heldMs: number) => {
      const record = await admin.hGet(grabbedKey(name), token);
      if (grantOf(record)?.fence !== fence) return; // over in Redis too: a real loss
      leakedFences.add(fence);
      const lost = events.filter((e) => e.fence === fence).map((e) => e.reason);
      leaks.push(
        `${what} of token ${token} (fence ${fence}, held ${Math.round(heldMs)} ms, losses reported ${JSON.stringify(lost)}) resolved false; GRABBED still records it: "${record}"`,
      );
    };
    const started = performance.now();
    const more = () => cycles < CYCLES && performance.now() - started < BUDGET_MS;
    // Holds up to 1.25 refresh intervals, so that many refreshes cross a release.
    const hold = () => sleep(Math.random() < 0.2 ? 0 : uniform(0, 42));
    const caller = async (index: number) => {
      for (let round = 0; more(); round++) {
        cycles++;
        const form = (index + round) % 3;
        if (form === 0) {
          const token = await sem.lock();
          const fence = sem.fence(token)!;
          const at = performance.now();
          await hold();
          releasing.add(fence);
          if ((await sem.unlock(token)) === false)
            await checkFalse('unlock(token)', token, fence, performance.now() - at);
        } else if (form === 1) {
          // A token lost during the hold makes lock(fn) reject with LockLostError (its signal aborted).
          const aborted = await sem
            .lock(async (_token, signal, fence) => {
              await hold();
              releasing.add(fence); // the callback form releases as soon as this returns
              return signal.aborted;
            })
            .catch((error: unknown) => {
              if (error instanceof LockLostError) return true;
              throw error;
            });
          if (aborted) abortedSignals++;
        } else {
          const lease = await sem.acquire();
          const at = performance.now();
          await hold();
          if (lease.signal.aborted) abortedSignals++;
          releasing.add(lease.fence);
          if (!(await lease.release()))
            await checkFalse('lease.release()', lease.token, lease.fence, performance.now() - at);
        }
      }
    };
    try {
      await Promise.all(Array.from({ length: CALLERS }, (_, i) => caller(i)));
      await sleep(100); // refresh answers still on their way after the last release
      await Promise.all(checks);
    } finally {
      await subscriber.quit().catch(() => subscriber.disconnect());
    }
    const elapsed = performance.now() - started;
    const stats = sem.stats();
    const refreshes = grabbedWrites - stats.acquisitions;
    console.log(
      `false losses: ${falseLosses.length} of ${cycles} cycles (${(elapsed / 1000).toFixed(1)} s, ` +
        `${refreshes} refreshes, ${stats.losses} losses reported in all, ${heldLosses.length} of them during a hold: ` +
        `${heldLosses.map((l) => l.reason).join(',') || 'none'})`,
    );
    if (leaks.length > 0)
      console.log(`releases that resolved false while their grant stayed held: ${leaks.length}\n${leaks.join('\n')}`);
    const described = falseLosses.map(
      ({ fence, reason, why }) =>
        `fence ${fence} (${reason}) ${why}` +
        (leakedFences.has(fence) ? ' (its unlock(token) had resolved false and left its grant held: see below)' : ''),
    );
    expect(leaks).toEqual([]);
    expect(described).toEqual([]);
    // Every report agrees: onLockLost, 'lost' events and stats() count the same losses.
    expect(onLockLostCalls).toBe(events.length);
    expect(stats.losses).toBe(events.length);
    expect(abortedSignals).toBeLessThanOrEqual(events.length);
    // A lease running out during a 0–42 ms hold takes a stall of ~55 ms: rare even on a loaded machine.
    expect(heldLosses.length).toBeLessThanOrEqual(cycles / 50);
    // The run did what it is about: many cycles, refreshes running through them, every release counted.
    expect(cycles).toBeGreaterThanOrEqual(500);
    expect(refreshes).toBeGreaterThanOrEqual(cycles / 20);
    expect(stats.acquisitions).toBe(cycles);
    expect(stats.releases).toBeGreaterThanOrEqual(cycles - heldLosses.length);
    await sem.close(); // its idle spare registrations go with it
    await expectIdle(name, resources);
  }, 40_000);
});

describe('a release whose reply is lost', () => {
  /** The semaphore's main connection through the proxy: the one that carried tryLock (blocking ones carry BLMOVE). */
  const mainConnection: Filter = (connection) =>
    carriedCall(scripts.tryLock)(connection) && !carried('BLMOVE')(connection);

  /** A mutex held by one caller of `sem`, and a second caller of the same instance blocked behind it. */
  async function twoCallers(sem: Semaphore) {
    const first = await sem.lock(0);
    expect(first).toBe('0');
    const firstFence = sem.fence('0')!;
    const second = sem.lock(30_000);
    await until(
      async () => (await blockedInBlmove()) === 1 && proxy.connections(carried('BLMOVE')).length === 1,
      10_000,
      'the second caller to block',
    );
    expect(proxy.connections(mainConnection)).toHaveLength(1);
    return { firstFence, second };
  }

  /** The second caller holds the token: a third client cannot take it, and its instance says it holds. */
  async function expectSecondHolds(name: string, sem: Semaphore, secondFence: number): Promise<void> {
    const third = opened.semaphore(name, { url: server.url });
    expect(await third.lock(0)).toBeNull();
    expect(await sem.isLocked()).toBe(true);
    expect(await sem.isLocked('0')).toBe(true);
    expect(grantOf(await admin.hGet(grabbedKey(name), '0'))?.fence).toBe(secondFence);
    expect(sem.fence('0')).toBe(secondFence);
  }

  test.each(['that ran but whose reply is dropped', 'whose request is swallowed before Redis'] as const)(
    'a release %s, then its connection reset: the retried unlock resolves, and the second caller of the same instance keeps the token',
    async (fault) => {
      const name = uniqueName('grant');
      const sem = opened.semaphore(name, { redis: await proxiedClient() });
      const losses = lossLog(sem);
      const { firstFence, second } = await twoCallers(sem);
      if (fault === 'that ran but whose reply is dropped') expect(proxy.dropReplies(mainConnection)).toBe(1);
      else expect(proxy.blackhole(mainConnection)).toBe(1);
      const unlocking = sem.unlock('0').then(
        (value) => ({ value }),
        (error: Error) => ({ error: error.message }),
      );
      if (fault === 'that ran but whose reply is dropped') {
        // The release ran (the token went to the blocked caller, through its own connection), and
        // its reply was swallowed.
        expect(await second).toBe('0');
        await until(() => proxy.swallowed.toClient > 0, 5000, 'the release reply to be dropped');
      } else {
        await until(() => proxy.connections(carriedCall(scripts.release)).length === 1, 5000, 'the release to be sent');
        await sleep(200);
        // The request never reached Redis: the first caller still holds.
        expect(grantOf(await admin.hGet(grabbedKey(name), '0'))?.fence).toBe(firstFence);
      }
      expect(proxy.cut(mainConnection)).toBe(1);
      // Retried on the reconnected client: it ran (or runs now) and resolves the pool's length.
      expect(await unlocking).toEqual({ value: expect.any(Number) });
      expect(await second).toBe('0');
      const secondFence = sem.fence('0')!;
      expect(secondFence).toBeGreaterThan(firstFence);
      await expectSecondHolds(name, sem, secondFence);
      expect(losses).toEqual([]);
      expect(await sem.unlock('0')).toBe(1);
      await expectIdle(name, 1);
    },
    30_000,
  );

  test('the second caller unlocks while the first caller’s release is still being retried: its own grant ends', async () => {
    const name = uniqueName('grant');
    const sem = opened.semaphore(name, { redis: await proxiedClient() });
    const losses = lossLog(sem);
    const { firstFence, second } = await twoCallers(sem);
    proxy.dropReplies(mainConnection);
    const firstUnlock = sem.unlock('0').then(
      (value) => ({ value }),
      (error: Error) => ({ error: error.message }),
    );
    expect(await second).toBe('0'); // the first release ran; its reply is lost
    const secondFence = sem.fence('0')!;
    expect(secondFence).toBeGreaterThan(firstFence);
    await until(() => proxy.swallowed.toClient > 0, 5000, 'the release reply to be dropped');
    // The connection is reset and Redis is out of reach for a moment: the first caller's release
    // waits to be retried while the second caller, done with the token, unlocks it.
    proxy.refuse(true);
    expect(proxy.cut(mainConnection)).toBe(1);
    await sleep(20); // the client has seen the reset: what it is sent now waits in its offline queue
    const secondUnlock = sem.unlock('0').then(
      (value) => ({ value }),
      (error: Error) => ({ error: error.message }),
    );
    await sleep(300);
    proxy.refuse(false);
    const [first, secondResult] = await Promise.all([firstUnlock, secondUnlock]);
    const left = await admin.hGet(grabbedKey(name), '0');
    console.log(
      `first caller's unlock: ${JSON.stringify(first)}, second caller's unlock: ${JSON.stringify(secondResult)}, ` +
        `GRABBED[0] after both: "${left}" (second caller's fence ${secondFence}), isLocked() ${await sem.isLocked()}`,
    );
    // Each caller's unlock ends its own grant: the first one's had run, the second one's runs now.
    expect({ first, second: secondResult, stillHeldBy: grantOf(left)?.fence ?? null }).toEqual({
      first: { value: expect.any(Number) },
      second: { value: expect.any(Number) },
      stillHeldBy: null,
    });
    expect(await sem.isLocked()).toBe(false);
    expect(losses).toEqual([]);
    await sem.close();
    await expectIdle(name, 1);
  }, 30_000);

  test('a caller that retries unlock(token) itself after a rejection ends nothing of the second caller', async () => {
    const name = uniqueName('grant');
    // The semaphore's own client fails fast while Redis cannot be reached (no offline queue).
    const sem = opened.semaphore(name, { url: proxy.url });
    const losses = lossLog(sem);
    const { firstFence, second } = await twoCallers(sem);
    proxy.dropReplies(mainConnection);
    const unlocking = sem.unlock('0').then(
      (value) => ({ value }),
      (error: Error) => ({ error: error.name }),
    );
    expect(await second).toBe('0'); // the release ran: the token went to the second caller
    const secondFence = sem.fence('0')!;
    await until(() => proxy.swallowed.toClient > 0, 5000, 'the release reply to be dropped');
    // Redis unreachable for longer than the release's own retries (about 3 s): the unlock rejects.
    proxy.refuse(true);
    expect(proxy.cut(mainConnection)).toBe(1);
    const started = performance.now();
    expect(await unlocking).toEqual({ error: 'SemaphoreRedisError' });
    console.log(`unlock rejected after ${Math.round(performance.now() - started)} ms of retries`);
    proxy.refuse(false);
    // The caller's own retries: bounded in count and time.
    let retried: { value: number | false } | undefined;
    const errors: string[] = [];
    for (let attempt = 0; attempt < 20 && retried === undefined && performance.now() - started < 20_000; attempt++) {
      try {
        retried = { value: await sem.unlock('0') };
      } catch (error) {
        errors.push((error as Error).message);
        await sleep(250);
      }
    }
    console.log(
      `the caller's unlock retry resolved ${JSON.stringify(retried)} after ${errors.length} more rejection(s)`,
    );
    // The instance holds '0' twice (the first caller's ended grant, the second caller's live one):
    // unlock('0') ends the one Redis no longer records, which is over, so it resolves false.
    expect(retried).toEqual({ value: false });
    await expectSecondHolds(name, sem, secondFence);
    expect(secondFence).toBeGreaterThan(firstFence);
    expect(losses).toEqual([]);
    expect(await sem.unlock('0')).toBe(1);
    await expectIdle(name, 1);
  }, 40_000);
});

describe("a caller's late unlock(token) racing another caller's grant of that token, on one shared instance", () => {
  test('300 rounds, the unlock 0–3 ms around the grant: never ends a grant of acquire() or lock(fn), nor of a lock() not yet resolved', async () => {
    const ROUNDS = 300;
    const name = uniqueName('late-unlock');
    const shared = opened.semaphore(name, { url: server.url, resources: 1 }); // callers A and B
    const worker = opened.semaphore(name, { url: server.url, resources: 1 });
    const rival = opened.semaphore(name, { url: server.url, resources: 1 });
    const losses = lossLog(shared);
    const problems: string[] = [];
    const counts = { acquire: 0, callback: 0, lockBefore: 0, lockAfter: 0 };
    const deadline = performance.now() + 60_000; // bounded: the rounds take a few seconds
    for (let round = 0; round < ROUNDS && performance.now() < deadline; round++) {
      // A takes the token, hands it over, and the worker releases the handle.
      const a = await shared.acquire();
      expect(await worker.release(a.handOver())).toBe(true);
      const form = (['acquire', 'callback', 'lock'] as const)[round % 3]!;
      // A's late unlock of the token, 0–3 ms after B asks for it.
      let bResolved = false;
      let lateBeforeB = false;
      const late = sleep(uniform(0, 3)).then(() => {
        lateBeforeB = !bResolved;
        return shared.unlock(a.token);
      });
      let bGrant: string | undefined;
      if (form === 'acquire') {
        const b = await shared.acquire();
        bResolved = true;
        const unlocked = await late;
        bGrant = b.grantId;
        const held = grantOf(await admin.hGet(grabbedKey(name), b.token))?.id;
        if (unlocked !== false || held !== b.grantId || b.signal.aborted || (await rival.lock(0)) !== null)
          problems.push(`round ${round} (acquire): unlock ${unlocked}, GRABBED ${held} vs ${b.grantId}`);
        if (!(await b.release())) problems.push(`round ${round}: B's release found its grant gone`);
        counts.acquire++;
      } else if (form === 'callback') {
        const outcome = await shared.lock(async (token, signal) => {
          const unlocked = await late;
          const held = grantOf(await admin.hGet(grabbedKey(name), token))?.id;
          return { unlocked, held, aborted: signal.aborted, rival: await rival.lock(0) };
        });
        if (outcome.unlocked !== false || outcome.held === undefined || outcome.aborted || outcome.rival !== null)
          problems.push(`round ${round} (lock(fn)): ${JSON.stringify(outcome)}`);
        counts.callback++;
      } else {
        const token = await shared.lock();
        bResolved = true;
        bGrant = grantOf(await admin.hGet(grabbedKey(name), token))?.id;
        const unlocked = await late;
        if (lateBeforeB) {
          // Made before B received the token: cannot be B's call, so it must not end B's grant.
          const held = grantOf(await admin.hGet(grabbedKey(name), token))?.id;
          if (unlocked !== false || held !== bGrant)
            problems.push(`round ${round} (lock(), unlock first): unlock ${unlocked}, GRABBED ${held} vs ${bGrant}`);
          if ((await shared.unlock(token)) === false) problems.push(`round ${round}: B's unlock found nothing`);
          counts.lockBefore++;
        } else {
          // The documented case: after B's lock() resolved the token, A's unlock(token) is B's too.
          if (unlocked === false && (await shared.unlock(token)) === false)
            problems.push(`round ${round}: nobody's unlock ended B's grant`);
          counts.lockAfter++;
        }
      }
    }
    console.log(`late unlock race: ${JSON.stringify(counts)}`);
    expect(problems).toEqual([]);
    expect(losses).toEqual([]);
    expect(counts.acquire + counts.callback + counts.lockBefore + counts.lockAfter).toBe(ROUNDS);
    expect(counts.lockBefore).toBeGreaterThan(0);
    await expectIdle(name, 1);
  });
});

describe('an event-loop stall past the lease', () => {
  const WORKER = join(__dirname, '..', 'support', 'watchdog-worker.js');

  /** A watchdog child process (startWatchdog on its own Semaphore instance), killed by its pid only. */
  function startWatchdogChild(name: string, intervalMs: number) {
    const messages: Array<Record<string, unknown>> = [];
    const child: ChildProcess = fork(WORKER, [], {
      env: {
        ...process.env,
        WATCHDOG_WORKER: JSON.stringify({ url: server.url, name, intervalMs, lifetimeMs: 60_000 }),
      },
      execArgv: [],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    child.on('message', (message) => void messages.push(message as Record<string, unknown>));
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    return {
      messages,
      send: (message: unknown) =>
        new Promise<void>((resolve, reject) =>
          child.send(message as object, (error) => (error ? reject(error) : resolve())),
        ),
      stop: async () => {
        if (child.exitCode !== null || child.signalCode !== null) return;
        child.send('stop');
        const stopped = await within(
          exited.then(() => true),
          5000,
          false,
        );
        if (!stopped) child.kill('SIGKILL');
        await exited;
      },
    };
  }

  /**
   * Blocks this process's event loop (a synchronous busy loop) for at least `minMs`, then until
   * GRABBED records a grant other than `grantId` (read synchronously with redis-cli), at most `maxMs`.
   */
  function stall(name: string, grantId: string, minMs: number, maxMs: number): { ms: number; regranted: boolean } {
    const started = performance.now();
    let regranted = false;
    while (performance.now() - started < maxMs) {
      if (performance.now() - started >= minMs) {
        const read = spawnSync(
          'redis-cli',
          ['-h', '127.0.0.1', '-p', String(server.port), 'HGET', grabbedKey(name), '0'],
          {
            encoding: 'utf8',
            timeout: 2000,
          },
        );
        const grant = grantOf(read.stdout?.trim());
        if (grant !== null && grant.id !== grantId) {
          regranted = true;
          break;
        }
      }
      const spin = performance.now();
      while (performance.now() - spin < 10); // busy: nothing else of this process runs
    }
    return { ms: performance.now() - started, regranted };
  }

  test.each(['once the waiter got the token', 'at once, before the waiter heard of it'] as const)(
    'a watchdog in another process reclaims it for a waiting caller of the same instance; the stalled caller’s unlock(token), %s, resolves false',
    async (when) => {
      const name = uniqueName('stall');
      const options: SemaphoreOptions = { url: server.url, staleClientTimeout: 500, waitSlice: 30_000 };
      const sem = opened.semaphore(name, options);
      const losses = lossLog(sem);
      const watchdog = startWatchdogChild(name, 50);
      try {
        await until(
          () => watchdog.messages.some((m) => 'ready' in m || 'error' in m),
          20_000,
          'the watchdog process to start',
        );
        expect(watchdog.messages.filter((m) => 'error' in m)).toEqual([]);
        const token = await sem.lock(0);
        expect(token).toBe('0');
        const fenceA = sem.fence('0')!;
        const waiting = sem.lock(30_000); // caller B, same instance
        await until(async () => (await blockedInBlmove()) === 1, 10_000, 'caller B to block');
        const grantA = grantOf(await admin.hGet(grabbedKey(name), '0'))!;
        expect(grantA.fence).toBe(fenceA);
        await sleep(300); // A refreshes (every ~167 ms) while the loop runs: nobody reclaims a live holder
        expect(watchdog.messages.filter((m) => 'reclaimed' in m)).toEqual([]);

        // The watchdog arms 1.3 s into the stall (A's lease of 500 ms long over by then); the stall
        // ends as soon as Redis records B's grant, so B's own lease is still young when the loop runs.
        await watchdog.send({ armAt: Date.now() + 1300 });
        const { ms, regranted } = stall(name, grantA.id, 1300, 10_000);
        const unlockedAtOnce = when === 'at once, before the waiter heard of it' ? sem.unlock(token!) : undefined;
        await watchdog.stop(); // nothing more reclaims: B's refreshes alone keep it
        console.log(
          `stalled ${Math.round(ms)} ms; watchdog: ${JSON.stringify(watchdog.messages.filter((m) => !('ready' in m)))}`,
        );
        expect(regranted).toBe(true);
        expect(await waiting).toBe('0');
        const fenceB = sem.fence('0')!;
        expect(fenceB).toBeGreaterThan(fenceA);
        if (unlockedAtOnce) {
          expect(await unlockedAtOnce).toBe(false);
        } else {
          // A's own clock ended its lease: it heard of the loss, and its holding is still in the instance.
          await until(() => losses.some((l) => l.fence === fenceA), 5000, 'A to hear of its loss');
          expect(await sem.unlock(token!)).toBe(false);
        }
        // B still holds: a third client cannot take the token, and B was never told of a loss.
        const third = opened.semaphore(name, options);
        expect(await third.lock(0)).toBeNull();
        expect(await sem.isLocked()).toBe(true);
        expect(grantOf(await admin.hGet(grabbedKey(name), '0'))?.fence).toBe(fenceB);
        expect(losses.filter((l) => l.fence !== fenceA)).toEqual([]);
        expect(await sem.unlock('0')).toBe(1);
        expect(await sem.unlock('0')).toBe(false); // nothing of this instance holds it now
        await expectIdle(name, 1);
      } finally {
        await watchdog.stop();
      }
    },
    40_000,
  );
});

describe('connection resets every 100–400 ms under load', () => {
  // 10 s in the v4 pass, 6 s in the v5 and v6 passes (CI time adds up; what differs by major, the
  // reconnects, happens dozens of times a second here: a few hundred resets a run).
  const DURATION_MS = isFirstPass() ? 10_000 : 6_000;
  test.each([1, 3])(
    'resources %i: never more holders than tokens, grants keep coming, and the census is exact',
    async (resources) => {
      const name = uniqueName('chaos');
      const options: SemaphoreOptions = { resources, staleClientTimeout: 2000 };
      // 16 callers on an instance whose connections (main, and the blocking ones made from it) go
      // through the proxy; 3 on an instance that reaches Redis directly, with a watchdog.
      const proxiedRedis = await proxiedClient();
      // Closed here, within bounds (not by the shared teardown), so that a call that never settles
      // fails this test with a description instead of hanging the hooks.
      const proxied = new Semaphore(name, { ...options, redis: proxiedRedis });
      const direct = new Semaphore(name, { ...options, url: server.url });
      const watchdog = direct.startWatchdog(250);
      const events: HistoryEvent[] = [];
      const grants: number[] = [];
      const errors = new Map<string, number>();
      const samples = new Map<string, string>(); // the first error of each kind, for the log
      let lostDuringHold = 0;
      let releaseFailures = 0;
      const started = performance.now();
      const stopAt = started + DURATION_MS;

      // Where each caller is, for a report if one never comes back.
      const phases = new Map<string, { phase: 'locking' | 'holding' | 'releasing' | 'done'; since: number }>();
      const caller = async (holder: string, sem: Semaphore) => {
        const enter = (phase: 'locking' | 'holding' | 'releasing' | 'done') =>
          phases.set(holder, { phase, since: performance.now() });
        for (let round = 0; round < 100_000 && performance.now() < stopAt; round++) {
          let ran = false;
          enter('locking');
          try {
            await sem.lock(3000, async (token, signal) => {
              ran = true;
              enter('holding');
              const at = performance.now();
              events.push({ holder, kind: 'acquired', token, at });
              grants.push(at);
              let ended = false;
              const end = () => {
                if (ended) return;
                ended = true;
                events.push({ holder, kind: 'released', token, at: performance.now() });
              };
              // A holder told of a loss stops using the token at once.
              const lost = () => {
                lostDuringHold++;
                end();
              };
              if (signal.aborted) lost();
              else signal.addEventListener('abort', lost, { once: true });
              await sleep(uniform(0, 15));
              signal.removeEventListener('abort', lost);
              end();
              enter('releasing');
            });
          } catch (error) {
            // A LockLostError: the release ran, and the loss was reported during the hold.
            if (ran && !(error instanceof LockLostError)) releaseFailures++;
            const kind = (error as Error).name;
            errors.set(kind, (errors.get(kind) ?? 0) + 1);
            if (!samples.has(kind)) samples.set(kind, String((error as Error).stack ?? error));
            await sleep(20);
          }
        }
        enter('done');
      };

      // The chaos: every 100–400 ms, reset every proxied connection, or the main one, or the blocking ones.
      let resets = 0;
      const cuts = { all: 0, main: 0, blocking: 0 };
      const chaos = (async () => {
        const filters: Array<[keyof typeof cuts, Filter | undefined]> = [
          ['all', undefined],
          ['main', (c) => !carried('BLMOVE')(c)],
          ['blocking', carried('BLMOVE')],
        ];
        for (let i = 0; i < 1000 && performance.now() < stopAt; i++) {
          await sleep(uniform(100, 400));
          const [kind, filter] = filters[Math.floor(Math.random() * filters.length)]!;
          const n = proxy.cut(filter);
          cuts[kind] += n > 0 ? 1 : 0;
          resets += n;
        }
      })();

      const everyone = Promise.all([
        chaos,
        ...Array.from({ length: 16 }, (_, i) => caller(`proxied-${i}`, proxied)),
        ...Array.from({ length: 3 }, (_, i) => caller(`direct-${i}`, direct)),
      ]);
      // A caller is back within its lock timeout (3 s) and a release's retries (about 3 s) after the end.
      const settled = await within(
        everyone.then(() => true),
        DURATION_MS + 15_000,
        false,
      );
      const endOfHistory = performance.now();
      const stuck = [...phases]
        .filter(([, state]) => state.phase !== 'done')
        .map(([holder, state]) => `${holder} ${state.phase} for ${Math.round(endOfHistory - state.since)} ms`);
      await watchdog.stop();
      const closeWithin = (sem: Semaphore) =>
        within(
          sem.close().then(() => 'closed'),
          10_000,
          'close hung',
        );
      const closed = await Promise.all([closeWithin(proxied), closeWithin(direct)]);
      const clientClosed = await closeBounded(proxiedRedis);
      if (!settled) {
        console.log(
          `callers that never came back: ${stuck.join('; ')}; semaphores: ${closed.join(', ')}; client: ${clientClosed}`,
        );
      }
      expect({ stuck, closed }).toEqual({ stuck: [], closed: ['closed', 'closed'] });

      const report = checkHistory(events, endOfHistory);
      grants.sort((a, b) => a - b);
      const marks = [started, ...grants, stopAt];
      let longestGap = 0;
      let gapAt = 0;
      for (let i = 1; i < marks.length; i++) {
        if (marks[i]! - marks[i - 1]! > longestGap) {
          longestGap = marks[i]! - marks[i - 1]!;
          gapAt = marks[i - 1]! - started;
        }
      }
      const byProxied = events.filter((e) => e.kind === 'acquired' && e.holder.startsWith('proxied')).length;
      let census = await takeCensus(admin, name);
      const firstCensus = describeCensus(census);
      if (releaseFailures > 0) {
        // A release that gave up (Redis unreachable through all its tries) leaves its token held until its
        // lease ends (2 s): then any reclaimer returns it.
        await sleep(2500);
        const reclaimer = opened.semaphore(name, { ...options, url: server.url });
        await reclaimer.releaseStaleLocks();
        census = await takeCensus(admin, name);
      }
      // Registrations whose ZREM a reset swallowed are left to lapse (best effort, by design): at most
      // one registration's expiry (2 slices + grace = 25 s) from now.
      const [seconds, micros] = (await admin.sendCommand(['TIME'])) as [string, string];
      const redisNow = Number(seconds) + Number(micros) / 1e6;
      const leftover = census.waiting.filter((w) => !w.registration.startsWith('~'));
      const lapseIn = leftover.map((w) => w.expiry - redisNow);
      console.log(
        `resources ${resources}: ${report.acquisitions} grants in ${(DURATION_MS / 1000).toFixed(0)} s ` +
          `(${(report.acquisitions / (DURATION_MS / 1000)).toFixed(1)}/s, ${byProxied} through the proxy), ` +
          `most holders at once ${report.maxConcurrent}, overlaps ${report.tokenOverlaps.length}, ` +
          `longest gap between grants ${Math.round(longestGap)} ms (at ${(gapAt / 1000).toFixed(1)} s), ` +
          `${resets} connections reset (${JSON.stringify(cuts)}), losses during a hold ${lostDuringHold}, ` +
          `release failures ${releaseFailures}, errors ${JSON.stringify(Object.fromEntries(errors))}, client close: ${clientClosed}; after close: ` +
          `AVAILABLE=[${census.available}] GRABBED=[${Object.keys(census.grabbed)}] inboxes ${census.inboxes.length}, ` +
          `${census.waiting.length - leftover.length} abandoned marks, ${leftover.length} registrations left to lapse ` +
          `(in ${lapseIn.map((s) => `${s.toFixed(1)} s`).join(', ') || '-'})` +
          (releaseFailures > 0 ? `; before the reclaim: ${firstCensus}` : ''),
      );
      if (samples.size > 0) console.log(`first error of each kind:\n${[...samples.values()].join('\n')}`);
      expect(report.anomalies).toEqual([]);
      expect(report.tokenOverlaps).toEqual([]);
      expect(report.maxConcurrent).toBeLessThanOrEqual(resources);
      expect(resets).toBeGreaterThanOrEqual(20);
      expect(byProxied).toBeGreaterThan(0);
      expect(report.acquisitions).toBeGreaterThanOrEqual(100);
      expect(longestGap).toBeLessThan(5000);
      // Every token back exactly once, nobody's grant left, no inbox key.
      expect(censusProblems(census, resources)).toEqual([]);
      expect([...census.available].sort()).toEqual(Array.from({ length: resources }, (_, i) => String(i)));
      expect(census.grabbed).toEqual({});
      expect(census.owners).toEqual({});
      expect(await admin.keys(`SEMAPHORE:${name}:INBOX:*`)).toEqual([]);
      for (const remaining of lapseIn) expect(remaining).toBeLessThanOrEqual(26);
    },
    60_000,
  );
});
