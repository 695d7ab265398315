import { scripts } from '../../lib/redis/registry';
import { useFixture } from '../support/fixture';
import { blockedClients, sleep, until } from '../support/redis';
import { callsScript } from '../support/script-calls';

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

/** Commands Redis ran while `run` ran, each as its arguments (SLOWLOG with a 0 µs threshold). */
async function commandsSentDuring(run: () => Promise<void>): Promise<string[][]> {
  await fixture.redis.sendCommand(['CONFIG', 'SET', 'slowlog-log-slower-than', '0']);
  try {
    await fixture.redis.sendCommand(['SLOWLOG', 'RESET']);
    await run();
    const logged = (await fixture.redis.sendCommand(['SLOWLOG', 'GET', '128'])) as Array<
      [number, number, number, string[]]
    >;
    return logged.map(([, , , args]) => args);
  } finally {
    await fixture.redis.sendCommand(['CONFIG', 'SET', 'slowlog-log-slower-than', '10000']);
  }
}

const named = (command: string) => (args: string[]) => args[0]?.toUpperCase() === command;
const isTryLock = callsScript(scripts.tryLock);

/**
 * `holder` holds the mutex; `a`, then `b`, block on it; `holder` releases. `a` is granted while `b`
 * waits, so a's claim made it a spare registration for its next wait. Resolves b's wait, still running.
 */
async function grantWhileOthersWait(
  holder = fixture.semaphore(),
  a = fixture.semaphore({}, holder.name),
  b = fixture.semaphore({}, holder.name),
) {
  await holder.lock();
  const base = await blockedClients(fixture.redis);
  const first = a.lock(10_000);
  await until(async () => (await blockedClients(fixture.redis)) >= base + 1, 5000, 'a to block');
  const second = b.lock(10_000);
  await until(async () => (await blockedClients(fixture.redis)) >= base + 2, 5000, 'b to block');
  await holder.unlock();
  expect(await first).toBe('0');
  return { holder, a, b, base, second };
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

  test('while contended, a lock skips tryLock and waits at once, still in turn; uncontended, it tries first', async () => {
    const { a, b, base, second } = await grantWhileOthersWait(); // a's semaphore is contended now
    const served = ['a1'];
    const bServed = second.then((token) => (served.push('b'), token));
    let third: Promise<string | null> = Promise.resolve(null);
    const sent = await commandsSentDuring(async () => {
      third = a.lock(10_000).then((token) => (served.push('a2'), token));
      await until(async () => (await blockedClients(fixture.redis)) >= base + 2, 5000, 'a to block again');
    });
    // a's last claim registered it for this wait (a spare): neither tryLock nor prepareWait was sent.
    expect(sent.some(isTryLock)).toBe(false);
    expect(sent.some(named('EVAL'))).toBe(false);
    await a.unlock('0');
    expect(await bServed).toBe('0'); // b was first in line
    await b.unlock('0');
    expect(await third).toBe('0');
    expect(served).toEqual(['a1', 'b', 'a2']);
    await a.unlock('0');

    // The last grant left nobody waiting: the next lock tries first, and gets the token at once.
    const after = await commandsSentDuring(async () => {
      expect(await a.lock(0)).toBe('0');
      await a.unlock('0');
      expect(await a.lock(1000)).toBe('0');
    });
    expect(after.filter(isTryLock)).toHaveLength(2);
    expect(after.some(named('BLMOVE'))).toBe(false);
    await a.unlock('0');
  });

  test('a spare registration left unused is removed within a moment, and at close()', async () => {
    const { holder, a, b, second } = await grantWhileOthersWait();
    expect(await holder.waiting()).toBe(2); // b, and a's spare for its next wait
    await until(async () => (await holder.waiting()) === 1, 2000, "a's idle spare to go");
    await a.unlock();
    expect(await second).toBe('0'); // b's grant leaves nobody waiting: no spare
    expect(await holder.waiting()).toBe(0);
    await b.unlock();

    // A spare still fresh at close() goes with it (the token c holds stays held, as close() does).
    const c = fixture.semaphore({}, holder.name);
    const { second: fourth } = await grantWhileOthersWait(holder, c, b);
    const closed = fourth.catch((error: unknown) => error);
    expect(await holder.waiting()).toBe(2); // b, and c's spare (well within its idle time)
    await c.close();
    expect(await holder.waiting()).toBe(1);
    await b.close();
    expect(await closed).toMatchObject({ name: 'SemaphoreClosedError' });
    await holder.delete();
  });

  test("delete() drops the instance's spares with the keys: its next lock registers afresh and is served", async () => {
    const { a, b, second } = await grantWhileOthersWait(); // a now holds a spare registration
    const closed = second.catch((error: unknown) => error);
    await b.close();
    await closed;
    await a.delete();
    // Under a spare that went with WAITING, a BLMOVE would wait out a 10 s slice for a semaphore
    // nobody re-creates; without it, prepareWait creates the semaphore and the token comes at once.
    expect(await a.lock(2000)).toBe('0');
    await a.unlock();
  });

  test('under a spare, a semaphore reset by someone else costs a waiter at most its 1 s first slice', async () => {
    const { holder, a, second } = await grantWhileOthersWait();
    await a.unlock();
    expect(await second).toBe('0');
    expect(await holder.waiting()).toBeGreaterThanOrEqual(1); // a's spare, still fresh
    await holder.delete(); // b's holding and every registration go with the keys
    const started = performance.now();
    expect(await a.lock(5000)).toBe('0'); // a 10 s slice under the vanished spare would end in null
    expect(performance.now() - started).toBeLessThan(4000);
    await a.unlock();
  });

  test('a contended wait that times out ends contended mode: the next lock tries first', async () => {
    const holder = fixture.semaphore();
    const a = fixture.semaphore({}, holder.name);
    await holder.lock();
    expect(await a.lock(0)).toBeNull(); // a miss: a is contended
    expect(await a.lock(50)).toBeNull(); // waited, in vain
    const sent = await commandsSentDuring(async () => {
      expect(await a.lock(50)).toBeNull();
    });
    expect(sent.some(isTryLock)).toBe(true);
    await holder.unlock();
  });
});
