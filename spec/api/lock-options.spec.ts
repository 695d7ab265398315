import { createLocks, Mutex, type Locks, type Semaphore } from '../../lib';
import { useFixture } from '../support/fixture';

/**
 * Every form of `lock` (and `wait`, `acquire`, the Mutex's and the lock manager's) takes the same
 * options, `signal` included, and anything it does not expect is a TypeError naming it.
 */
const fixture = useFixture();
const managers: Locks[] = [];
afterEach(async () => {
  await Promise.all(managers.splice(0).map((locks) => locks.close()));
});

const afterTest: Array<() => Promise<void>> = [];
afterEach(async () => {
  await Promise.all(afterTest.splice(0).map((close) => close()));
});

function manager(): Locks {
  const locks = createLocks({ redis: fixture.semaphoreRedis });
  managers.push(locks);
  return locks;
}

/** What `promise` settles to within `ms` (`'still waiting'` if it has not), and how long it took. */
async function settleWithin(promise: Promise<unknown>, ms: number) {
  const started = performance.now();
  let timer: NodeJS.Timeout | undefined;
  const outcome = await Promise.race([
    promise.then(
      (value) => ({ resolved: value }),
      (error: unknown) => ({ rejected: error }),
    ),
    new Promise<'still waiting'>((resolve) => (timer = setTimeout(() => resolve('still waiting'), ms))),
  ]);
  clearTimeout(timer);
  return { outcome, elapsed: performance.now() - started };
}

type Form = (
  target: { sem: Semaphore; locks: Locks; name: string },
  signal: AbortSignal,
  fn: () => string,
) => Promise<unknown>;

const forms: Array<[string, Form]> = [
  ['sem.lock(fn, { signal })', ({ sem }, signal, fn) => sem.lock(fn, { signal })],
  ['sem.lock(5000, fn, { signal })', ({ sem }, signal, fn) => sem.lock(5000, fn, { signal })],
  ['sem.lock(null, fn, { signal })', ({ sem }, signal, fn) => sem.lock(null, fn, { signal })],
  ['sem.lock(5000, { signal })', ({ sem }, signal) => sem.lock(5000, { signal })],
  ['sem.wait(fn, { signal })', ({ sem }, signal, fn) => sem.wait(fn, { signal })],
  ['sem.acquire({ timeout: 5000, signal })', ({ sem }, signal) => sem.acquire({ timeout: 5000, signal })],
  ['locks.lock(name, fn, { signal })', ({ locks, name }, signal, fn) => locks.lock(name, fn, { signal })],
  ['locks.lock(name, 5000, fn, { signal })', ({ locks, name }, signal, fn) => locks.lock(name, 5000, fn, { signal })],
  ['locks.acquire(name, { signal })', ({ locks, name }, signal) => locks.acquire(name, { signal })],
];

describe('an abort ends the wait in every form', () => {
  for (const kind of ['Semaphore', 'Mutex'] as const) {
    test.each(forms)(`${kind}: %s rejects with the signal's reason well within a second`, async (_, form) => {
      const holder = fixture.semaphore();
      const name = holder.name;
      const sem =
        kind === 'Mutex'
          ? (() => {
              const mutex = new Mutex(name, { redis: fixture.semaphoreRedis });
              afterTest.push(() => mutex.close());
              return mutex;
            })()
          : fixture.semaphore({}, name);
      const token = await holder.lock(); // the only token: every form below must wait
      const locks = manager();
      let ran = false;
      const signal = AbortSignal.timeout(200);
      const { outcome, elapsed } = await settleWithin(
        form({ sem, locks, name }, signal, () => {
          ran = true;
          return 'ran';
        }),
        3000,
      );
      expect(outcome).toEqual({ rejected: signal.reason });
      expect((signal.reason as Error).name).toBe('TimeoutError');
      expect(elapsed).toBeLessThan(1000);
      expect(ran).toBe(false);
      expect(await holder.unlock(token)).toBe(1); // the aborted waits took nothing
    });
  }
});

