import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { LockTimeoutError, Semaphore } from '../../lib';
import { censusProblems, takeCensus } from '../support/census';
import { snapshot, useFixture } from '../support/fixture';
import { blockedClients, connectClient, redisUrl, sleep, until } from '../support/redis';
import { startRedisServer } from '../support/redis-server';

/** acquire() and its Lease, and cancelling waits with an AbortSignal. */
const fixture = useFixture();

describe('acquire() and Lease', () => {
  test('`await using` releases the lease at the end of the scope', async () => {
    const sem = fixture.semaphore();
    let fence = 0;
    {
      await using lease = await sem.acquire();
      expect(lease.token).toBe('0');
      expect(lease.signal.aborted).toBe(false);
      fence = lease.fence;
      expect(await sem.availableCount()).toBe(0);
      expect(await lease.refresh()).toBe(true);
    }
    expect(fence).toBeGreaterThan(0);
    expect(await sem.availableCount()).toBe(1);
  });

  test('release is idempotent: one push, and later calls resolve what the first did', async () => {
    const sem = fixture.semaphore({ resources: 2 });
    const lease = await sem.acquire();
    const [first, second] = await Promise.all([lease.release(), lease.release()]);
    expect([first, second, await lease.release()]).toEqual([true, true, true]);
    expect((await snapshot(fixture.redis, sem.name)).available.sort()).toEqual(['0', '1']);
    expect(await lease.refresh()).toBe(false);
    // unlock() without a token leaves leases alone, as it does callback holders.
    const kept = await sem.acquire();
    expect(await sem.unlock()).toBe(false);
    await kept.release();
  });

  test('rejects with LockTimeoutError when the timeout runs out; timeout 0 never blocks', async () => {
    const sem = fixture.semaphore();
    const held = await sem.acquire();
    await expect(sem.acquire({ timeout: 0 })).rejects.toBeInstanceOf(LockTimeoutError);
    const started = performance.now();
    await expect(sem.acquire({ timeout: 100 })).rejects.toMatchObject({ name: 'LockTimeoutError', timeout: 100 });
    expect(performance.now() - started).toBeGreaterThanOrEqual(90);
    await held.release();
    expect(sem.stats()).toMatchObject({ acquisitions: 1, releases: 1, timeouts: 2 });
  });

  test('rejects bad options before any I/O', async () => {
    const sem = fixture.semaphore();
    await expect(sem.acquire({ timeout: -1 })).rejects.toThrow(RangeError);
    await expect(sem.acquire({ signal: {} as AbortSignal })).rejects.toThrow(/signal/);
    await expect(sem.acquire(null as never)).rejects.toThrow(TypeError);
    await expect(sem.lock(10, 'x' as never)).rejects.toThrow(TypeError);
    // A signal passed where `{ signal }` belongs would silently not cancel: refused.
    await expect(sem.lock(10, new AbortController().signal as never)).rejects.toThrow(/\{ signal\?, permits\? \}/);
    await expect(sem.acquire(new AbortController().signal as never)).rejects.toThrow(/signal/);
    expect(await sem.exists()).toBe(false);
  });
});

describe("many locks at a semaphore's first use", () => {
  /**
   * Each lock waiting for the server checks listens for close(): twenty of them must not make Node
   * warn of a listener leak on stderr. In a process of its own (Node's warnings go to the real
   * process, which jest's sandbox does not see), on the build (dist/, as `npm test` makes it).
   */
  test("twenty concurrent first locks on a caller's client print no MaxListenersExceededWarning", async () => {
    const script = `
      const { Semaphore } = require(${JSON.stringify(join(__dirname, '..', '..', 'dist'))});
      const { createClient } = require('redis');
      (async () => {
        const client = createClient({ url: process.env.TARGET_URL });
        await client.connect();
        const sem = new Semaphore('first-use-' + process.pid, { redis: client, resources: 20 });
        const tokens = await Promise.all(Array.from({ length: 20 }, () => sem.lock(5000)));
        await Promise.all(tokens.map((token) => sem.unlock(token)));
        await sem.delete();
        await sem.close();
        await client.quit();
        console.log('granted ' + new Set(tokens).size);
      })();
    `;
    const { stdout, stderr } = await new Promise<{ stdout: string; stderr: string }>((resolve, reject) => {
      execFile(
        process.execPath,
        ['-e', script],
        { cwd: join(__dirname, '..', '..'), env: { ...process.env, TARGET_URL: redisUrl() }, timeout: 30_000 },
        (error, out, err) =>
          error ? reject(new Error(`${error.message}\n${err}`)) : resolve({ stdout: out, stderr: err }),
      );
    });
    expect(stdout.trim()).toBe('granted 20');
    expect(stderr).not.toContain('MaxListenersExceededWarning');
  });
});

