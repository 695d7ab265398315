/** The spec files' common fixture: a client on the run's Redis, semaphores closed after each test, key snapshots. */
import { Semaphore, type SemaphoreOptions } from '../../lib';
import { keyPattern, semaphoreKeys } from '../../lib/redis/keys';
import { takeCensus } from './census';
import { closeAll, connectClient, connectSemaphoreClient, ioredisPackage, uniqueName, type Client } from './redis';
import type { SupportedRedisClient } from '../../lib';

export interface Fixture {
  /** A client on the run's Redis, for inspecting keys directly. */
  readonly redis: Client;
  /** The client semaphores get: `redis` itself, or an ioredis client when REDIS_CLIENT names ioredis. */
  readonly semaphoreRedis: SupportedRedisClient;
  /** A semaphore on that client (a fresh unique name unless given), closed after each test. */
  semaphore(options?: SemaphoreOptions, name?: string): Semaphore;
}

/** Registers the hooks a spec file needs and hands out semaphores that are closed after each test. */
export function useFixture(): Fixture {
  const opened: Semaphore[] = [];
  let redis: Client | undefined;
  let semaphoreRedis: SupportedRedisClient | undefined;
  beforeAll(async () => {
    redis = await connectClient();
    semaphoreRedis = ioredisPackage() ? await connectSemaphoreClient() : redis;
  });
  afterEach(async () => {
    await Promise.all(opened.splice(0).map((sem) => sem.close()));
  });
  afterAll(closeAll);
  return {
    get redis() {
      if (!redis) throw new Error('the fixture connects in beforeAll');
      return redis;
    },
    get semaphoreRedis() {
      if (!semaphoreRedis) throw new Error('the fixture connects in beforeAll');
      return semaphoreRedis;
    },
    semaphore(options = {}, name = uniqueName()) {
      const sem = new Semaphore(name, { redis: this.semaphoreRedis, ...options });
      opened.push(sem);
      return sem;
    },
  };
}

/**
 * Every key and value of a semaphore, for asserting exact Redis state: the census (support/census.ts)
 * as stored — GRABBED's grant records whole, OWNERS (which nothing writes any more: `{}` unless a
 * test put old data there), the registrations in WAITING, their inboxes by key — and the
 * semaphore's key names.
 */
export async function snapshot(redis: Client, name: string) {
  const census = await takeCensus(redis, name, { scanInboxes: false });
  return {
    available: census.available,
    grabbed: census.grabbed,
    owners: census.ownerRecords,
    waiting: census.waiting.map((entry) => entry.registration),
    inboxes: Object.fromEntries(
      census.inboxes.filter((inbox) => inbox.registered).map((inbox) => [inbox.key, inbox.tokens]),
    ),
    keys: (await redis.keys(keyPattern(semaphoreKeys(name)))).sort(),
  };
}