describe('anything unexpected is a TypeError naming it, before anything touches Redis', () => {
  const fn = () => 'ran';
  const cases: Array<[string, (sem: Semaphore, locks: Locks) => Promise<unknown>, RegExp]> = [
    ['acquire({ priority: 3 })', (sem) => sem.acquire({ priority: 3 } as never), /Unknown option `priority`/],
    ['acquire({ timeout, signl })', (sem) => sem.acquire({ timeout: 5, signl: null } as never), /`signl`/],
    ['acquire(null)', (sem) => sem.acquire(null as never), /acquire options to be/],
    ['acquire([])', (sem) => sem.acquire([] as never), /acquire options to be/],
    ['acquire(signal)', (sem) => sem.acquire(AbortSignal.abort() as never), /acquire options to be/],
    [
      'acquire({}, extra)',
      (sem) => (sem.acquire as (...a: unknown[]) => Promise<unknown>).call(sem, {}, 1),
      /at most 1 argument/,
    ],
    ['lock(fn, { priority: 3 })', (sem) => sem.lock(fn, { priority: 3 } as never), /Unknown option `priority`/],
    ['lock(fn, 5000)', (sem) => sem.lock(fn, 5000 as never), /options of lock\(fn, options\)/],
    ['lock(fn, signal)', (sem) => sem.lock(fn, AbortSignal.abort() as never), /options of lock\(fn, options\)/],
    ['lock(fn, { signal: "x" })', (sem) => sem.lock(fn, { signal: 'x' } as never), /`signal` to be an AbortSignal/],
    [
      'lock(fn, {}, extra)',
      (sem) => (sem.lock as (...a: unknown[]) => Promise<unknown>).call(sem, fn, {}, 1),
      /at most 2 arguments/,
    ],
    [
      'lock(5000, fn, { timeout: 5 })',
      (sem) => sem.lock(5000, fn, { timeout: 5 } as never),
      /Unknown option `timeout`/,
    ],
    ['lock(5000, fn, "x")', (sem) => sem.lock(5000, fn, 'x' as never), /options of lock\(timeout, fn, options\)/],
    [
      'lock(5000, fn, {}, extra)',
      (sem) => (sem.lock as (...a: unknown[]) => Promise<unknown>).call(sem, 5000, fn, {}, 1),
      /at most 3 arguments/,
    ],
    ['lock(5000, { priority: 3 })', (sem) => sem.lock(5000, { priority: 3 } as never), /Unknown option `priority`/],
    [
      'lock(5000, {}, fn)',
      (sem) => (sem.lock as (...a: unknown[]) => Promise<unknown>).call(sem, 5000, {}, fn),
      /second argument of lock to be a function/,
    ],
    ['wait(fn, { priority: 3 })', (sem) => sem.wait(fn, { priority: 3 } as never), /Unknown option `priority`/],
    [
      'locks.lock(name, fn, { priority: 3 })',
      (sem, locks) => locks.lock(sem.name, fn, { priority: 3 } as never),
      /Unknown option `priority`/,
    ],
    [
      'locks.lock(name, fn, 5000)',
      (sem, locks) => locks.lock(sem.name, fn, 5000 as never),
      /options of lock\(fn, options\)/,
    ],
    [
      'locks.lock(name, 5000, fn, { sigal })',
      (sem, locks) => locks.lock(sem.name, 5000, fn, { sigal: null } as never),
      /`sigal`/,
    ],
    [
      'locks.lock(name, 5000)',
      (sem, locks) => (locks.lock as (...a: unknown[]) => Promise<unknown>).call(locks, sem.name, 5000),
      /last argument of lock to be a function/,
    ],
    [
      'locks.acquire(name, { priority: 3 })',
      (sem, locks) => locks.acquire(sem.name, { priority: 3 } as never),
      /Unknown option `priority`/,
    ],
    ['locks.acquire(name, 5000)', (sem, locks) => locks.acquire(sem.name, 5000 as never), /acquire options to be/],
  ];

  test.each(cases)('%s', async (_, call, message) => {
    const sem = fixture.semaphore();
    const locks = manager();
    for (const target of [sem, new Mutex(sem.name, { redis: fixture.semaphoreRedis })]) {
      const rejection = await call(target, locks).then(
        () => 'resolved',
        (error: unknown) => error,
      );
      expect(rejection).toBeInstanceOf(TypeError);
      expect((rejection as Error).message).toMatch(message);
      await target.close();
    }
    expect(await fixture.redis.exists(`SEMAPHORE:${sem.name}:EXISTS`)).toBe(0);
  });
});
