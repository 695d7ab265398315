import { Mutex, type Semaphore } from '../../lib';
import { setCheckpointHook } from '../../lib/util/checkpoint';
import { takeCensus } from '../support/census';
import { useFixture } from '../support/fixture';
import { connectSemaphoreClient } from '../support/redis';

/**
 * Grant identity for the linear API: one instance shared by callers A and B. `unlock(token)` and
 * `consume(token)` end only grants `lock()` took without a callback and already resolved to its
 * caller; a grant of `acquire()`, `lock(fn)` or one handed over is never theirs.
 */
const fixture = useFixture();
afterEach(() => setCheckpointHook(undefined));

function sharedMutex(): Mutex {
  const mutex = new Mutex(fixture.semaphore().name, { redis: fixture.semaphoreRedis });
  closers.push(() => mutex.close());
  return mutex;
}
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

async function grantIdOfToken(sem: Semaphore, token: string): Promise<string | undefined> {
  return (await takeCensus(fixture.redis, sem.name)).owners[token];
}

describe('after a hand-over', () => {
  test("A's unlock(token) leaves B's grant of that token alone: no second holder", async () => {
    const shared = sharedMutex();
    const worker = fixture.semaphore({ redis: await connectSemaphoreClient() }, shared.name);
    const rival = fixture.semaphore({ redis: await connectSemaphoreClient() }, shared.name);
    const lostEvents: unknown[] = [];
    shared.on('lost', (event) => lostEvents.push(event));

    const a = await shared.acquire(); // caller A
    expect(await worker.release(a.handOver())).toBe(true);
    const b = await shared.acquire(); // caller B, same instance, same token
    expect(b.token).toBe(a.token);

    expect(await shared.unlock(a.token)).toBe(false); // A's late unlock
    expect(await shared.consume(a.token)).toBe(false);
    expect(await shared.unlock()).toBe(false);
    expect(await grantIdOfToken(shared, b.token)).toBe(b.grantId);
    expect(b.signal.aborted).toBe(false);
    expect(lostEvents).toEqual([]);
    expect(await rival.lock(0)).toBeNull(); // no second holder
    expect(await b.release()).toBe(true);
  });

  test('neither is a grant of lock(fn): only its callback ends it', async () => {
    const shared = sharedMutex();
    const a = await shared.acquire();
    expect(await shared.release(a.handOver())).toBe(true); // the handle released (here by the same instance)
    const unlocks = await shared.lock(async (token, signal) => {
      const during = [await shared.unlock(token), await shared.consume(token), await shared.unlock()];
      return { during, aborted: signal.aborted, held: await grantIdOfToken(shared, token) };
    });
    expect(unlocks).toEqual({ during: [false, false, false], aborted: false, held: expect.any(String) });
  });
});

describe('a repeated unlock(token)', () => {
  test("made before B's lock() resolved the token (the grant is recorded, B not told yet), ends nothing of B's", async () => {
    const shared = sharedMutex();
    const token = await shared.lock(); // A
    expect(await shared.unlock(token)).toBe(1);
    let late: Promise<number | false> | undefined;
    setCheckpointHook((step) => {
      if (step !== 'lock:granted' || late) return;
      late = shared.unlock(token); // A again, while B's grant exists but B has not received it
      return late.then(() => undefined);
    });
    const forB = await shared.lock(); // B
    setCheckpointHook(undefined);
    expect(forB).toBe(token);
    expect(await late).toBe(false);
    expect(await shared.isLocked()).toBe(true);
    expect(await shared.unlock(forB)).toBe(1); // B's own unlock ends B's grant
    expect(await shared.unlock(forB)).toBe(false); // and a repeat ends nothing
  });

  test("after B acquire()d the token, or holds it in lock(fn), ends nothing of B's", async () => {
    const shared = sharedMutex();
    const token = await shared.lock();
    expect(await shared.unlock(token)).toBe(1);
    const b = await shared.acquire();
    expect(await shared.unlock(token)).toBe(false);
    expect(await grantIdOfToken(shared, token)).toBe(b.grantId);
    expect(await b.release()).toBe(true);

    const again = await shared.lock();
    expect(await shared.unlock(again)).toBe(1);
    const inside = await shared.lock(async (held) => {
      const repeated = await shared.unlock(again);
      return { repeated, still: (await grantIdOfToken(shared, held)) !== undefined };
    });
    expect(inside).toEqual({ repeated: false, still: true });
  });

  test("the one case the instance cannot tell apart: after B's own lock() resolved the token, it is B's unlock too", async () => {
    // Documented in USAGE (unlock) and GUARANTEES: a token string names no caller.
    const shared = sharedMutex();
    const token = await shared.lock(); // A
    expect(await shared.unlock(token)).toBe(1);
    expect(await shared.lock()).toBe(token); // B
    expect(await shared.unlock(token)).toBe(1); // A's repeat, or B's own: the same call
    expect(await shared.isLocked()).toBe(false);
  });
});
