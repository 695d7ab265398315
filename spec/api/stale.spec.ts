import { snapshot, useFixture } from '../support/fixture';
import { blockedClients, sleep, until } from '../support/redis';

const fixture = useFixture();

describe('stale holders', () => {
  test('lock reclaims a holder older than staleClientTimeout, and the old holder cannot unlock or refresh', async () => {
    // A holder that stopped refreshing (autoRefresh off) stands for a dead one.
    const dead = fixture.semaphore({ staleClientTimeout: 300, autoRefresh: false });
    const next = fixture.semaphore({ staleClientTimeout: 300 }, dead.name);
    expect(await dead.lock(0)).toBe('0');
    expect(await next.lock(0)).toBeNull();
    await sleep(450);
    expect(await next.lock(0)).toBe('0');
    // The old holder's acquisition is gone: nothing is released twice, the new holder keeps its token.
    expect(await dead.refresh()).toBe(false);
    expect(await dead.unlock()).toBe(false);
    expect(await next.isLocked()).toBe(true);
    const state = await snapshot(fixture.redis, dead.name);
    expect(state.available).toEqual([]);
    expect(Object.keys(state.grabbed)).toEqual(['0']);
  });

  test('refresh keeps a long holder from being reclaimed', async () => {
    const holder = fixture.semaphore({ staleClientTimeout: 400, autoRefresh: false });
    const other = fixture.semaphore({ staleClientTimeout: 400 }, holder.name);
    await holder.lock();
    for (let i = 0; i < 4; i++) {
      await sleep(200);
      expect(await holder.refresh()).toBe(true);
      expect(await other.lock(0)).toBeNull();
    }
    expect(await holder.unlock()).toBe(1);
  });

  test('releaseStaleLocks returns only stale tokens and resolves how many', async () => {
    const sem = fixture.semaphore({ resources: 3, staleClientTimeout: 300, autoRefresh: false });
    await sem.lock();
    await sem.lock();
    await sleep(400);
    await sem.lock(); // a free token: taken, reclaiming nothing (only a miss needs stale tokens back)
    expect(await sem.releaseStaleLocks()).toBe(2);
    expect(await sem.releaseStaleLocks()).toBe(0);
    await sleep(400);
    expect(await sem.releaseStaleLocks()).toBe(1);
    expect(await sem.availableCount()).toBe(3);
  });

  test('a lock that finds no token free reclaims stale holders first, and takes one', async () => {
    const sem = fixture.semaphore({ resources: 2, staleClientTimeout: 300, autoRefresh: false });
    await sem.lock();
    await sem.lock();
    await sleep(400);
    expect(await sem.lock(0)).not.toBeNull();
    expect(await sem.availableCount()).toBe(1);
  });

  test('the watchdog wakes a blocked waiter when a holder goes stale', async () => {
    const dead = fixture.semaphore({ staleClientTimeout: 300, autoRefresh: false });
    const waiter = fixture.semaphore({}, dead.name);
    const watchdog = fixture.semaphore({ staleClientTimeout: 300 }, dead.name).startWatchdog(50);
    try {
      await dead.lock();
      const started = Date.now();
      const waiting = waiter.lock(5000);
      await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
      expect(await waiting).toBe('0');
      const waited = Date.now() - started;
      expect(waited).toBeGreaterThanOrEqual(250);
      expect(waited).toBeLessThan(3000);
    } finally {
      await watchdog.stop();
    }
  });

  test('a holder recorded by a Ruby gem process (no owner) is reclaimed by time', async () => {
    const sem = fixture.semaphore({ staleClientTimeout: 300 });
    await sem.existsOrCreate();
    const prefix = `SEMAPHORE:${sem.name}:`;
    // What the gem does: BLPOP AVAILABLE, then HSET GRABBED token <time>.
    await fixture.redis.blPop(`${prefix}AVAILABLE`, 1);
    await fixture.redis.hSet(`${prefix}GRABBED`, '0', (Date.now() / 1000 - 10).toFixed(6));
    expect(await sem.releaseStaleLocks()).toBe(1);
    expect(await sem.lock(0)).toBe('0');
  });

  test('useLocalTime stamps GRABBED from this process', async () => {
    const sem = fixture.semaphore({ useLocalTime: true, staleClientTimeout: 300, autoRefresh: false });
    const before = Date.now() / 1000;
    await sem.lock();
    const stamp = parseFloat((await fixture.redis.hGet(`SEMAPHORE:${sem.name}:GRABBED`, '0')) ?? '');
    expect(stamp).toBeGreaterThanOrEqual(before - 0.001);
    expect(stamp).toBeLessThanOrEqual(Date.now() / 1000 + 0.001);
    await sleep(400);
    expect(await sem.releaseStaleLocks()).toBe(1);
  });
});
