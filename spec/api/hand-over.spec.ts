import { Semaphore, type GrantHandle, type Lease, type LockLostReason, type SemaphoreOptions } from '../../lib';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { useFixture } from '../support/fixture';
import { connectSemaphoreClient, sleep } from '../support/redis';

/**
 * Hand-over by grant id: a lease acquired by one instance (the scheduler) is handed over with
 * `lease.handOver()` and released or refreshed by another (the worker), on a client of its own, as
 * a second process would. Only the grant the handle names is ever touched.
 */
const fixture = useFixture();

/** The scheduler's semaphore (on the fixture's client) and the worker's, on a connection of its own. */
async function pair(options: SemaphoreOptions = {}) {
  const lost: Array<{ token: string; reason: LockLostReason }> = [];
  const scheduler = fixture.semaphore({ onLockLost: (token, reason) => void lost.push({ token, reason }), ...options });
  const worker = fixture.semaphore({ ...options, redis: await connectSemaphoreClient() }, scheduler.name);
  return { scheduler, worker, lost };
}

/** The handle as the worker gets it: through JSON, as a message between processes. */
function overTheWire(handle: GrantHandle): GrantHandle {
  return JSON.parse(JSON.stringify(handle)) as GrantHandle;
}

async function grantIdOfToken(name: string, token: string): Promise<string | undefined> {
  return (await takeCensus(fixture.redis, name)).owners[token];
}

/** Redis is exact: every token once, whole grant records; `idle`: every token free and nobody waiting. */
async function expectExact(name: string, resources: number, idle: boolean): Promise<void> {
  const census = await takeCensus(fixture.redis, name);
  expect({ problems: censusProblems(census, resources, { idle }), census: describeCensus(census) }).toMatchObject({
    problems: [],
  });
}

describe('lease.handOver()', () => {
  test('gives a plain handle naming the grant, and the grant stays held in Redis', async () => {
    const { scheduler } = await pair({ staleClientTimeout: 10_000 });
    const lease = await scheduler.acquire();
    expect(lease.grantId).toBe(await grantIdOfToken(scheduler.name, lease.token));
    const handle = lease.handOver();
    expect(handle).toEqual({
      semaphore: scheduler.name,
      token: lease.token,
      grantId: lease.grantId,
      fence: lease.fence,
      leaseMs: 10_000,
    });
    expect(overTheWire(handle)).toEqual(handle);
    expect(lease.handOver()).toBe(handle); // idempotent
    expect(await grantIdOfToken(scheduler.name, lease.token)).toBe(lease.grantId);
    expect(await scheduler.isLocked()).toBe(false); // no longer this instance's
    expect(scheduler.fence(lease.token)).toBeUndefined();
    expect(await scheduler.isLocked(lease.token)).toBe(true); // but held
  });

  test('the scheduler no longer releases or refreshes it: not by the lease, its scope, unlock(token) or autoRefresh', async () => {
    const { scheduler, worker, lost } = await pair({ staleClientTimeout: 600 });
    let handle: GrantHandle;
    let lease: Lease;
    {
      await using scoped = await scheduler.acquire();
      lease = scoped;
      handle = scoped.handOver();
    } // the scope ends: nothing released
    expect(await lease.release()).toBe(false);
    expect(await lease.refresh()).toBe(false);
    expect(await scheduler.unlock(handle.token)).toBe(false);
    expect(await scheduler.refresh(handle.token)).toBe(false);
    expect(await scheduler.consume(handle.token)).toBe(false);
    expect(await grantIdOfToken(scheduler.name, handle.token)).toBe(handle.grantId);

    // autoRefresh would renew it every 200 ms: past the lease, nobody has, so it is stale, and the
    // scheduler tells nobody it was "lost" (it is no longer its to lose).
    await sleep(900);
    expect(await worker.releaseStaleLocks()).toBe(1);
    expect(lease.signal.aborted).toBe(false);
    expect(lost).toEqual([]);
    expect(scheduler.stats().losses).toBe(0);
    expect(await worker.release(handle)).toBe(false);
    await expectExact(scheduler.name, 1, true);
  });

  test('throws once the lease was released; a released lease hands nothing over', async () => {
    const { scheduler } = await pair();
    const lease = await scheduler.acquire();
    expect(await lease.release()).toBe(true);
    expect(() => lease.handOver()).toThrow(/was released: nothing to hand over/);
    const other = await scheduler.acquire();
    expect(await scheduler.unlock(other.token)).toBe(false); // a lease's grant is never unlock's
    expect(await other.release()).toBe(true);
    expect(() => other.handOver()).toThrow(/was released/);
  });
});

