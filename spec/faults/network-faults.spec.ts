/**
 * Network faults injected for real with our own TCP proxy (spec/support/proxy.ts) between the
 * waiters and a private redis-server: a black-holed blocking connection, a reply lost in transit,
 * a server that cannot be reached while a waiter gives up, and a caller's client that stops answering.
 */
import type { Semaphore, SemaphoreOptions } from '../../lib';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { carried, FaultProxy } from '../support/proxy';
import { PrivateServers } from '../support/private-servers';
import type { RedisServer } from '../support/redis-server';
import { sleep, uniqueName, until, type Client } from '../support/redis';

const SLICE = 1000;
/** The client-side guard on a blocking call: slice + grace / 2, grace = max(1 s, slice / 2). */
const GUARD = SLICE + Math.max(1000, SLICE / 2) / 2;

let server: RedisServer;
let proxy: FaultProxy;
let admin: Client;
const shared = new PrivateServers(); // the server and its admin client, for the whole file
const opened = new PrivateServers(); // what each test makes

beforeAll(async () => {
  ({ server, admin } = await shared.start());
});
beforeEach(async () => {
  proxy = await FaultProxy.start(server.port);
});
afterEach(async () => {
  await opened.close();
  await proxy.close();
});
afterAll(() => shared.close());

/** A client through the proxy, which the waiter's semaphore uses (its blocking connections are duplicated from it). */
function proxiedClient(): Promise<Client> {
  return opened.connect(proxy.url);
}

/** Client ids of connections Redis has blocked in BLMOVE. */
async function blockedIds(): Promise<Set<string>> {
  const list = await admin.clientList();
  return new Set(
    list.filter((client) => client.cmd === 'blmove' && client.flags.includes('b')).map((c) => String(c.id)),
  );
}

/** A mutex held directly on the server, and a waiter blocked behind it through the proxy. */
async function waiterThroughProxy() {
  const name = uniqueName('net');
  const holder = opened.semaphore(name, { url: server.url });
  expect(await holder.lock(0)).toBe('0');
  const waiter = opened.semaphore(name, { redis: await proxiedClient(), waitSlice: SLICE });
  const waiting = waiter.lock(30_000);
  await until(
    async () => (await blockedIds()).size === 1 && proxy.connections(carried('BLMOVE')).length === 1,
    5000,
    'the waiter to block',
  );
  return { name, holder, waiter, waiting, blocked: await blockedIds() };
}

async function expectExact(name: string, held: string[]): Promise<void> {
  const census = await takeCensus(admin, name);
  expect(censusProblems(census, 1)).toEqual([]);
  expect({ held: Object.keys(census.grabbed), census: describeCensus(census) }).toMatchObject({ held });
}

describe('a black-holed blocking connection (bytes dropped both ways, no RST)', () => {
  test('the waiter notices within slice + grace/2, blocks again on a new connection, and gets the token', async () => {
    const { name, holder, waiter, waiting, blocked } = await waiterThroughProxy();
    const started = performance.now();
    expect(proxy.blackhole(carried('BLMOVE'))).toBe(1);
    // A new BLMOVE from another connection: the waiter gave up on the silent one and re-armed.
    await until(
      async () => [...(await blockedIds())].some((id) => !blocked.has(id)),
      3 * GUARD,
      'the waiter to block again',
    );
    const noticed = performance.now() - started;
    expect(noticed).toBeLessThan(GUARD + 1500); // bounded: the guard, plus recover and a new connection
    expect(proxy.swallowed.toClient).toBeGreaterThan(0); // the old slice's reply (nil + claim) was really dropped
    expect(await holder.unlock()).toBe(1);
    expect(await waiting).toBe('0');
    await expectExact(name, ['0']);
    expect(await waiter.unlock()).toBe(1);
    await expectExact(name, []);
  });

  test('a token handed over inside the black hole is adopted, not lost', async () => {
    const { name, holder, waiter, waiting } = await waiterThroughProxy();
    proxy.blackhole(carried('BLMOVE'));
    const started = performance.now();
    // The server still runs the blocked BLMOVE and its pipelined claim; only the reply is swallowed.
    expect(await holder.unlock()).toBe(1); // pushed; BLMOVE takes it right after
    expect(Object.keys((await takeCensus(admin, name)).grabbed)).toEqual(['0']);
    expect(await waiting).toBe('0');
    expect(performance.now() - started).toBeLessThan(GUARD + 1500);
    expect(await waiter.isLocked()).toBe(true);
    await expectExact(name, ['0']);
    expect(await waiter.unlock()).toBe(1);
    await expectExact(name, []);
  });
});

