import { createLocks, LockLostError, Mutex, type LockCallback, type Locks, type SemaphoreOptions } from '../../lib';
import { useFixture } from '../support/fixture';
import { sleep, until } from '../support/redis';

/**
 * A callback whose token was lost while it ran never looks like a plain success: `lock(fn)` rejects
 * with a `LockLostError` carrying what `fn` resolved. Real losses only: a lease that ran out with
 * autoRefresh off, and another instance signalling the held token back (its grant ends in Redis).
 */
const fixture = useFixture();
const closers: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(closers.splice(0).map((close) => close()));
});

type Runner = <T>(options: SemaphoreOptions, name: string, fn: LockCallback<T>) => Promise<Awaited<T>>;

const runners: Array<[string, Runner]> = [
  ['Semaphore#lock(fn)', (options, name, fn) => fixture.semaphore(options, name).lock(fn)],
  ['Semaphore#lock(timeout, fn)', (options, name, fn) => fixture.semaphore(options, name).lock(5000, fn)],
  [
    'Mutex#lock(fn)',
    (options, name, fn) => {
      const mutex = new Mutex(name, { redis: fixture.semaphoreRedis, ...options });
      closers.push(() => mutex.close());
      return mutex.lock(fn);
    },
  ],
  [
    'locks.lock(name, fn)',
    (options, name, fn) => {
      const locks: Locks = createLocks({ redis: fixture.semaphoreRedis, ...options });
      closers.push(() => locks.close());
      return locks.lock(name, fn);
    },
  ],
];

async function outcome(promise: Promise<unknown>): Promise<{ resolved: unknown } | { rejected: unknown }> {
  return promise.then(
    (resolved) => ({ resolved }),
    (rejected: unknown) => ({ rejected }),
  );
}

describe.each(runners)('%s', (_, run) => {
  test('a lease that ran out while fn ran (autoRefresh off): rejects with LockLostError("expired") carrying the result', async () => {
    const name = fixture.semaphore().name;
    let abortedInFn = false;
    const result = await outcome(
      run({ staleClientTimeout: 150, autoRefresh: false }, name, async (_token, signal) => {
        await until(() => signal.aborted, 5000, 'the lease to run out');
        abortedInFn = true;
        return 'work done';
      }),
    );
    expect(abortedInFn).toBe(true);
    expect(result).toEqual({ rejected: expect.any(LockLostError) });
    const error = (result as { rejected: LockLostError }).rejected;
    expect({ reason: error.reason, result: error.result }).toEqual({ reason: 'expired', result: 'work done' });
    expect(error.message).toMatch(/while the callback ran/);
  });

  test('another instance signals the token back while fn runs (autoRefresh on): rejects with LockLostError("reclaimed")', async () => {
    const other = fixture.semaphore();
    const result = await outcome(
      run({ staleClientTimeout: 300 }, other.name, async (token, signal) => {
        await other.signal(token); // the grant ends in Redis; the holder's next refresh finds out
        await until(() => signal.aborted, 5000, 'the refresh to report the loss');
        return { rows: 3 };
      }),
    );
    expect(result).toEqual({ rejected: expect.any(LockLostError) });
    const error = (result as { rejected: LockLostError }).rejected;
    expect({ reason: error.reason, result: error.result }).toEqual({ reason: 'reclaimed', result: { rows: 3 } });
  });

  test('without a lease, a grant ended meanwhile is found at the release: still a LockLostError, not a success', async () => {
    const other = fixture.semaphore();
    let abortedInFn: boolean | undefined;
    const result = await outcome(
      run({ staleClientTimeout: null }, other.name, async (token, signal) => {
        await other.signal(token);
        await sleep(50);
        abortedInFn = signal.aborted; // nothing refreshes: fn cannot know
        return 7;
      }),
    );
    expect(abortedInFn).toBe(false);
    expect(result).toEqual({ rejected: expect.any(LockLostError) });
    expect((result as { rejected: LockLostError }).rejected).toMatchObject({ reason: 'reclaimed', result: 7 });
  });

  test('fn that throws after the loss rejects with its own error; a callback that kept its token resolves', async () => {
    const name = fixture.semaphore().name;
    const own = new Error('fn failed');
    const thrown = await outcome(
      run({ staleClientTimeout: 150, autoRefresh: false }, name, async (_token, signal) => {
        await until(() => signal.aborted, 5000, 'the lease to run out');
        throw own;
      }),
    );
    expect(thrown).toEqual({ rejected: own });
    expect(await outcome(run({ staleClientTimeout: 10_000 }, name, async () => 'fine'))).toEqual({ resolved: 'fine' });
  });
});