describe('sem.release(handle)', () => {
  test('another instance releases exactly that grant; a second release resolves false', async () => {
    const { scheduler, worker } = await pair({ resources: 2 });
    const lease = await scheduler.acquire();
    const kept = await scheduler.acquire();
    const handle = overTheWire(lease.handOver());
    await expectExact(scheduler.name, 2, false);

    const released: unknown[] = [];
    worker.on('released', (event) => released.push(event));
    expect(await worker.release(handle)).toBe(true);
    expect(await worker.availableCount()).toBe(1);
    expect(await worker.release(handle)).toBe(false); // idempotent by grant id
    expect(await scheduler.release(handle)).toBe(false);
    expect(await worker.availableCount()).toBe(1);
    expect(released).toEqual([]); // not a holding of the worker's

    // The scheduler's other lease is untouched, and its own release still works.
    expect(await grantIdOfToken(scheduler.name, kept.token)).toBe(kept.grantId);
    expect(await kept.release()).toBe(true);
    await expectExact(scheduler.name, 2, true);
  });

  test('after the grant was reclaimed and the token granted again, resolves false and leaves the new grant', async () => {
    const { scheduler, worker } = await pair({ staleClientTimeout: 300 });
    const handle = overTheWire((await scheduler.acquire()).handOver());
    await sleep(450); // nobody refreshes it
    const rival = fixture.semaphore({ staleClientTimeout: 10_000 }, scheduler.name);
    const next = await rival.acquire({ timeout: 0 }); // reclaims the stale grant, then takes the token
    expect(next.token).toBe(handle.token);
    expect(next.grantId).not.toBe(handle.grantId);
    expect(next.fence).toBeGreaterThan(handle.fence);

    expect(await worker.release(handle)).toBe(false);
    expect(await worker.refresh(handle)).toBe(false);
    expect(await grantIdOfToken(scheduler.name, handle.token)).toBe(next.grantId);
    await expectExact(scheduler.name, 1, false);
    expect(await next.release()).toBe(true);
    await expectExact(scheduler.name, 1, true);
  });

  test('a grant signalled back, or deleted, resolves false', async () => {
    const { scheduler, worker } = await pair();
    const signalled = (await scheduler.acquire()).handOver();
    await worker.signal(signalled.token);
    expect(await worker.release(signalled)).toBe(false);
    const deleted = (await scheduler.acquire()).handOver();
    await worker.delete();
    expect(await worker.release(deleted)).toBe(false);
    expect(await fixture.redis.exists(`SEMAPHORE:${scheduler.name}:AVAILABLE`)).toBe(0); // nothing pushed
  });

  test('a grant this very instance holds is released through its holding', async () => {
    const { scheduler } = await pair({ resources: 2 });
    const lease = await scheduler.acquire();
    const token = await scheduler.lock();
    const released: unknown[] = [];
    scheduler.on('released', (event) => released.push(event));
    // A handle made from the lease without handing it over: the holding ends with the release.
    const own = {
      semaphore: scheduler.name,
      token: lease.token,
      grantId: lease.grantId,
      fence: lease.fence,
      leaseMs: 30_000,
    };
    expect(await scheduler.release(own)).toBe(true);
    expect(released).toEqual([{ token: lease.token, fence: lease.fence, heldMs: expect.any(Number) }]);
    expect(await lease.release()).toBe(false);
    expect(scheduler.fence(lease.token)).toBeUndefined();
    expect(await scheduler.isLocked()).toBe(true); // the lock() holding is still there
    expect(await scheduler.unlock()).toBe(2);
    expect(token).not.toBe(lease.token);
    await expectExact(scheduler.name, 2, true);
  });

  test('a handle the same instance handed over is released from Redis', async () => {
    const { scheduler } = await pair();
    const handle = (await scheduler.acquire()).handOver();
    expect(await scheduler.release(handle)).toBe(true);
    await expectExact(scheduler.name, 1, true);
  });
});

