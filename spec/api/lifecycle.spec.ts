import { Semaphore, SemaphoreClosedError, SemaphoreRedisError } from '../../lib';
import { snapshot, useFixture } from '../support/fixture';
import { blockedClients, redisUrl, sleep, uniqueName, until } from '../support/redis';

const fixture = useFixture();

describe('creation and inspection', () => {
  test('exists, availableCount and allTokens before and after creation', async () => {
    const sem = fixture.semaphore({ resources: 3 });
    expect(await sem.exists()).toBe(false);
    expect(await sem.availableCount()).toBe(3);
    expect(await sem.allTokens()).toEqual([]);
    await sem.existsOrCreate();
    expect(await sem.exists()).toBe(true);
    expect(await sem.allTokens()).toEqual(['0', '1', '2']);
    const token = await sem.lock();
    expect(await sem.allTokens()).toEqual([...['0', '1', '2'].filter((t) => t !== token), token]);
  });

  test('existsOrCreate never touches an existing semaphore, its holders or its jobs', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    const token = await sem.lock();
    await sem.signal('job');
    const before = await snapshot(fixture.redis, sem.name);
    await sem.existsOrCreate();
    await fixture.semaphore({ resources: 2 }, sem.name).existsOrCreate();
    expect(await snapshot(fixture.redis, sem.name)).toEqual(before);
    expect(await sem.unlock(token)).toBe(3);
  });

  test('creation skips an initial token that GRABBED records as held', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    await sem.lock(); // holds "0"
    await fixture.redis.del([`SEMAPHORE:${sem.name}:EXISTS`, `SEMAPHORE:${sem.name}:AVAILABLE`]); // e.g. evicted
    await sem.existsOrCreate();
    expect(await sem.allTokens()).toEqual(['1', '0']);
    expect(await sem.unlock()).toBe(2);
  });

  test('delete removes every key, including the gem guard and waiter inboxes', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    await sem.lock();
    await sem.signal('job');
    await fixture.redis.set(`SEMAPHORE:${sem.name}:release_locks`, '123.4');
    await sem.delete();
    expect((await snapshot(fixture.redis, sem.name)).keys).toEqual([]);
    expect(await sem.unlock()).toBe(false);
  });

  test('a waiter blocked when the semaphore is deleted re-creates it and gets a token', async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({ waitSlice: 300 }, holder.name);
    await holder.lock();
    const waiting = waiter.lock(10_000);
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    await holder.delete();
    expect(await waiting).toBe('0');
    expect(await holder.unlock()).toBe(false); // its grant went with the keys
  });

  test('with useLocalTime, registration leases still count on Redis TIME', async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({ useLocalTime: true, expiration: 50 }, holder.name);
    await holder.lock();
    const realNow = Date.now.bind(Date);
    const skew = jest.spyOn(Date, 'now').mockImplementation(() => realNow() - 60_000);
    try {
      const waiting = waiter.lock(5000);
      await until(
        async () => (await fixture.redis.zCard(`SEMAPHORE:${holder.name}:WAITING`)) === 1,
        5000,
        'a registration',
      );
      const [registration] = await fixture.redis.zRangeWithScores(`SEMAPHORE:${holder.name}:WAITING`, 0, -1);
      const [seconds] = (await fixture.redis.sendCommand(['TIME'])) as [string, string];
      expect(registration!.score).toBeGreaterThan(Number(seconds)); // not 60 s in the past
      await holder.unlock();
      expect(await waiting).toBe('0');
    } finally {
      skew.mockRestore();
    }
  });

  test('isLocked(token) sees holders from any instance', async () => {
    const a = fixture.semaphore();
    const b = fixture.semaphore({}, a.name);
    await a.lock();
    expect(await b.isLocked('0')).toBe(true);
    expect(await b.isLocked()).toBe(false);
    expect(await a.isLocked()).toBe(true);
  });

  test.each([null, undefined, Infinity])('lock(%s) waits as long as it takes', async (timeout) => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({ waitSlice: 200 }, holder.name);
    await holder.lock();
    const waiting = waiter.lock(timeout);
    await sleep(700); // several slices: it re-arms instead of giving up
    await holder.unlock();
    expect(await waiting).toBe('0');
  });
});

