import { createClient } from 'redis';
import { Semaphore, SemaphoreClosedError, SemaphoreRedisError } from '../../lib';
import keySlot from 'cluster-key-slot';
import { hasHashTag, semaphoreKeys } from '../../lib/redis/keys';
import { keySlot as librarySlot } from '../../lib/redis/slot';
import { adaptClient, topologyOf } from '../../lib/redis/client/adapt';
import { isConnectionError, wasRefusedForNow } from '../../lib/redis/client/classify';
import {
  blockedClients,
  closeAll,
  connectClient,
  redisClientPackage,
  redisUrl,
  uniqueName,
  until,
  type Client,
} from '../support/redis';

// jest.config.js maps `redis` to the package REDIS_CLIENT names, for the library and the specs.
const major = { redis: 4, redis5: 5, redis6: 6 }[redisClientPackage()];

afterAll(closeAll);

describe(`node-redis v${major} (REDIS_CLIENT=${redisClientPackage()})`, () => {
  test('the specs and the library run on the major REDIS_CLIENT names', () => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports -- the package REDIS_CLIENT mapped 'redis' to, loaded as the library loads it
    const redis = require('redis') as { createSentinel?: unknown };
    // v4 has no Sentinel client; v5 and v6 do.
    expect(typeof redis.createSentinel).toBe(major === 4 ? 'undefined' : 'function');
  });

  test('a standalone client is seen as standalone and keeps the gem key names', async () => {
    const client = await connectClient();
    expect(topologyOf(client as never)).toBe('standalone');
    const name = uniqueName();
    const sem = new Semaphore(name, { redis: client as never });
    await sem.lock();
    expect(await client.exists(`SEMAPHORE:${name}:AVAILABLE`)).toBe(0);
    expect(Number(await client.hExists(`SEMAPHORE:${name}:GRABBED`, '0'))).toBe(1); // v4 true, v5+ 1
    await sem.close();
  });

  test('a client nobody connected: the call rejects with an error that says to call `await client.connect()`', async () => {
    const client = createClient({ url: redisUrl() });
    client.on('error', () => undefined);
    const sem = new Semaphore(uniqueName(), { redis: client });
    const failure = await sem.lock(0).catch((error: unknown) => error);
    expect(failure).toBeInstanceOf(SemaphoreRedisError);
    expect((failure as Error).message).toMatch(/The client is closed: call `await client\.connect\(\)` before/);
    await client.connect();
    expect(await sem.lock(0)).toBe('0'); // connected, it works
    await sem.close();
    await client.quit();
    const after = new Semaphore(uniqueName(), { redis: client });
    await expect(after.lock(0)).rejects.toThrow(/await client\.connect\(\)/); // and after quit(), the same
    await after.close();
  });

  test('works on a RESP3 connection where the client can speak it (v5 with RESP: 3, v6 by default)', async () => {
    const options = major === 5 ? { url: redisUrl(), RESP: 3 } : { url: redisUrl() };
    const client = createClient(options as never) as unknown as Client;
    client.on('error', () => undefined);
    await client.connect();
    try {
      const sem = new Semaphore(uniqueName(), { redis: client as never, resources: 2 });
      const first = await sem.lock();
      const second = await sem.lock(0);
      expect([first, second].sort()).toEqual(['0', '1']);
      expect(await sem.lock(0)).toBeNull();
      const waiter = sem.lock(5000);
      await until(async () => (await blockedClients(await connectClient())) >= 1, 5000, 'the waiter to block');
      expect(await sem.isLocked()).toBe(true);
      expect(await sem.unlock(first)).toBe(1); // counted before Redis hands it to the blocked waiter
      expect(await waiter).toBe(first);
      expect(await sem.allTokens()).toEqual(expect.arrayContaining(['0', '1']));
      expect(await sem.availableCount()).toBe(0);
      await sem.close();
    } finally {
      await client.quit();
    }
  });

  test("a blocking wait outlives the caller's client's socketTimeout (v6)", async () => {
    const client = createClient({ url: redisUrl(), socket: { socketTimeout: 300 } } as never) as unknown as Client;
    client.on('error', () => undefined);
    await client.connect();
    try {
      const sem = new Semaphore(uniqueName(), { redis: client as never, waitSlice: 2000 });
      const token = await sem.lock();
      const waiting = sem.lock(5000);
      waiting.catch(() => undefined); // may reject before it is awaited (below)
      await new Promise((resolve) => setTimeout(resolve, 1000));
      const other = await connectClient();
      await other.sendCommand(['PING']);
      // The holder unlocks on a fresh client: the caller's own one may have idled out (v6).
      const releaser = new Semaphore(sem.name, { redis: other as never });
      // v6 reconnects an idled-out client; v5 gives it up (closed for good), and then the semaphore
      // closes itself, as when the caller closes its client: the wait rejects instead of holding a
      // token nobody could give back.
      const gaveUp = !client.isOpen;
      expect(await releaser.signal(token)).toBeGreaterThanOrEqual(0);
      if (gaveUp) await expect(waiting).rejects.toBeInstanceOf(SemaphoreClosedError);
      else expect(await waiting).toBe(token);
      await sem.close();
      await releaser.close();
    } finally {
      if (client.isOpen) await client.disconnect();
    }
  });

  test('connection errors and cluster refusals are recognised by message, in every major', () => {
    for (const message of [
      'Socket closed unexpectedly',
      'The client is closed',
      'The client is offline',
      'Connection timeout',
    ]) {
      expect(isConnectionError(new Error(message))).toBe(true);
    }
    for (const message of [
      'TRYAGAIN Multiple keys request during rehashing of slot',
      'CLUSTERDOWN The cluster is down',
      "READONLY You can't write against a read only replica.",
    ]) {
      expect(wasRefusedForNow(new Error(message))).toBe(true);
    }
    expect(wasRefusedForNow(new Error('WRONGTYPE Operation against a key'))).toBe(false);
    expect(adaptClient).toBeInstanceOf(Function);
  });
});