describe('cancelling a wait with an AbortSignal', () => {
  test('an aborted blocked waiter (mid-BLMOVE) rejects at once with the reason, and strands nothing', async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({}, holder.name);
    const held = await holder.acquire();
    const controller = new AbortController();
    const waiting = waiter.acquire({ signal: controller.signal });
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    const started = performance.now();
    const reason = new Error('user went away');
    controller.abort(reason);
    await expect(waiting).rejects.toBe(reason);
    expect(performance.now() - started).toBeLessThan(1000);
    await until(async () => (await blockedClients(fixture.redis)) === 0, 5000, 'the BLMOVE to end');
    expect(await held.release()).toBe(true);
    await until(async () => (await waiter.availableCount()) === 1, 5000, 'the token back');
    // recover.lua marks the aborted grant id abandoned, so that a late pipeline is refused.
    const problems = censusProblems(await takeCensus(fixture.redis, holder.name), 1, {
      idle: true,
      marksAllowed: true,
    });
    expect(problems).toEqual([]);
    expect(waiter.stats().aborts).toBe(1);
  });

  test('an abort racing the hand-off never loses or strands the token', async () => {
    const holder = fixture.semaphore();
    const waiter = fixture.semaphore({}, holder.name);
    const outcomes = { granted: 0, aborted: 0 };
    for (let i = 0; i < 15; i++) {
      const held = await holder.acquire();
      const controller = new AbortController();
      const waiting = waiter.lock(null, { signal: controller.signal });
      await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
      // Release and abort in the same instant: the token may reach the waiter as it goes. Every third
      // round aborts just before releasing, so the aborted ending happens whatever the machine's speed.
      if (i % 3 === 0) controller.abort();
      await Promise.all([held.release(), sleep((i % 3) - 1).then(() => controller.abort())]);
      const token = await waiting.catch((error: unknown) => {
        expect(error).toMatchObject({ name: 'AbortError' }); // an abort, not some other failure
        return null;
      });
      if (token === null) {
        outcomes.aborted++;
      } else {
        outcomes.granted++;
        expect(await waiter.unlock(token)).toBe(1);
      }
      await until(async () => (await holder.availableCount()) === 1, 5000, 'the token back');
      // An aborted wait is settled by recover in the background (its registration becomes a mark).
      const problems = async () =>
        censusProblems(await takeCensus(fixture.redis, holder.name), 1, { idle: true, marksAllowed: true });
      await until(async () => (await problems()).length === 0, 5000, 'the aborted wait to settle').catch(
        () => undefined,
      );
      expect(await problems()).toEqual([]);
    }
    // Both endings happen and both are clean (checked above); which one wins each race is chance.
    expect(outcomes.aborted).toBeGreaterThan(0);
  }, 60_000);

  test('an abort while queued locally for a connection leaves the queue in order', async () => {
    const holder = fixture.semaphore();
    const waiters = fixture.semaphore({ maxBlockingConnections: 1 }, holder.name);
    const held = await holder.acquire();
    const first = waiters.acquire();
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the first waiter to block');
    const controller = new AbortController();
    const second = waiters.acquire({ signal: controller.signal });
    const third = waiters.acquire();
    controller.abort();
    await expect(second).rejects.toMatchObject({ name: 'AbortError' });
    await held.release();
    const firstLease = await first;
    await firstLease.release();
    await (await third).release();
    expect(await holder.availableCount()).toBe(1);
  });

  test('an abort is prompt even while Redis stalls; what the wait took is given back afterwards', async () => {
    const server = await startRedisServer();
    const admin = await connectClient(server.url);
    const holder = new Semaphore(`abort:${server.port}`, { url: server.url });
    const waiter = new Semaphore(holder.name, { url: server.url });
    try {
      const held = await holder.acquire();
      const controller = new AbortController();
      const waiting = waiter.acquire({ signal: controller.signal });
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block');
      await admin.sendCommand(['CLIENT', 'PAUSE', '1500', 'WRITE']);
      const started = performance.now();
      controller.abort();
      await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
      expect(performance.now() - started).toBeLessThan(500);
      expect(await held.release()).toBe(true); // runs once the pause ends
      await until(async () => (await waiter.availableCount()) === 1, 10_000, 'the token back');
    } finally {
      await Promise.all([holder.close(), waiter.close()]);
      await admin.quit();
      await server.stop();
    }
  });

  test('an already aborted signal rejects before touching Redis; a timeout is not an abort', async () => {
    const sem = fixture.semaphore();
    const controller = new AbortController();
    controller.abort();
    await expect(sem.lock(100, { signal: controller.signal })).rejects.toMatchObject({ name: 'AbortError' });
    expect(await sem.exists()).toBe(false);
    const held = await sem.lock();
    const live = new AbortController();
    expect(await sem.lock(100, { signal: live.signal })).toBeNull(); // timed out, not aborted
    await sem.unlock(held);
    expect(sem.stats()).toMatchObject({ timeouts: 1, aborts: 1 });
  });
});
