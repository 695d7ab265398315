import { createLocks, Mutex, Semaphore } from '../../lib';
import { useFixture } from '../support/fixture';
import { censusProblems, takeCensus } from '../support/census';
import { blockedClients } from '../support/redis';
import { DEFAULT_KEY_PREFIX, semaphoreKeys } from '../../lib/redis/keys';
import { readStatus } from '../../lib/admin/operations';
import { statusJson } from '../../lib/admin/json';
import { formatStatus } from '../../lib/cli/format';
import { metricsText } from '../../lib/dashboard/metrics';

/**
 * The `permits` option: k tokens as one grant (lib/redis/scripts/includes/weighted.lua, give_back.lua).
 * Fairness and crash safety have specs of their own (weighted-fairness, weighted-model, weighted-chaos).
 */
const fixture = useFixture();

const keysOf = (sem: Semaphore) => semaphoreKeys(sem.name);
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits (bounded) until `check` holds. */
async function until(check: () => Promise<boolean>, what: string, ms = 10_000): Promise<void> {
  const deadline = performance.now() + ms;
  while (!(await check())) {
    if (performance.now() > deadline) throw new Error(`not within ${ms} ms: ${what}`);
    await sleep(20);
  }
}

/** The grant ids GRABBED names, token by token. */
async function holders(sem: Semaphore): Promise<Record<string, string>> {
  return (await takeCensus(fixture.redis, sem.name)).owners;
}

/** Every token free and nobody registered, soon (an advance registration ends when its caller is idle). */
async function expectIdle(sem: Semaphore): Promise<void> {
  const problems = async () =>
    censusProblems(await takeCensus(fixture.redis, sem.name), sem.resources, { idle: true, marksAllowed: true });
  await until(async () => (await problems()).length === 0, 'an idle census', 10_000).catch(() => undefined);
  expect(await problems()).toEqual([]);
}

