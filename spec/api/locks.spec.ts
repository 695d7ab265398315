import {
  createLocks,
  LockTimeoutError,
  SemaphoreClosedError,
  type Lease,
  type Locks,
  type LocksOptions,
} from '../../lib';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { keyPattern, semaphoreKeys } from '../../lib/redis/keys';
import { useFixture } from '../support/fixture';
import { PrivateServers } from '../support/private-servers';
import { blockedClients, connectSemaphoreClient, sleep, uniqueName, until } from '../support/redis';

/**
 * The lock manager (`createLocks`): many names, one bounded pool of blocking connections shared in
 * arrival order, idle names and connections dropped, one close().
 */
const fixture = useFixture();
const managers: Locks[] = [];
const servers = new PrivateServers();

afterEach(async () => {
  await Promise.all(managers.splice(0).map((locks) => locks.close()));
});
afterAll(() => servers.close());

function manager(options: Omit<LocksOptions, 'redis'> = {}): Locks {
  const locks = createLocks({ redis: fixture.semaphoreRedis, ...options });
  managers.push(locks);
  return locks;
}

/** Redis is exact for each name: every token once, whole records, nothing held or waiting. */
async function expectIdle(names: string[], resources = 1): Promise<void> {
  for (const name of names) {
    const census = await takeCensus(fixture.redis, name);
    expect({
      name,
      problems: censusProblems(census, resources, { idle: true }),
      census: describeCensus(census),
    }).toMatchObject({ problems: [] });
  }
}

function names(count: number): string[] {
  return Array.from({ length: count }, () => uniqueName('locks'));
}

