import { snapshot, useFixture } from '../support/fixture';
import { sleep } from '../support/redis';

const fixture = useFixture();

describe('expiration', () => {
  test('every key disappears after the expiration once nothing is held', async () => {
    const sem = fixture.semaphore({ resources: 2, expiration: 300 });
    await sem.lock();
    await sem.unlock();
    expect((await snapshot(fixture.redis, sem.name)).keys.length).toBeGreaterThan(0);
    await sleep(450);
    expect((await snapshot(fixture.redis, sem.name)).keys).toEqual([]);
    expect(await sem.exists()).toBe(false);
    expect(await sem.availableCount()).toBe(2);
  });

  test('never expires while a token is held, then expires after the last unlock', async () => {
    const sem = fixture.semaphore({ expiration: 200 });
    const other = fixture.semaphore({ expiration: 200 }, sem.name);
    await sem.lock();
    await sleep(400);
    // Still there under its holder, so no re-creation can hand out a second token "0".
    expect(await sem.exists()).toBe(true);
    expect(await other.lock(0)).toBeNull();
    const ttls = await Promise.all(
      (await snapshot(fixture.redis, sem.name)).keys.map((key) => fixture.redis.pTTL(key)),
    );
    expect(ttls.every((ttl) => ttl === -1)).toBe(true);
    await sem.unlock();
    await sleep(350);
    expect((await snapshot(fixture.redis, sem.name)).keys).toEqual([]);
  });

  test('a waiter that went away does not keep the keys forever', async () => {
    const holder = fixture.semaphore({ expiration: 200 });
    const waiter = fixture.semaphore({ expiration: 200, waitSlice: 100 }, holder.name);
    await holder.lock();
    void waiter.lock().catch(() => undefined);
    await sleep(150);
    await waiter.close(); // its registration is abandoned, not cleaned up by a claim
    await holder.unlock();
    // Keys outlive the abandoned registration's lease (2 slices + 1 s grace) plus the expiration.
    await sleep(100);
    expect((await snapshot(fixture.redis, holder.name)).keys.length).toBeGreaterThan(0);
    const started = Date.now();
    while ((await snapshot(fixture.redis, holder.name)).keys.length > 0) {
      expect(Date.now() - started).toBeLessThan(8000);
      await sleep(100);
    }
  });

  test('a re-created semaphore has exactly resources tokens', async () => {
    const sem = fixture.semaphore({ resources: 3, expiration: 100 });
    await sem.lock();
    await sem.unlock();
    await sleep(250);
    await sem.lock();
    expect((await sem.allTokens()).sort()).toEqual(['0', '1', '2']);
  });
});