describe('sem.refresh(handle)', () => {
  test('keeps a handed-over grant past its original lease, until the worker releases it', async () => {
    const { scheduler, worker } = await pair({ staleClientTimeout: 600 });
    const handle = overTheWire((await scheduler.acquire()).handOver());
    const rival = fixture.semaphore({ staleClientTimeout: 600 }, scheduler.name);
    for (let i = 0; i < 8; i++) {
      await sleep(200); // 1.6 s in all, over two leases
      expect(await worker.refresh(handle)).toBe(true);
      expect(await rival.lock(0)).toBeNull(); // lock(0) reclaims stale holders first: not this one
    }
    expect(await rival.releaseStaleLocks()).toBe(0);
    expect(await grantIdOfToken(scheduler.name, handle.token)).toBe(handle.grantId);
    expect(await worker.release(handle)).toBe(true);
    expect(await worker.refresh(handle)).toBe(false);
    await expectExact(scheduler.name, 1, true);
  });

  test('a grant this very instance holds is refreshed through its holding', async () => {
    const { scheduler } = await pair({ staleClientTimeout: 10_000 });
    const lease = await scheduler.acquire();
    const own = {
      semaphore: scheduler.name,
      token: lease.token,
      grantId: lease.grantId,
      fence: lease.fence,
      leaseMs: 10_000,
    };
    expect(await scheduler.refresh(own)).toBe(true);
    await scheduler.signal(lease.token); // the grant ends
    expect(await scheduler.refresh(own)).toBe(false);
    expect(lease.signal.aborted).toBe(true);
  });
});

describe('invalid handles', () => {
  test('are rejected with a TypeError before anything is sent to Redis', async () => {
    const { scheduler, worker } = await pair();
    const good = { semaphore: scheduler.name, token: '0', grantId: 'abc.1', fence: 7, leaseMs: 30_000 };
    const bad: unknown[] = [
      undefined,
      null,
      '0',
      7,
      [],
      {},
      { ...good, semaphore: undefined },
      { ...good, token: 0 },
      { ...good, grantId: '' },
      { ...good, grantId: 'a b' },
      { ...good, grantId: undefined },
      { ...good, fence: -1 },
      { ...good, fence: 1.5 },
      { ...good, fence: '7' },
      { ...good, leaseMs: 0 },
      { ...good, leaseMs: undefined },
    ];
    for (const handle of bad) {
      await expect(worker.release(handle as GrantHandle)).rejects.toThrow(TypeError);
      if (typeof handle === 'object' && handle !== null)
        await expect(worker.refresh(handle as GrantHandle)).rejects.toThrow(TypeError);
    }
    await expect(worker.release({ ...good, fence: -1 })).rejects.toThrow(
      /`fence` must be a non-negative integer, got number -1/,
    );
    await expect(worker.refresh(7 as never)).rejects.toThrow(/refresh to be a string or a handle/);
    await expect(worker.release({ ...good, semaphore: 'other' })).rejects.toThrow(
      `a grant of semaphore "other", not of "${scheduler.name}"`,
    );
    expect(await fixture.redis.exists(`SEMAPHORE:${scheduler.name}:EXISTS`)).toBe(0);
    // A well-formed handle of a grant that never was resolves false.
    expect(await worker.release(good)).toBe(false);
    expect(await worker.refresh({ ...good, leaseMs: null })).toBe(false);
  });
});

test('Semaphore.release is typed for handles only', () => {
  // @ts-expect-error a token is unlock's
  void (() => new Semaphore('x').release('0'));
});