describe('connections', () => {
  test('without `redis`, the semaphore connects to `url` itself and close() quits it', async () => {
    const sem = new Semaphore(uniqueName(), { url: redisUrl() });
    try {
      expect(await sem.lock()).toBe('0');
      expect(await sem.unlock()).toBe(1);
    } finally {
      await sem.close();
    }
    await expect(sem.lock()).rejects.toBeInstanceOf(SemaphoreClosedError);
  });

  test('a Redis failure rejects with SemaphoreRedisError naming the semaphore', async () => {
    const sem = new Semaphore('unreachable', { url: 'redis://127.0.0.1:1' });
    try {
      const error = await sem.lock(0).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(SemaphoreRedisError);
      expect(error).toMatchObject({ semaphore: 'unreachable' });
      expect(String((error as Error).message)).toMatch(/semaphore "unreachable"/);
    } finally {
      await sem.close();
    }
  });

  test('a command Redis refuses surfaces as SemaphoreRedisError with the cause', async () => {
    const sem = fixture.semaphore();
    await fixture.redis.set(`SEMAPHORE:${sem.name}:EXISTS`, '1');
    await fixture.redis.set(`SEMAPHORE:${sem.name}:AVAILABLE`, 'not a list');
    const error = await sem.lock(0).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(SemaphoreRedisError);
    expect((error as Error).cause).toBeInstanceOf(Error);
    expect(String((error as Error).message)).toMatch(/WRONGTYPE/);
  });

  test('close() ends blocked waits with SemaphoreClosedError and strands no token', async () => {
    const holder = fixture.semaphore();
    const sem = new Semaphore(holder.name, { redis: fixture.semaphoreRedis });
    await holder.lock();
    const waits = [sem.lock(), sem.lock(10_000)];
    await until(async () => (await blockedClients(fixture.redis)) >= 2, 5000, 'both waiters to block');
    await sem.close();
    for (const wait of waits) await expect(wait).rejects.toBeInstanceOf(SemaphoreClosedError);
    await holder.unlock();
    const state = await snapshot(fixture.redis, holder.name);
    expect(state.available).toEqual(['0']);
    expect(state.waiting.filter((registration) => !registration.startsWith('~'))).toEqual([]);
    expect(state.inboxes).toEqual({});
  });

  test('close() while a callback runs: the callback finishes, then its token goes back', async () => {
    const sem = new Semaphore(uniqueName(), { redis: fixture.semaphoreRedis });
    let closing: Promise<void> | undefined;
    const result = await sem.lock(async () => {
      closing = sem.close();
      await sleep(50);
      return 'done';
    });
    await closing;
    expect(result).toBe('done');
    expect(await fixture.semaphore({}, sem.name).availableCount()).toBe(1);
  });

  test('timeouts below a millisecond neither block forever nor leave a registration behind', async () => {
    const holder = fixture.semaphore();
    const sem = fixture.semaphore({}, holder.name);
    await holder.lock();
    const started = Date.now();
    expect(await Promise.all([sem.lock(0.6), sem.lock(0.2), sem.lock(1)])).toEqual([null, null, null]);
    expect(Date.now() - started).toBeLessThan(1500);
    expect((await snapshot(fixture.redis, holder.name)).waiting).toEqual([]);
  });

  test('a timeout beyond the timer range still waits (queued locally or blocked)', async () => {
    const holder = fixture.semaphore();
    const sem = fixture.semaphore({ maxBlockingConnections: 1 }, holder.name);
    await holder.lock();
    const waits = [sem.lock(3e9), sem.lock(3e9)]; // the second queues locally for the one connection
    await sleep(300);
    await holder.unlock();
    expect(await waits[0]).toBe('0');
    await sem.unlock();
    expect(await waits[1]).toBe('0');
  });

  test("a blocked waiter never blocks the caller's own client", async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({}, holder.name);
    await holder.lock();
    const waiting = waiter.lock(5000);
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    const started = Date.now();
    expect(await fixture.redis.ping()).toBe('PONG');
    expect(await holder.availableCount()).toBe(0);
    expect(Date.now() - started).toBeLessThan(500);
    await holder.unlock();
    expect(await waiting).toBe('0');
  });

  test('concurrent waiters each block on a connection of their own, up to maxBlockingConnections', async () => {
    const holder = fixture.semaphore();
    const sem = fixture.semaphore({ maxBlockingConnections: 3 }, holder.name);
    await holder.lock();
    const started = Date.now();
    const results = await Promise.all([sem.lock(500), sem.lock(500), sem.lock(500)]);
    expect(results).toEqual([null, null, null]);
    expect(Date.now() - started).toBeLessThan(1400); // in parallel, not one after another
  });
});