describe('createLocks', () => {
  test('serves waiters on 40 names through at most 3 blocking connections', async () => {
    const locks = manager({ maxBlockingConnections: 3 });
    const all = names(40);
    const holders = await Promise.all(all.map((name) => locks.acquire(name)));
    const served: string[] = [];
    const waits = all.map((name) => locks.lock(name, 30_000, () => void served.push(name)));
    await until(() => locks.stats().connections === 3, 5000, 'the pool to fill');
    await sleep(300);
    expect(locks.stats()).toMatchObject({ names: 40, connections: 3, idleConnections: 0 });
    // 37, but for a moment one fewer while a waiter whose turn ended queues again.
    expect(locks.stats().queued).toBeGreaterThanOrEqual(36);
    expect(await blockedClients(fixture.redis)).toBeLessThanOrEqual(3);
    expect(served).toEqual([]);
    for (const lease of holders.reverse()) await lease.release();
    await Promise.all(waits);
    expect(served.sort()).toEqual([...all].sort());
    expect(locks.stats().connections).toBeLessThanOrEqual(3);
    await expectIdle(all);
  });

  test('a waiter on a name nobody releases takes turns: a waiter on another name is served meanwhile', async () => {
    const locks = manager({ maxBlockingConnections: 1 });
    const [stuck, moving] = names(2) as [string, string];
    const stuckHolder = await locks.acquire(stuck);
    const movingHolder = await locks.acquire(moving);
    let stuckServed = false;
    const stuckWait = locks.lock(stuck, 20_000, () => void (stuckServed = true));
    await until(async () => (await blockedClients(fixture.redis)) === 1, 5000, 'the first waiter to block');
    const started = performance.now();
    const movingWait = locks.lock(moving, 20_000, () => performance.now() - started);
    await sleep(200);
    await movingHolder.release();
    // Its turn comes within a slice of at most a second (the stuck waiter's), not after 20 s.
    const waited = await movingWait;
    expect(waited).toBeLessThan(5000);
    expect(stuckServed).toBe(false);
    await stuckHolder.release();
    await stuckWait;
    expect(stuckServed).toBe(true);
    await expectIdle([stuck, moving]);
  });

  test('at no instant more holders than resources, under a storm of short deadlines across names', async () => {
    const locks = manager({ maxBlockingConnections: 4, resources: 2 });
    const all = names(12);
    const holding = new Map<string, number>();
    let most = 0;
    let grants = 0;
    let timeouts = 0;
    const stopAt = performance.now() + 4000;
    const caller = async (index: number) => {
      while (performance.now() < stopAt) {
        const name = all[(index + grants) % all.length] as string;
        try {
          await locks.lock(name, 40, async () => {
            const now = (holding.get(name) ?? 0) + 1;
            holding.set(name, now);
            most = Math.max(most, now);
            grants++;
            await sleep(Math.random() * 20);
            holding.set(name, (holding.get(name) ?? 1) - 1);
          });
        } catch (error) {
          if (!(error instanceof LockTimeoutError)) throw error;
          timeouts++;
        }
      }
    };
    await Promise.all(Array.from({ length: 60 }, (_, index) => caller(index)));
    console.log(
      `12 names × 2 resources, 60 callers, 4 connections: ${grants} grants, ${timeouts} timeouts in 4 s, most holders of one name ${most}`,
    );
    expect(most).toBeLessThanOrEqual(2);
    expect(grants).toBeGreaterThan(100);
    expect(locks.stats().connections).toBeLessThanOrEqual(4);
    await locks.close();
    await expectIdle(all, 2);
  });

  test('closes idle connections and the semaphores of idle names; pinned ones stay', async () => {
    const locks = manager({ maxBlockingConnections: 2, idleTimeout: 100 });
    const [pinnedName, ...others] = names(4) as [string, ...string[]];
    const pinned = locks.mutex(pinnedName);
    const holders = await Promise.all(others.map((name) => locks.acquire(name)));
    const waits = others.map((name) => locks.lock(name, 10_000, () => undefined));
    await until(() => locks.stats().connections === 2, 5000, 'the pool to fill');
    for (const lease of holders) await lease.release();
    await Promise.all(waits);
    expect(locks.stats().names).toBe(4);
    await until(() => locks.stats().connections === 0, 5000, 'the idle connections to close');
    await until(() => locks.stats().names === 1, 5000, 'the idle names to go');
    expect(locks.mutex(pinnedName)).toBe(pinned);
    expect(await pinned.lock(0)).not.toBeNull();
    expect(await pinned.unlock()).toBe(1);
    await expectIdle([pinnedName, ...others]);
  });

  test('semaphore(name) is one instance per name, with the resources it was first given', async () => {
    const locks = manager({ resources: 3 });
    const [name, other] = names(2) as [string, string];
    const sem = locks.semaphore(name);
    expect(sem.resources).toBe(3);
    expect(locks.semaphore(name)).toBe(sem);
    expect(locks.semaphore(name, { resources: 3 })).toBe(sem);
    expect(() => locks.semaphore(name, { resources: 2 })).toThrow(/already serves .* with 3 resource\(s\), not 2/);
    expect(() => locks.mutex(name)).toThrow(TypeError);
    expect(locks.semaphore(other, { resources: 5 }).resources).toBe(5);
    const tokens = await Promise.all([sem.lock(0), sem.lock(0), sem.lock(0), sem.lock(0)]);
    expect(tokens.filter((token) => token !== null)).toHaveLength(3);
    expect(await locks.lock(name, 0, () => 'ran').catch((error: unknown) => error)).toBeInstanceOf(LockTimeoutError);
    for (const token of tokens) if (token !== null) await sem.unlock(token);
    await expectIdle([name], 3);
  });

  test('close() ends blocked waits, keeps held tokens held and leaves the client open', async () => {
    const locks = manager({ maxBlockingConnections: 2 });
    const [name] = names(1) as [string];
    const lease: Lease = await locks.acquire(name);
    const waits = [
      locks.lock(name, () => undefined),
      locks.lock(name, () => undefined),
      locks.lock(name, () => undefined),
    ].map((wait) =>
      wait.then(
        () => 'granted',
        (error: unknown) => error,
      ),
    );
    await until(() => locks.stats().connections === 2, 5000, 'the pool to fill');
    await locks.close();
    for (const outcome of await Promise.all(waits)) expect(outcome).toBeInstanceOf(SemaphoreClosedError);
    expect(locks.stats().connections).toBe(0);
    expect(await locks.lock(name, () => undefined).catch((error: unknown) => error)).toBeInstanceOf(
      SemaphoreClosedError,
    );
    expect(() => locks.mutex(name)).toThrow(SemaphoreClosedError);
    const census = await takeCensus(fixture.redis, name);
    expect(Object.keys(census.grabbed)).toEqual([lease.token]);
    expect(census.waiting).toEqual([]);
    expect(await fixture.redis.ping()).toBe('PONG');
  });

  test('a connection that cannot open (maxclients) leaves the queued callers to the connections that did', async () => {
    // The admin client, the manager's client and two blocking connections: the third cannot open.
    const { server } = await servers.start(['--maxclients', '4']);
    const locks = createLocks({ redis: await servers.connect(server.url), maxBlockingConnections: 5 });
    managers.push(locks);
    const all = names(4);
    const holders = await Promise.all(all.map((name) => locks.acquire(name)));
    const served: string[] = [];
    const waits = all.map((name) => locks.lock(name, 20_000, () => void served.push(name)));
    await sleep(2500); // several turns, and more than the 5 failures in a row that used to fail every caller
    expect(locks.stats().connections).toBe(2);
    for (const lease of holders) await lease.release();
    await Promise.all(waits);
    expect(served.sort()).toEqual([...all].sort());
  });

  test('closes itself when the caller closes its client: waits end, no connection is left open', async () => {
    const redis = await connectSemaphoreClient();
    const locks = manager({ redis, maxBlockingConnections: 2 } as Omit<LocksOptions, 'redis'>);
    const [name] = names(1) as [string];
    await locks.acquire(name); // held: the waiters below wait
    const waits = [1, 2, 3].map(() => locks.lock(name, () => undefined).catch((error: unknown) => error));
    await until(() => locks.stats().connections === 2, 5000, 'the pool to fill');
    await ('quit' in redis && typeof redis.quit === 'function' ? redis.quit() : undefined);
    for (const outcome of await Promise.all(waits)) expect(outcome).toBeInstanceOf(SemaphoreClosedError);
    await until(() => locks.stats().connections === 0, 5000, 'the shared connections to close');
    await expect(locks.lock(name, () => undefined)).rejects.toThrow(SemaphoreClosedError);
  });

  test('a name whose semaphore was closed gets a new one', async () => {
    const locks = manager();
    const [name] = names(1) as [string];
    const first = locks.mutex(name);
    await first.close();
    expect(await locks.lock(name, 0, () => 'ran')).toBe('ran');
    expect(locks.mutex(name)).not.toBe(first);
    await expectIdle([name]);
  });

  test('rejects what it cannot serve, with TypeErrors that say why', () => {
    const locks = manager();
    expect(() => createLocks(undefined as unknown as LocksOptions)).toThrow(TypeError);
    expect(() => createLocks({} as LocksOptions)).toThrow(/needs the `redis` client/);
    expect(() => createLocks({ redis: fixture.semaphoreRedis, url: 'redis://x' } as LocksOptions)).toThrow(
      /not a `url`/,
    );
    expect(() => createLocks({ redis: fixture.semaphoreRedis, resource: 2 } as LocksOptions)).toThrow(
      /Unknown option `resource`/,
    );
    expect(() => createLocks({ redis: fixture.semaphoreRedis, idleTimeout: 1 })).toThrow(RangeError);
    expect(() => createLocks({ redis: fixture.semaphoreRedis, idleTimeout: 30 * 86_400_000 })).toThrow(RangeError);
    expect(() => createLocks({ redis: fixture.semaphoreRedis, maxBlockingConnections: 0 })).toThrow(RangeError);
    expect(() => locks.semaphore('')).toThrow(TypeError);
    return expect(locks.lock('x', 5 as unknown as () => void)).rejects.toThrow(
      /last argument of lock to be a function/,
    );
  });
});