describe('permits: checked before anything touches Redis', () => {
  test.each([
    ['0', 0, RangeError, /at least 1/],
    ['-1', -1, RangeError, /at least 1/],
    ['1.5', 1.5, RangeError, /integer/],
    ['NaN', NaN, RangeError, /integer/],
    ['5 of 4', 5, RangeError, /at most the semaphore's 4 tokens, got 5/],
    ["'2'", '2', TypeError, /to be a number/],
  ])('permits %s is refused in every form', async (_, permits, type, message) => {
    const sem = fixture.semaphore({ resources: 4 });
    const options = { permits } as never;
    for (const call of [
      () => sem.lock(1000, options),
      () => sem.lock(() => 1, options),
      () => sem.lock(1000, () => 1, options),
      () => sem.acquire(options),
    ]) {
      const error = await call().then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(type);
      expect((error as Error).message).toMatch(message);
    }
    expect(await sem.exists()).toBe(false);
  });

  test('a Mutex takes one permit only', async () => {
    const mutex = new Mutex(fixture.semaphore().name, { redis: fixture.semaphoreRedis });
    await expect(mutex.acquire({ permits: 2 })).rejects.toThrow(RangeError);
    expect(await mutex.acquire({ permits: 1, timeout: 1000 }).then((lease) => lease.release())).toBe(true);
    await mutex.close();
  });
});

describe('a grant of k tokens', () => {
  test('takes k distinct tokens as one grant: one grant id and fence, k holders for the gem', async () => {
    const sem = fixture.semaphore({ resources: 4 });
    const lease = await sem.acquire({ permits: 3 });
    expect(lease.tokens).toHaveLength(3);
    expect(new Set(lease.tokens).size).toBe(3);
    expect(lease.token).toBe(lease.tokens[0]);
    const census = await takeCensus(fixture.redis, sem.name);
    expect(Object.keys(census.grabbed).sort()).toEqual([...lease.tokens].sort());
    const records = Object.values(census.grabbed).map((record) => record.split(' ').slice(1, 4).join(' '));
    expect(new Set(records).size).toBe(1); // grant id, fence and lease alike
    expect(records[0]!.split(' ')[1]).toBe(String(lease.fence));
    // The gem counts holders by GRABBED's fields and free tokens by AVAILABLE's length.
    expect(await fixture.redis.hLen(keysOf(sem).grabbed)).toBe(3);
    expect(await sem.availableCount()).toBe(1);
    expect(await lease.refresh()).toBe(true);
    expect(await lease.release()).toBe(true);
    await expectIdle(sem);
  });

  test('lock(0, { permits }) never blocks: all k or null', async () => {
    const sem = fixture.semaphore({ resources: 4 });
    const first = await sem.lock(0, { permits: 3 });
    expect(first).not.toBeNull();
    const started = performance.now();
    expect(await sem.lock(0, { permits: 2 })).toBeNull(); // one free: not two
    expect(performance.now() - started).toBeLessThan(2000);
    expect(Object.keys(await holders(sem))).toHaveLength(3);
    const one = await sem.lock(0, { permits: 1 });
    expect(one).not.toBeNull();
    expect(await sem.unlock(first!)).toBe(3);
    expect(await sem.unlock(one!)).toBe(4);
    await expectIdle(sem);
  });

  test('the callback form and the lock manager hold all k while fn runs, and release them after', async () => {
    const sem = fixture.semaphore({ resources: 3 });
    const seen = await sem.lock(5000, async (token) => Object.keys(await holders(sem)).length + token.length * 0, {
      permits: 2,
    });
    expect(seen).toBe(2);
    await expectIdle(sem);
    const locks = createLocks({ redis: fixture.semaphoreRedis, resources: 3 });
    const name = fixture.semaphore().name;
    const managed = await locks.lock(name, async () => Object.keys((await takeCensus(fixture.redis, name)).owners), {
      permits: 3,
    });
    expect(managed).toHaveLength(3);
    expect(Object.keys((await takeCensus(fixture.redis, name)).grabbed)).toEqual([]);
    await locks.close();
  });

  test('unlock(token) of a weighted lock() puts back all its tokens', async () => {
    const sem = fixture.semaphore({ resources: 4 });
    const token = await sem.lock(5000, { permits: 4 });
    expect(token).not.toBeNull();
    expect(await sem.availableCount()).toBe(0);
    expect(await sem.unlock(token!)).toBe(4);
    await expectIdle(sem);
  });

  test('a handed-over weighted grant is released whole by another instance', async () => {
    const sem = fixture.semaphore({ resources: 4 });
    const lease = await sem.acquire({ permits: 2 });
    const handle = JSON.parse(JSON.stringify(lease.handOver())) as ReturnType<typeof lease.handOver>;
    expect(handle.tokens).toEqual(lease.tokens);
    const other = fixture.semaphore({ resources: 4 }, sem.name);
    expect(await other.refresh(handle)).toBe(true);
    expect(await other.release(handle)).toBe(true);
    expect(await other.release(handle)).toBe(false);
    await expectIdle(sem);
  });

  test('losing one token loses the grant: refresh and release say so, and the rest go back', async () => {
    const sem = fixture.semaphore({ resources: 4 });
    const lease = await sem.acquire({ permits: 3 });
    // An operator frees one of its tokens (the CLI's release does this through forceRelease.lua).
    await fixture.redis.hDel(keysOf(sem).grabbed, lease.tokens[1]!);
    await fixture.redis.lPush(keysOf(sem).available, lease.tokens[1]!);
    expect(await lease.refresh()).toBe(false);
    expect(lease.signal.aborted).toBe(true);
    expect(await lease.release()).toBe(false);
    await expectIdle(sem);
  });

  test('a lapsed weighted lease is reclaimed whole', async () => {
    const sem = fixture.semaphore({ resources: 3, staleClientTimeout: 200, autoRefresh: false });
    const lease = await sem.acquire({ permits: 2 });
    await sleep(400);
    const other = fixture.semaphore({ resources: 3, staleClientTimeout: 5000 }, sem.name);
    const taken = await other.acquire({ permits: 3, timeout: 5000 });
    expect([...taken.tokens].sort()).toEqual(['0', '1', '2']);
    expect(await lease.release()).toBe(false);
    expect(await taken.release()).toBe(true);
    await expectIdle(sem);
  });
});

describe('waiting for k tokens', () => {
  test('served in arrival order across weights: a later waiter for fewer waits its turn', async () => {
    const sem = fixture.semaphore({ resources: 4, waitSlice: 1000 });
    const held = await Promise.all([1, 2, 3, 4].map(() => sem.acquire({ permits: 1 })));
    const order: string[] = [];
    // Arrival is the BLMOVE (a registration comes a round trip earlier, and a first blocking
    // connection may take longer to open than a second): each waits until the one before is blocked.
    const base = await blockedClients(fixture.redis);
    const three = sem.acquire({ permits: 3, timeout: 20_000 }).then((lease) => (order.push('three'), lease));
    await until(async () => (await blockedClients(fixture.redis)) >= base + 1, 'the waiter for 3 blocked');
    const one = sem.acquire({ permits: 1, timeout: 20_000 }).then((lease) => (order.push('one'), lease));
    await until(async () => (await blockedClients(fixture.redis)) >= base + 2, 'the waiter for 1 blocked');
    // One token at a time: the waiter for 3, first in line, collects each; the waiter for 1 waits.
    for (const [i, lease] of held.slice(0, 2).entries()) {
      expect(await lease.release()).toBe(true);
      await until(async () => (await fixture.redis.lLen(keysOf(sem).collected)) === i + 1, `${i + 1} collected`);
    }
    await sleep(300);
    expect(order).toEqual([]);
    const census = await takeCensus(fixture.redis, sem.name);
    expect(censusProblems(census, 4, { collectionAllowed: true })).toEqual([]);
    expect(census.collection.registration).not.toBeNull();
    expect(await held[2]!.release()).toBe(true);
    const threeLease = await three;
    await sleep(300);
    expect(order).toEqual(['three']);
    expect(await held[3]!.release()).toBe(true);
    const oneLease = await one;
    expect(order).toEqual(['three', 'one']);
    expect(threeLease.tokens).toHaveLength(3);
    await threeLease.release();
    await oneLease.release();
    await expectIdle(sem);
  });

  test('tokens freed together are handed on one at a time: the waiter for k ahead takes them first', async () => {
    // DESIGN "Weighted grants": pushed at once, Redis would serve the waiter for 1 behind it before
    // the claim of the waiter for 3 ran.
    const sem = fixture.semaphore({ resources: 4, waitSlice: 1000 });
    const two = await sem.acquire({ permits: 2 });
    const others = await Promise.all([1, 2].map(() => sem.acquire({ permits: 1 })));
    const order: string[] = [];
    // Arrival is the BLMOVE (a registration comes a round trip earlier, and a first blocking
    // connection may take longer to open than a second): each waits until the one before is blocked.
    const base = await blockedClients(fixture.redis);
    const three = sem.acquire({ permits: 3, timeout: 20_000 }).then((lease) => (order.push('three'), lease));
    await until(async () => (await blockedClients(fixture.redis)) >= base + 1, 'the waiter for 3 blocked');
    const one = sem.acquire({ permits: 1, timeout: 20_000 }).then((lease) => (order.push('one'), lease));
    await until(async () => (await blockedClients(fixture.redis)) >= base + 2, 'the waiter for 1 blocked');
    expect(await two.release()).toBe(true); // two tokens in one script
    await until(async () => (await fixture.redis.lLen(keysOf(sem).collected)) === 2, 'both collected');
    await sleep(200);
    expect(order).toEqual([]);
    expect(await others[0]!.release()).toBe(true);
    const threeLease = await three;
    expect(await others[1]!.release()).toBe(true);
    const oneLease = await one;
    expect(order).toEqual(['three', 'one']);
    await oneLease.release();
    await threeLease.release();
    await expectIdle(sem);
  });

  test('a collector that times out gives its partial collection back', async () => {
    const sem = fixture.semaphore({ resources: 4, waitSlice: 1000 });
    const held = await sem.acquire({ permits: 3 });
    const started = performance.now();
    expect(await sem.lock(500, { permits: 2 })).toBeNull();
    expect(performance.now() - started).toBeLessThan(5000);
    const census = await takeCensus(fixture.redis, sem.name);
    expect(censusProblems(census, 4, { marksAllowed: true })).toEqual([]);
    expect(census.available).toHaveLength(1);
    await held.release();
    await expectIdle(sem);
  });

  test("an aborted collector's tokens come back, through the next give-back or a waiter's empty slice", async () => {
    const sem = fixture.semaphore({ resources: 4, waitSlice: 500 });
    const held = await sem.acquire({ permits: 3 });
    const controller = new AbortController();
    const collecting = sem.acquire({ permits: 2, signal: controller.signal });
    await until(async () => (await fixture.redis.lLen(keysOf(sem).collected)) === 1, 'one token collected');
    controller.abort(new Error('changed my mind'));
    await expect(collecting).rejects.toThrow('changed my mind');
    // Nobody releases: a later waiter for one token still gets the collected one within a few slices.
    const started = performance.now();
    const one = await sem.acquire({ permits: 1, timeout: 10_000 });
    expect(performance.now() - started).toBeLessThan(10_000);
    await one.release();
    await held.release();
    await until(async () => censusProblems(await takeCensus(fixture.redis, sem.name), 4).length === 0, 'census');
    await expectIdle(sem);
  });

  test('a waiter for k behind a collector waits; tokens a release frees go to the collector first', async () => {
    const sem = fixture.semaphore({ resources: 5, waitSlice: 1000 });
    const holders3 = await sem.acquire({ permits: 4 });
    const first = sem.acquire({ permits: 3, timeout: 20_000 });
    await until(async () => (await fixture.redis.lLen(keysOf(sem).collected)) === 1, 'the first collects one');
    const second = sem.acquire({ permits: 2, timeout: 20_000 });
    await until(async () => (await fixture.redis.zCard(keysOf(sem).waiting)) === 2, 'the second registered');
    expect(await holders3.release()).toBe(true);
    const firstLease = await first;
    const secondLease = await second;
    expect(firstLease.tokens).toHaveLength(3);
    expect(secondLease.tokens).toHaveLength(2);
    expect(new Set([...firstLease.tokens, ...secondLease.tokens]).size).toBe(5);
    await firstLease.release();
    await secondLease.release();
    await expectIdle(sem);
  });

  test('status, allTokens() and the metrics count collected tokens among the tokens, and name the collector', async () => {
    const sem = fixture.semaphore({ resources: 5, waitSlice: 1000 });
    const held = await sem.acquire({ permits: 3 });
    const collecting = sem.acquire({ permits: 4, timeout: 20_000 });
    await until(async () => (await fixture.redis.lLen(keysOf(sem).collected)) === 2, 'the two free ones collected');

    const status = await readStatus({ redis: fixture.redis, keyPrefix: DEFAULT_KEY_PREFIX }, sem.name);
    expect({ tokens: status.tokens, held: status.holders.length, free: status.available }).toEqual({
      tokens: 5,
      held: 3,
      free: 0,
    });
    expect(status.collected).toBe(2);
    expect(status.collector).toEqual({ waiterId: expect.any(String), permits: 4 });
    expect(await fixture.redis.zScore(keysOf(sem).waiting, status.collector!.waiterId)).not.toBeNull();
    expect(formatStatus(status)).toContain('tokens     5 (3 held, 0 free, 2 collected by a waiter for 4)');
    expect(statusJson(status)).toMatchObject({
      tokens: 5,
      held: 3,
      available: 0,
      collected: 2,
      collector: { permits: 4 },
    });
    expect(metricsText([status])).toMatch(
      new RegExp(`^redis_token_semaphore_collected\\{semaphore="${sem.name}"\\} 2$`, 'm'),
    );
    const tokens = await sem.allTokens();
    expect(new Set(tokens)).toEqual(new Set(['0', '1', '2', '3', '4']));
    expect(tokens).toHaveLength(5);

    expect(await held.release()).toBe(true);
    const lease = await collecting;
    expect(lease.tokens).toHaveLength(4);
    const after = await readStatus({ redis: fixture.redis, keyPrefix: DEFAULT_KEY_PREFIX }, sem.name);
    expect({ collected: after.collected, collector: after.collector, tokens: after.tokens }).toEqual({
      collected: 0,
      collector: null,
      tokens: 5,
    });
    expect(formatStatus(after)).toContain('tokens     5 (4 held, 1 free)\n');
    await lease.release();
    await expectIdle(sem);
  });
});