describe('a reply lost in transit', () => {
  test.each(['then the connection is reset', 'and the connection stays silent'] as const)(
    'BLMOVE moved the token and claim recorded it, the reply is dropped, %s: the waiter adopts its grant',
    async (after) => {
      const { name, holder, waiter, waiting } = await waiterThroughProxy();
      expect(proxy.dropReplies(carried('BLMOVE'))).toBe(1);
      expect(await holder.unlock()).toBe(1); // pushed; BLMOVE takes it right after
      await until(
        async () => Object.keys((await takeCensus(admin, name)).owners).length === 1,
        3000,
        'the claim to run',
      );
      await until(() => proxy.swallowed.toClient > 0, 3000, 'the reply to be dropped');
      if (after === 'then the connection is reset') expect(proxy.cut(carried('BLMOVE'))).toBe(1);
      expect(await waiting).toBe('0');
      await expectExact(name, ['0']);
      expect(await waiter.unlock()).toBe(1);
      await expectExact(name, []);
    },
  );

  test('the reply of the tryLock that took the token is lost: recover adopts it', async () => {
    const name = uniqueName('net');
    const client = await proxiedClient();
    const sem = opened.semaphore(name, { redis: client, waitSlice: SLICE });
    await sem.existsOrCreate();
    proxy.dropReplies();
    const locking = sem.lock(5000);
    await until(async () => Object.keys((await takeCensus(admin, name)).owners).length === 1, 3000, 'tryLock to run');
    proxy.cut(); // node-redis reconnects the main client; the lost reply surfaces as a connection error
    expect(await locking).toBe('0');
    await expectExact(name, ['0']);
    expect(await sem.unlock()).toBe(1);
    await expectExact(name, []);
  });
});

describe('a waiter whose deadline passes while Redis cannot be reached', () => {
  /** Cuts every proxied connection and refuses new ones for `ms`: the server is fine, the client cannot reach it. */
  async function outage(ms: number): Promise<void> {
    proxy.refuse(true);
    proxy.cut();
    await sleep(ms);
    proxy.refuse(false);
  }

  async function expectTokenStaysFree(name: string, waiter: Semaphore, holder: Semaphore): Promise<void> {
    expect(await holder.unlock()).toBe(1);
    await sleep(2 * GUARD); // time for a late BLMOVE, if one were ever sent, to take it
    const census = await takeCensus(admin, name);
    expect(censusProblems(census, 1)).toEqual([]);
    expect(census.available).toEqual(['0']);
    expect(await blockedIds()).toEqual(new Set());
    expect(await waiter.lock(0)).toBe('0');
  }

  test('with the default client (offline queue on): it resolves null by its deadline, not once Redis is back, and sends no BLMOVE', async () => {
    const name = uniqueName('net');
    const holder = opened.semaphore(name, { url: server.url });
    expect(await holder.lock(0)).toBe('0');
    const waiter = opened.semaphore(name, { redis: await proxiedClient(), waitSlice: SLICE });
    const waiting = waiter.lock(1500);
    await until(async () => (await blockedIds()).size === 1, 5000, 'the waiter to block');
    const started = performance.now();
    // The answer comes at the deadline, about 1.5 s after the cut (the cut fails the slice at once;
    // recover's bounded wait runs to the deadline); an outage of 5 s leaves room for a loaded
    // machine's late timers while still telling an answer by the deadline from one that waited for
    // Redis to come back.
    const down = outage(5000);
    expect(await waiting).toBeNull();
    // The deadline passed during the outage: the answer does not wait for Redis (recover, queued
    // offline, settles itself once Redis is back).
    expect(performance.now() - started).toBeLessThan(4900);
    await down;
    await expectTokenStaysFree(name, waiter, holder);
  });

  test('with its own client (no offline queue): it fails fast with a typed error, and sends no BLMOVE later', async () => {
    const name = uniqueName('net');
    const holder = opened.semaphore(name, { url: server.url });
    expect(await holder.lock(0)).toBe('0');
    const waiter = opened.semaphore(name, { url: proxy.url, waitSlice: SLICE });
    const waiting = waiter.lock(30_000).then(
      (token) => ({ token }),
      (error: Error & { semaphore?: string }) => ({ error: error.name, semaphore: error.semaphore }),
    );
    await until(async () => (await blockedIds()).size === 1, 5000, 'the waiter to block');
    const started = performance.now();
    proxy.refuse(true);
    proxy.cut();
    expect(await waiting).toEqual({ error: 'SemaphoreRedisError', semaphore: name });
    expect(performance.now() - started).toBeLessThan(10_000);
    proxy.refuse(false);
    await expectTokenStaysFree(name, waiter, holder);
  });
});

