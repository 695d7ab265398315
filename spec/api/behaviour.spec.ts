import { LockTimeoutError, Mutex, Semaphore, type MutexOptions, type SupportedRedisClient } from '../../lib';
import { useFixture } from '../support/fixture';
import { blockedClients, until, uniqueName, type Client } from '../support/redis';

/**
 * The one-holder contract, run against both classes that offer it (as async-mutex runs one suite
 * against its Mutex and its Semaphore): a `Mutex`, and a `Semaphore` of one resource. Counting
 * semantics (several tokens) are in spec/api/semaphore.spec.ts.
 */
const fixture = useFixture();
let redis: Client;
/** The semaphores' client: ioredis on an ioredis run (spec/support/redis.ts), else `redis`. */
let semaphoreRedis: SupportedRedisClient;
beforeAll(() => {
  redis = fixture.redis;
  semaphoreRedis = fixture.semaphoreRedis;
});

const opened: Semaphore[] = [];
afterEach(async () => {
  await Promise.all(opened.splice(0).map((lock) => lock.close()));
});

type Make = (name: string, options?: MutexOptions) => Semaphore;
const kinds: [string, Make][] = [
  ['Mutex', (name, options = {}) => new Mutex(name, { redis: semaphoreRedis, ...options })],
  [
    'Semaphore of one resource',
    (name, options = {}) => new Semaphore(name, { redis: semaphoreRedis, ...options, resources: 1 }),
  ],
];

describe.each(kinds)('%s', (_kind, make) => {
  function open(name = uniqueName('behaviour'), options?: MutexOptions): Semaphore {
    const lock = make(name, options);
    opened.push(lock);
    return lock;
  }

  test('has one token: lock takes it, lock(0) then resolves null at once, unlock gives it back', async () => {
    const lock = open();
    expect(lock.resources).toBe(1);
    expect(await lock.lock()).toBe('0');
    const started = Date.now();
    expect(await lock.lock(0)).toBeNull();
    expect(Date.now() - started).toBeLessThan(500);
    expect(await lock.unlock()).toBe(1);
    expect(await lock.lock(0)).toBe('0');
  });

  test('lock(timeout) resolves null after about timeout ms and leaves nothing blocked', async () => {
    const lock = open();
    await lock.lock();
    const started = Date.now();
    expect(await lock.lock(300)).toBeNull();
    expect(Date.now() - started).toBeGreaterThanOrEqual(250);
    expect(await blockedClients(redis)).toBe(0);
  });

  test('a waiter in another instance gets the token the moment the holder unlocks', async () => {
    const holder = open();
    const waiter = open(holder.name);
    await holder.lock();
    const waiting = waiter.lock(5000);
    await until(async () => (await blockedClients(redis)) >= 1, 5000, 'the waiter to block');
    expect(await holder.unlock()).toBe(1); // the free count right after the push, before Redis serves the waiter
    expect(await waiting).toBe('0');
    expect(await waiter.isLocked()).toBe(true);
    expect(await holder.isLocked()).toBe(false);
  });

  test('unlock with nothing held resolves false and pushes nothing', async () => {
    const lock = open();
    expect(await lock.unlock()).toBe(false);
    expect(await lock.unlock('0')).toBe(false);
    expect(await lock.allTokens()).toEqual([]);
  });

  test("the callback form holds the token during fn, releases it after, and resolves fn's result", async () => {
    const lock = open();
    const result = await lock.lock(async (token) => {
      expect(await lock.isLocked(token)).toBe(true);
      expect(await lock.lock(0)).toBeNull();
      return `held ${token}`;
    });
    expect(result).toBe('held 0');
    expect(await lock.isLocked()).toBe(false);
    expect(await lock.availableCount()).toBe(1);
  });

  test('the callback form releases when fn throws, and rethrows', async () => {
    const lock = open();
    await expect(
      lock.lock(() => {
        throw new Error('boom');
      }),
    ).rejects.toThrow('boom');
    expect(await lock.availableCount()).toBe(1);
  });

  test('the callback form rejects with LockTimeoutError, without running fn, when no token came', async () => {
    const lock = open();
    await lock.lock();
    const fn = jest.fn();
    const error = await lock.lock(200, fn).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(LockTimeoutError);
    expect(error).toMatchObject({ semaphore: lock.name, timeout: 200 });
    expect(fn).not.toHaveBeenCalled();
  });

  test('acquire() returns a lease that `await using` releases, once', async () => {
    const lock = open();
    {
      await using lease = await lock.acquire();
      expect(lease.token).toBe('0');
      expect(lease.fence).toBeGreaterThan(0);
      expect(await lock.acquire({ timeout: 0 }).catch((e: unknown) => e)).toBeInstanceOf(LockTimeoutError);
    }
    expect(await lock.isLocked()).toBe(false);
    const lease = await lock.acquire({ timeout: 0 });
    expect(await lease.release()).toBe(true);
    expect(await lease.release()).toBe(true);
    expect(await lock.availableCount()).toBe(1);
  });

  test('shares one lock with the other kind under the same name', async () => {
    const lock = open();
    const other = kinds.find(([, m]) => m !== make)![1](lock.name);
    opened.push(other);
    expect(await lock.lock(0)).toBe('0');
    expect(await other.lock(0)).toBeNull();
    await lock.unlock();
    expect(await other.lock(0)).toBe('0');
  });
});

test('a Mutex refuses a resources option', () => {
  expect(() => new Mutex('x', { redis, resources: 2 } as never)).toThrow(TypeError);
});
