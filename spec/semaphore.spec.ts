import { Mutex, LockTimeoutError } from '../lib';
import { useFixture } from './support/fixture';
import { blockedClients, sleep, uniqueName, until, type Client } from './support/redis';

const fixture = useFixture();
const semaphore = fixture.semaphore.bind(fixture);
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

describe('lock and unlock', () => {
  test('lock resolves a token and unlock resolves the new available count', async () => {
    const sem = semaphore({ resources: 2 });
    const token = await sem.lock();
    expect(['0', '1']).toContain(token);
    expect(await sem.availableCount()).toBe(1);
    expect(await sem.unlock()).toBe(2);
    expect(await sem.availableCount()).toBe(2);
  });

  test('writes the gem key layout', async () => {
    const name = uniqueName();
    const sem = semaphore({ resources: 3 }, name);
    const token = await sem.lock();
    expect(await redis.get(`SEMAPHORE:${name}:EXISTS`)).toBe('1');
    expect(await redis.get(`SEMAPHORE:${name}:VERSION`)).toBe('1');
    expect(await redis.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1)).toEqual(['1', '2']);
    expect(token).toBe('0');
    const stamp = await redis.hGet(`SEMAPHORE:${name}:GRABBED`, '0');
    // The gem's float stamp first (Ruby's to_f reads it), then the grant id, fence and lease.
    expect(stamp).toMatch(/^\d{10}\.\d{6} [\w-]{21} \d+ 30000$/);
    expect(Math.abs(parseFloat(stamp!) - Date.now() / 1000)).toBeLessThan(5);
  });

  test('lock(0) never blocks and resolves null when nothing is free', async () => {
    const sem = semaphore();
    expect(await sem.lock(0)).toBe('0');
    const started = Date.now();
    expect(await sem.lock(0)).toBeNull();
    expect(Date.now() - started).toBeLessThan(500);
  });

  test('lock(timeout) resolves null after about timeout ms', async () => {
    const sem = semaphore();
    await sem.lock();
    const started = Date.now();
    expect(await sem.lock(300)).toBeNull();
    const elapsed = Date.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(3000);
    expect(await blockedClients(redis)).toBe(0);
  });

  test('a blocked lock gets the token the moment another holder unlocks', async () => {
    const holder = semaphore();
    const name = holder.name;
    const waiter = semaphore({}, name);
    await holder.lock();
    const waiting = waiter.lock(5000);
    await until(async () => (await blockedClients(redis)) >= 1, 5000, 'the waiter to block');
    expect(await holder.unlock()).toBe(1);
    expect(await waiting).toBe('0');
    expect(await waiter.isLocked()).toBe(true);
    expect(await holder.isLocked()).toBe(false);
  });

  test('one instance serves many concurrent callers, each with its own token', async () => {
    const sem = semaphore({ resources: 3 });
    const tokens = await Promise.all([sem.lock(), sem.lock(), sem.lock()]);
    expect(new Set(tokens)).toEqual(new Set(['0', '1', '2']));
    const fourth = sem.lock(2000);
    await sleep(100);
    await sem.unlock('1');
    expect(await fourth).toBe('1');
  });

  test('unlock without anything held resolves false and pushes nothing', async () => {
    const sem = semaphore();
    expect(await sem.unlock()).toBe(false);
    expect(await sem.unlock('0')).toBe(false);
    expect(await sem.allTokens()).toEqual([]);
  });
});

describe('callback form', () => {
  test('runs fn with a token, releases afterwards, resolves fn result', async () => {
    const sem = semaphore();
    const result = await sem.lock(async (token) => {
      expect(await sem.isLocked(token)).toBe(true);
      expect(await sem.isLocked()).toBe(true);
      return `held ${token}`;
    });
    expect(result).toBe('held 0');
    expect(await sem.availableCount()).toBe(1);
    expect(await sem.isLocked()).toBe(false);
  });

  test('releases when fn throws, and rethrows its error', async () => {
    const sem = semaphore();
    await expect(
      sem.lock(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await sem.availableCount()).toBe(1);
    expect(await sem.isLocked('0')).toBe(false);
  });

  test('rejects with LockTimeoutError and does not run fn when no token came', async () => {
    const sem = semaphore();
    await sem.lock();
    const fn = jest.fn();
    const error = await sem.lock(200, fn).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(error).toMatchObject({ name: 'LockTimeoutError', semaphore: sem.name, timeout: 200 });
    expect(fn).not.toHaveBeenCalled();
  });

  test('wait is lock', async () => {
    const sem = semaphore();
    expect(sem.wait).toBe(sem.lock);
    expect(await sem.wait(0)).toBe('0');
  });
});

describe('Mutex', () => {
  test('has exactly one resource', async () => {
    const mutex = new Mutex(uniqueName(), { redis });
    try {
      expect(mutex.resources).toBe(1);
      expect(await mutex.lock(0)).toBe('0');
      expect(await mutex.lock(0)).toBeNull();
    } finally {
      await mutex.close();
    }
    expect(() => new Mutex('x', { redis, resources: 2 } as never)).toThrow(TypeError);
  });
});