describe("the caller's client stops answering: a lock's first try, reads, close()", () => {
  /** Node-redis can stay "not ready" after a reconnect (redis/node-redis#2632): the lock must not wait with it. */
  async function silentClient(fault: 'blackhole' | 'drop-replies', options: SemaphoreOptions = {}) {
    const name = uniqueName('net');
    const sem = opened.semaphore(name, { redis: await proxiedClient(), waitSlice: SLICE, ...options });
    await sem.existsOrCreate(); // connected and checked: the next call's first step is its tryLock
    const silenced = fault === 'blackhole' ? proxy.blackhole() : proxy.dropReplies();
    expect(silenced).toBe(1); // the main connection; blocking connections opened later pass
    return { name, sem };
  }

  test.each(['blackhole', 'drop-replies'] as const)(
    '%s: lock(300) resolves null after about TRY_ANSWER_MS (1 s), and a token the try took goes back once its answer comes',
    async (fault) => {
      const { name, sem } = await silentClient(fault);
      const started = performance.now();
      expect(await sem.lock(300)).toBeNull();
      const took = performance.now() - started;
      expect(took).toBeGreaterThanOrEqual(900);
      expect(took).toBeLessThan(3000);
      if (fault === 'drop-replies') {
        // The try ran: it holds the token, and its answer never comes on this connection.
        expect(Object.keys((await takeCensus(admin, name)).grabbed)).toEqual(['0']);
      }
      // The connection resets: node-redis fails the unanswered try, whose undo adopts and gives back the token.
      expect(proxy.cut()).toBe(1);
      await until(async () => (await takeCensus(admin, name)).available.length === 1, 5000, 'the token to be free');
      await expectExact(name, []);
      expect(await sem.lock(0)).toBe('0');
      expect(await sem.unlock()).toBe(1);
      const closing = performance.now();
      await sem.close();
      expect(performance.now() - closing).toBeLessThan(3000);
    },
  );

  test('lock() without a timeout goes on without the answer and gets the free token on a blocking connection', async () => {
    const { name, sem } = await silentClient('blackhole');
    const started = performance.now();
    expect(await sem.lock()).toBe('0');
    expect(performance.now() - started).toBeLessThan(5000);
    expect(proxy.connections(carried('BLMOVE')).length).toBe(1);
    await expectExact(name, ['0']);
    expect(proxy.cut((connection) => connection.mode === 'blackhole')).toBe(1); // the main client reconnects
    expect(await sem.unlock()).toBe(1);
    await expectExact(name, []);
  });

  test('while a try goes unanswered, the next locks skip theirs and wait on a blocking connection at once', async () => {
    const { name, sem } = await silentClient('blackhole');
    expect(await sem.lock(300)).toBeNull(); // its try left behind, unanswered
    const started = performance.now();
    expect(await sem.lock(5000)).toBe('0'); // no try of its own: straight to BLMOVE, which takes the free token
    expect(performance.now() - started).toBeLessThan(900); // a try of its own would have held it 1 s
    expect(proxy.swallowed.toServer).toBeGreaterThan(0); // the first try went into the black hole
    await expectExact(name, ['0']);
    // The reset fails the unanswered try (its recover finds nothing: it never reached Redis).
    expect(proxy.cut((connection) => connection.mode === 'blackhole')).toBe(1);
    expect(await sem.unlock()).toBe(1);
    await expectExact(name, []);
  });

  test('close() does not wait for an unanswered try longer than the undo limit (10 s)', async () => {
    const { name, sem } = await silentClient('blackhole');
    const locking = sem.lock(60_000);
    await sleep(200); // the try is out, unanswered
    const closing = performance.now();
    await sem.close();
    expect(performance.now() - closing).toBeLessThan(14_000);
    await expect(locking).rejects.toThrow(/closed/i);
    await expectExact(name, []);
    proxy.cut(); // the caller's own client, still waiting for the try's answer, can then close
  });

  test('reads fail with a typed error after 10 s instead of waiting with the client', async () => {
    const { sem } = await silentClient('blackhole');
    const started = performance.now();
    const failed = (promise: Promise<unknown>) =>
      promise.then(
        (value) => ({ value }),
        (error: Error) => ({ error: error.name }),
      );
    const reads = await Promise.all([failed(sem.availableCount()), failed(sem.holders()), failed(sem.isLocked('0'))]);
    expect(reads).toEqual([
      { error: 'SemaphoreRedisError' },
      { error: 'SemaphoreRedisError' },
      { error: 'SemaphoreRedisError' },
    ]);
    expect(performance.now() - started).toBeLessThan(14_000);
    proxy.cut();
  });

  test('silent before its first use: close() ends the lock waiting for the server checks', async () => {
    const sem = opened.semaphore(uniqueName('net'), { redis: await proxiedClient(), waitSlice: SLICE });
    expect(proxy.blackhole()).toBe(1); // before any call: the first lock waits for its server checks
    const settled = (promise: Promise<unknown>) =>
      promise.then(
        (token) => ({ token }),
        (error: Error) => ({ error: error.name }),
      );
    const forever = settled(sem.lock());
    const timed = settled(sem.lock(60_000));
    await sleep(300);
    const closing = performance.now();
    await sem.close();
    expect(performance.now() - closing).toBeLessThan(5000);
    expect(await forever).toEqual({ error: 'SemaphoreClosedError' });
    expect(await timed).toEqual({ error: 'SemaphoreClosedError' });
    proxy.cut();
  });

  test('a token that reaches the lock late in its slice is handed out although the renewing refresh gets no answer', async () => {
    const { name, sem } = await silentClient('blackhole', { waitSlice: 5000, staleClientTimeout: 3000 });
    const holder = opened.semaphore(name, { url: server.url });
    expect(await holder.lock(0)).toBe('0');
    const started = performance.now();
    const locking = sem.lock(30_000);
    await until(async () => (await blockedIds()).size === 1, 5000, 'the lock to block, past its unanswered try');
    // More than a third of the lease into the slice: the grant is refreshed before it is handed out.
    await sleep(2000);
    expect(await holder.unlock()).toBe(1);
    expect(await locking).toBe('0');
    expect(performance.now() - started).toBeLessThan(15_000);
    // The token stays held until its lease ends: an unlock needs the main client, which node-redis
    // v5 does not always bring back after a reset with refreshes pending (not what this test is about).
    proxy.cut();
  });
});