describe('cluster key names', () => {
  test('a name without a hash tag gets one in cluster mode only', () => {
    expect(semaphoreKeys('jobs').available).toBe('SEMAPHORE:jobs:AVAILABLE');
    expect(semaphoreKeys('jobs', { cluster: true }).available).toBe('SEMAPHORE:{jobs}:AVAILABLE');
    expect(semaphoreKeys('jobs', { cluster: true }).inbox('g')).toBe('SEMAPHORE:{jobs}:INBOX:g');
  });

  test('a name with a hash tag is kept as is', () => {
    expect(semaphoreKeys('{jobs}', { cluster: true }).available).toBe('SEMAPHORE:{jobs}:AVAILABLE');
    expect(semaphoreKeys('crawl:{eu}:x', { cluster: true }).grabbed).toBe('SEMAPHORE:crawl:{eu}:x:GRABBED');
  });

  test('hasHashTag follows Redis: the first { and the next } with something between', () => {
    expect(hasHashTag('a{b}')).toBe(true);
    expect(hasHashTag('a{}b{c}')).toBe(false); // Redis hashes the whole key then
    expect(hasHashTag('a}b{')).toBe(false);
    expect(hasHashTag('plain')).toBe(false);
    expect(semaphoreKeys('a{}b', { cluster: true }).available).toBe('SEMAPHORE:{a{}b}:AVAILABLE');
  });

  test('on a cluster, every name gets keys of one slot (a name starting with } too), and no two names share keys', () => {
    const names = ['}', '}abc', '"}abc', '""}abc', '{}', '{', 'a}{b', '{}x', '}{}', '}}', 'a{}b{c}', 'plain', '"plain'];
    const seen = new Map<string, string>();
    for (const name of names) {
      const keys = semaphoreKeys(name, { cluster: true });
      const slots = new Set([...keys.scriptKeys, keys.inbox('x')].map((key) => keySlot(key)));
      expect({ name, slots: slots.size }).toEqual({ name, slots: 1 });
      expect(seen.get(keys.available)).toBeUndefined();
      seen.set(keys.available, name);
    }
    expect(semaphoreKeys('}abc', { cluster: true }).available).toBe('SEMAPHORE:{"}abc}:AVAILABLE');
    expect(semaphoreKeys('"}abc', { cluster: true }).available).toBe('SEMAPHORE:{""}abc}:AVAILABLE');
    expect(semaphoreKeys('"plain', { cluster: true }).available).toBe('SEMAPHORE:{"plain}:AVAILABLE');
  });

  test('the library computes the slot of a key as Redis does (for keyless commands routed to the slot owner)', () => {
    for (const key of [
      'SEMAPHORE:{jobs}:AVAILABLE',
      'plain',
      'a{}b',
      '{}',
      'émoji 🔒 {x}',
      'SEMAPHORE:}abc:X',
      '123456789',
    ]) {
      expect({ key, slot: librarySlot(key) }).toEqual({ key, slot: keySlot(key) });
    }
    expect(librarySlot('123456789')).toBe(0x31c3 % 16384); // CRC16/XMODEM's check value
  });
});
