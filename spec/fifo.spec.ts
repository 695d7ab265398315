import { useFixture } from './support/fixture';
import { blockedClients, sleep, until } from './support/redis';

const fixture = useFixture();

/** Starts `count` waits one after another, each once the previous one is blocked in Redis. */
async function queueWaiters(count: number, lock: (i: number) => Promise<string | null>): Promise<number[]> {
  const served: number[] = [];
  const base = await blockedClients(fixture.redis);
  for (let i = 0; i < count; i++) {
    void lock(i).then(() => served.push(i));
    await until(async () => (await blockedClients(fixture.redis)) >= base + i + 1, 5000, `waiter ${i} to block`);
  }
  return served;
}

describe('first come, first served', () => {
  test('waiters on separate instances (as separate processes) are served in the order they blocked', async () => {
    const holder = fixture.semaphore();
    await holder.lock();
    const waiters = Array.from({ length: 6 }, () => fixture.semaphore({}, holder.name));
    const served = await queueWaiters(waiters.length, (i) => waiters[i]!.lock(10_000));
    await holder.unlock();
    for (let i = 0; i < waiters.length - 1; i++) {
      await until(() => served.length === i + 1, 5000, `waiter ${i} to be served`);
      await sleep(20); // nobody else may get in meanwhile
      expect(served).toHaveLength(i + 1);
      await waiters[served[i]!]!.unlock();
    }
    await until(() => served.length === waiters.length, 5000, 'the last waiter');
    expect(served).toEqual([0, 1, 2, 3, 4, 5]);
  });

  test('concurrent callers of one instance are served in arrival order', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    const held = [await sem.lock(), await sem.lock()];
    const served = await queueWaiters(5, () => sem.lock(10_000));
    for (const token of held) await sem.unlock(token!);
    for (let next = 2; next < 5; next++) {
      await until(() => served.length === next, 5000, `waiter ${next - 1} to be served`);
      await sleep(10);
      await sem.unlock();
    }
    await until(() => served.length === 5, 5000, 'the last waiter');
    expect(served).toEqual([0, 1, 2, 3, 4]);
  });

  test('lock(0) never takes a token ahead of a blocked waiter', async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({}, holder.name);
    const eager = fixture.semaphore({}, holder.name);
    await holder.lock();
    const waiting = waiter.lock(10_000);
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    const [, grabbed] = await Promise.all([holder.unlock(), eager.lock(0)]);
    expect(grabbed).toBeNull();
    expect(await waiting).toBe('0');
  });

  test('waiters beyond maxBlockingConnections queue locally and are all served in order', async () => {
    const sem = fixture.semaphore({ maxBlockingConnections: 2 });
    await sem.lock();
    const served: number[] = [];
    const waits = Array.from({ length: 6 }, (_, i) => sem.lock(10_000).then(() => void served.push(i)));
    await until(async () => (await blockedClients(fixture.redis)) >= 2, 5000, 'two blocked waiters');
    await sleep(50);
    expect(await blockedClients(fixture.redis)).toBe(2); // never more connections than allowed
    for (let i = 0; i < 6; i++) {
      await sem.unlock();
      await until(() => served.length === i + 1, 5000, `waiter ${i}`);
    }
    await Promise.all(waits);
    expect(served).toEqual([0, 1, 2, 3, 4, 5]);
  });
});
