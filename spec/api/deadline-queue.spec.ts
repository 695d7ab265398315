/**
 * DeadlineQueue: the one-timer time limit of every release try. Real timers; no Redis needed.
 */
import { DeadlineExceeded, DeadlineQueue } from '../../lib/util/deadline';

const MS = 60;

/** A promise and the functions that settle it. */
function deferred<T>() {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** How a watched call settled, and when (ms after `start`). */
async function outcome(
  watched: Promise<unknown>,
  start: number,
): Promise<{ value?: unknown; error?: unknown; at: number }> {
  try {
    const value = await watched;
    return { value, at: performance.now() - start };
  } catch (error) {
    return { error, at: performance.now() - start };
  }
}

const expired = (error: DeadlineExceeded) => new Error(`wrapped: ${error.message}`, { cause: error });

test('a call that answers settles as it did; one that never answers rejects with what `expired` makes, no earlier than the limit', async () => {
  const queue = new DeadlineQueue(MS);
  const start = performance.now();
  const answered = deferred<string>();
  const refused = deferred<string>();
  const silent = deferred<string>();
  const results = Promise.all([
    outcome(queue.watch(answered.promise, 'unlock', expired), start),
    outcome(queue.watch(refused.promise, 'unlock', expired), start),
    outcome(queue.watch(silent.promise, 'unlock', expired), start),
  ]);
  answered.resolve('ok');
  refused.reject(new Error('NOPERM'));
  const [first, second, third] = await results;
  expect(first.value).toBe('ok');
  expect(first.at).toBeLessThan(MS);
  expect((second.error as Error).message).toBe('NOPERM');
  expect((third.error as Error).message).toBe(`wrapped: unlock: no answer within ${MS} ms`);
  expect((third.error as Error).cause).toBeInstanceOf(DeadlineExceeded);
  expect(third.at).toBeGreaterThanOrEqual(MS - 1);
  expect(third.at).toBeLessThan(MS + 1000);
});

test('calls that start later keep their own limit: the one timer re-arms for each, whatever order they answer in', async () => {
  const queue = new DeadlineQueue(MS);
  const start = performance.now();
  const early = deferred<number>();
  const watchedEarly = outcome(queue.watch(early.promise, 'early', expired), start);
  await new Promise((resolve) => setTimeout(resolve, MS / 2));
  // Started half a limit later: still running when the first limit passes.
  const late = deferred<number>();
  const watchedLate = outcome(queue.watch(late.promise, 'late', expired), start);
  const earlyResult = await watchedEarly;
  expect((earlyResult.error as Error).message).toContain('early: no answer');
  late.resolve(7);
  expect((await watchedLate).value).toBe(7);
  // And one started after the queue emptied gets a timer again.
  const again = performance.now();
  const afterwards = await outcome(queue.watch(new Promise(() => undefined), 'afterwards', expired), again);
  expect((afterwards.error as Error).message).toContain('afterwards: no answer');
  expect(afterwards.at).toBeGreaterThanOrEqual(MS - 1);
});

test('thousands of calls answering out of order, a few never: each settles once, as it should', async () => {
  // A limit the answering loop below never nears, even on a loaded machine (3 × MS did not, with
  // other specs in parallel); only the two silent calls wait it out.
  const queue = new DeadlineQueue(1000);
  const start = performance.now();
  // The first silent call sits past 1,024 answered ones: the queue drops those by compacting, not emptying.
  const calls = Array.from({ length: 3000 }, (_, i) => ({
    i,
    settle: deferred<number>(),
    silent: i === 1500 || i === 2999,
  }));
  const watched = calls.map((call) => outcome(queue.watch(call.settle.promise, `call ${call.i}`, expired), start));
  // Answers in a scrambled order, spread over a few ticks.
  const order = calls.filter((call) => !call.silent).sort((a, b) => ((a.i * 7919) % 3001) - ((b.i * 7919) % 3001));
  for (const [n, call] of order.entries()) {
    call.settle.resolve(call.i);
    if (n % 500 === 0) await new Promise((resolve) => setImmediate(resolve));
  }
  const results = await Promise.all(watched);
  for (const call of calls) {
    const result = results[call.i]!;
    if (call.silent) expect((result.error as Error).message).toContain(`call ${call.i}: no answer`);
    else expect(result).toEqual({ value: call.i, at: expect.any(Number) });
  }
  // The queue still works after compacting and emptying.
  const later = deferred<string>();
  const watchedLater = queue.watch(later.promise, 'later', expired);
  later.resolve('fine');
  await expect(watchedLater).resolves.toBe('fine');
  await expect(queue.watch(new Promise(() => undefined), 'stuck', expired)).rejects.toThrow('stuck: no answer');
});

test('an `expired` that throws rejects its call with what it threw, and the calls after it still get their limit', async () => {
  const queue = new DeadlineQueue(MS);
  const broken = queue.watch(new Promise<never>(() => undefined), 'broken', () => {
    throw new TypeError('expired threw');
  });
  const next = queue.watch(new Promise<never>(() => undefined), 'next', expired);
  await expect(broken).rejects.toThrow('expired threw');
  await expect(next).rejects.toThrow('wrapped: next: no answer');
  await expect(queue.watch(new Promise<never>(() => undefined), 'later', expired)).rejects.toThrow('later: no answer');
});

test("`settle` tells `failed` when the call's time limit ends, and `expired` defaults to `failed` with it", async () => {
  const queue = new DeadlineQueue(MS);
  const before = performance.now();
  const deadlines: number[] = [];
  const failed = (error: unknown, deadline: number) => {
    deadlines.push(deadline);
    return error instanceof DeadlineExceeded ? 'expired' : 'refused';
  };
  const refused = queue.settle<string, string>(
    (_, fail) => setImmediate(() => fail(new Error('NOSCRIPT'))),
    'unlock',
    String,
    failed,
  );
  const silent = queue.settle<string, string>(() => undefined, 'unlock', String, failed);
  const after = performance.now();
  expect(await Promise.all([refused, silent])).toEqual(['refused', 'expired']);
  for (const deadline of deadlines) {
    expect(deadline).toBeGreaterThanOrEqual(before + MS);
    expect(deadline).toBeLessThanOrEqual(after + MS);
  }
});