describe('createLocks: the keys of idle names expire', () => {
  /** Every key of each name, with its time to live in ms (-1: none). */
  async function keyTtls(all: string[]): Promise<Array<[string, number]>> {
    const keys = (await Promise.all(all.map((name) => fixture.redis.keys(keyPattern(semaphoreKeys(name)))))).flat();
    return Promise.all(keys.map(async (key): Promise<[string, number]> => [key, await fixture.redis.pTTL(key)]));
  }

  /** 2 resources per name, 3 callers each: waiters registered and served, then every name left idle. */
  async function lockAndUnlock(locks: Locks, all: string[]): Promise<void> {
    await Promise.all(
      all.flatMap((name) => [1, 2, 3].map(() => locks.lock(name, 10_000, () => sleep(Math.random() * 10)))),
    );
  }

  test('by default every key of an idle name has a deadline at most 60 s away', async () => {
    const locks = manager({ resources: 2 });
    const all = names(50);
    await lockAndUnlock(locks, all);
    const ttls = await keyTtls(all);
    expect(ttls.length).toBeGreaterThanOrEqual(all.length * 3);
    const wrong = ttls.filter(([, ttl]) => !(ttl > 0 && ttl <= 60_000));
    expect(wrong).toEqual([]);
  });

  test('200 names locked and unlocked leave no key once `expiration` has passed', async () => {
    const locks = manager({ resources: 2, expiration: 300, maxBlockingConnections: 20 });
    const all = names(200);
    // One name stays held through the run, so its keys are there to see however slow the machine is
    // (the others' may expire before a listing of 200 names ends).
    const [probe] = all as [string];
    const held = await locks.acquire(probe);
    await lockAndUnlock(locks, all.slice(1));
    expect((await keyTtls([probe])).length).toBeGreaterThan(0);
    await held.release();
    const unlocked = performance.now();
    // The bound: `expiration` after the last use (no waiter is registered once all are served).
    await until(async () => (await keyTtls(all)).length === 0, 5000, 'every key to expire');
    expect(performance.now() - unlocked).toBeLessThan(2000);
  });

  test('a held name, and one with a waiter, keep their keys past the bound, then expire once idle', async () => {
    const locks = manager({ expiration: 200, waitSlice: 100 });
    const [held, waited] = names(2) as [string, string];
    const heldLease = await locks.acquire(held);
    const waitedLease = await locks.acquire(waited);
    const waiter = locks.lock(waited, 20_000, () => 'served');
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    await sleep(800); // four times the expiration, several of the waiter's slices
    const ttls = await keyTtls([held, waited]);
    expect(ttls.filter(([key]) => key.startsWith(`SEMAPHORE:${held}:`)).length).toBeGreaterThanOrEqual(3);
    expect(ttls.filter(([key]) => key.startsWith(`SEMAPHORE:${waited}:`)).length).toBeGreaterThanOrEqual(3);
    expect(ttls.filter(([, ttl]) => ttl !== -1)).toEqual([]);
    await waitedLease.release();
    expect(await waiter).toBe('served');
    await heldLease.release();
    await until(async () => (await keyTtls([held, waited])).length === 0, 5000, 'the keys to expire');
  });

  test('`expiration: null` keeps the keys for good', async () => {
    const locks = manager({ expiration: null });
    const all = names(3);
    await lockAndUnlock(locks, all);
    const ttls = await keyTtls(all);
    expect(ttls.length).toBeGreaterThan(0);
    expect(ttls.filter(([, ttl]) => ttl !== -1)).toEqual([]);
  });
});
