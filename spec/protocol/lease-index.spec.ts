import type { SemaphoreKeys } from '../../lib/redis/keys';
import { snapshot, useFixture } from '../support/fixture';
import type { Client } from '../support/redis';
import { scriptRunner } from '../support/script-calls';

/**
 * The LEASES index (includes/grant.lua, includes/reclaim.lua), through the Lua scripts called with raw
 * KEYS and ARGV as the library sends them: a grant is indexed at once when GRABBED then holds more
 * than 16 entries or it has no lease, else at its first refresh; reclaim reads GRABBED whole while it
 * holds at most 16 entries, and past that when it holds more entries than the index.
 */
const fixture = useFixture();
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

/** includes/grant.lua's SMALL_HOLDERS. */
const SMALL_HOLDERS = 16;

const setup = () => scriptRunner(redis, 'leases');

/**
 * `count` holders of jobs (tokens `job<n>`) without a lease, recorded and indexed (at +inf) as a grant
 * of this library records them: with them GRABBED holds more than SMALL_HOLDERS entries, so every
 * grant is indexed at once. No reclaim ever takes them.
 */
async function crowd(keys: SemaphoreKeys, count = SMALL_HOLDERS): Promise<void> {
  for (let n = 0; n < count; n++) {
    await redis.hSet(keys.grabbed, `job${n}`, `1000.000000 j${n} ${n + 1} 0 1000.000000 worker`);
    await redis.sendCommand(['ZADD', keys.leases, '+inf', `job${n}`]);
  }
}

/** The index's entries, with scores, but those of `crowd`'s jobs. */
async function indexed(keys: SemaphoreKeys): Promise<{ value: string; score: number }[]> {
  return (await redis.zRangeWithScores(keys.leases, 0, -1)).filter((entry) => !entry.value.startsWith('job'));
}

/** Whether `token` has an entry at +inf ("inf" in RESP2, Infinity as RESP3 decodes it: v6). */
async function indexedAtInfinity(keys: SemaphoreKeys, token: string): Promise<boolean> {
  return ['inf', 'Infinity'].includes(String(await redis.sendCommand(['ZSCORE', keys.leases, token])));
}

describe('when a grant is indexed', () => {
  test('while few tokens are held, a grant with a lease is indexed by its first refresh; one without a lease at once, at +inf', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['3', 'a', '5000', '', 'me', '100.000000']); // "0"
    await run('tryLock', ['3', 'b', '0', '', 'me', '100.000000']); // "1"
    expect(await redis.zRange(keys.leases, 0, -1)).toEqual(['1']);
    expect(await indexedAtInfinity(keys, '1')).toBe(true);
    expect(await run('refresh', ['0', 'a', '102.000000'])).toEqual([1, 'a']);
    expect(await redis.zScore(keys.leases, '0')).toBe(107_000_000);
    // An unlock that leaves another token free removes its token's entry.
    expect(await run('release', ['1', 'b', '1', ''])).toEqual([1, 2, 'b']);
    expect(await redis.zRange(keys.leases, 0, -1)).toEqual(['0']);
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([1]);
    expect(await redis.zCard(keys.leases)).toBe(0);
  });

  test('a grant that leaves GRABBED with more than 16 entries is indexed at once; jobs held count as entries', async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    await crowd(keys, SMALL_HOLDERS - 1);
    await run('tryLock', ['2', 'a', '5000', '', 'me', '100.000000']); // the 16th entry: not indexed
    await run('tryLock', ['2', 'b', '5000', '', 'me', '100.000000']); // the 17th: indexed
    expect(await indexed(keys)).toEqual([{ value: '1', score: 105_000_000 }]);
  });
});

describe('reclaim finds holders the index does not name', () => {
  test("while few tokens are held: a miss, a waiter's empty slice and releaseStale read GRABBED whole", async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'dead', '1000', '', 'me', '100.000000']); // "0", never refreshed
    expect(await redis.zCard(keys.leases)).toBe(0);
    // Not yet stale: the miss registers its caller.
    expect(await run('tryLock', ['1', 'early', '1000', '', 'me', '100.500000'])).toEqual([null, 0, 'early']);
    // Stale: a miss takes the dead holder's token.
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual(['0', expect.any(Number), 'b']);
    // A waiter's empty slice reclaims "0" from b once b's lease is over.
    await run('prepareWait', ['w', '', '10', '1', '', '102.000000']);
    expect(await run('claim', ['w', '1', '1000', '25', 'me', '', '', '104.000000'], [keys.inbox('w')])).toEqual([
      null,
      1,
      0,
      0,
      'w',
    ]);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
    expect(await redis.hLen(keys.grabbed)).toBe(0);
    // releaseStale, once a new holder dies.
    await redis.zRem(keys.waiting, 'w');
    await run('tryLock', ['1', 'c', '1000', '', 'me', '110.000000']);
    expect(await run('releaseStale', ['112.000000', '0', ''])).toEqual([1]);
  });

  test('while few tokens are held, a Ruby holder is found by the next miss, with no index entry to hide it', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'a', '5000', '', 'me', '100.000000']);
    expect(await run('refresh', ['0', 'a', '100.000000'])).toEqual([1, 'a']); // indexed: due at 105 s
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']); // leaves the entry
    // A Ruby client takes "0" at 101 s and dies: a plain stamp, no index entry of its own.
    expect(await redis.lPop(keys.available)).toBe('0');
    await redis.hSet(keys.grabbed, '0', '101.0');
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '103.000000'])).toEqual(['0', expect.any(Number), 'b']);
  });

  test('past 16 holders, a grant made while fewer were held is found once GRABBED holds more entries than the index', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'dead', '1000', '', 'me', '100.000000']); // "0": not indexed
    await crowd(keys);
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual(['0', expect.any(Number), 'b']);
    expect(await indexed(keys)).toEqual([{ value: '0', score: 103_000_000 }]); // b's grant: 17 holders
  });

  test('past 16 holders, an entry left for a token nobody holds hides an unindexed holder only until it falls due', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'dead', '1000', '', 'me', '100.000000']);
    await crowd(keys);
    await redis.zAdd(keys.leases, { score: 105_000_000, value: 'gone' }); // left by an unlock of a retired token
    // 17 holders, 17 entries: the index seems whole, so the miss does not read GRABBED.
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual([null, 0, 'b']);
    // Due, the entry goes; then GRABBED holds one entry more than the index, and is read.
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '106.000000'])).toEqual(['0', expect.any(Number), 'c']);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['0']);
  });

  /** Ways a token keeps an entry from an earlier grant; `run` is scriptRunner's. */
  const keptEntries: [string, (keys: SemaphoreKeys, run: ReturnType<typeof setup>['run']) => Promise<void>][] = [
    [
      'a +inf one the gem left',
      async (keys, run) => {
        await run('tryLock', ['1', 'h', '0', '', 'me', '100.000000']); // "0", no lease: indexed at +inf
        // The gem's reclaim (release_stale_locks!, signal) of "0": HDEL and LPUSH, the +inf entry left.
        await redis.hDel(keys.grabbed, '0');
        await redis.lPush(keys.available, '0');
      },
    ],
    [
      'one an unlock left with a longer lease',
      async (_, run) => {
        await run('tryLock', ['1', 'a', '2147483647', '', 'me', '100.000000']);
        await run('refresh', ['0', 'a', '100.000000']); // indexed, due in about 24.8 days
        expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']); // leaves the entry
      },
    ],
  ];

  test.each(keptEntries)(
    'a grant that is not indexed drops the entry its token kept (%s), which cannot hide it',
    async (_, keep) => {
      const { keys, run } = setup();
      await keep(keys, run);
      await run('tryLock', ['1', 'dead', '1000', '', 'me', '100.000000']);
      expect(await redis.zScore(keys.leases, '0')).toBeNull();
      await crowd(keys);
      expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual(['0', expect.any(Number), 'b']);
    },
  );

  test('past 16 holders, that read indexes every live grant without an entry, 500 to a ZMSCORE', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    const records = Array.from({ length: 1200 }, (_, n) => [
      `job${n}`,
      `100.000000 j${n} ${n + 1} 60000 100.000000 worker`,
    ]);
    await redis.hSet(keys.grabbed, Object.fromEntries(records));
    await run('tryLock', ['1', 'a', '60000', '', 'me', '100.000000']); // 1,201 holders: indexed
    expect(await redis.zCard(keys.leases)).toBe(1);
    expect(await run('tryLock', ['1', 'b', '60000', '', 'me', '101.000000'])).toEqual([null, 0, 'b']);
    expect(await redis.zCard(keys.leases)).toBe(1201);
    expect(await redis.zScore(keys.leases, 'job1199')).toBe(160_000_000);
  });

  test('past 16 holders, the read that finds grants without an entry indexes them: the next miss reads the index alone', async () => {
    const { keys, run } = setup();
    const hgetalls = async () => Number(/cmdstat_hgetall:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    await run('tryLock', ['1', 'live', '60000', '', 'me', '100.000000']); // "0": not indexed
    await crowd(keys);
    const before = await hgetalls();
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '101.000000'])).toEqual([null, 0, 'b']);
    expect(await hgetalls()).toBe(before + 1);
    expect(await redis.zScore(keys.leases, '0')).toBe(160_000_000);
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '102.000000'])).toEqual([null, 0, 'c']);
    expect(await hgetalls()).toBe(before + 1);
  });

  test("a read of GRABBED drops the entry of a token a Ruby client holds, whatever the caller's stale timeout", async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await crowd(keys);
    // A Ruby client holds "0", whose entry an earlier grant left (due far ahead): it would count as one.
    expect(await redis.lPop(keys.available)).toBe('0');
    await redis.hSet(keys.grabbed, '0', '100.0');
    await redis.zAdd(keys.leases, { score: 1e15, value: '0' });
    expect(await run('releaseStale', ['101.000000', '0', ''])).toEqual([0]); // no stale timeout: kept
    expect(await redis.zScore(keys.leases, '0')).toBeNull();
    expect(await redis.hGet(keys.grabbed, '0')).toBe('100.0');
  });

  test('past 16 holders, one grant in 16 reclaims through the index alone', async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    await run('tryLock', ['2', 'dead', '5000', '', 'me', '100.000000']); // "0": not indexed
    await crowd(keys);
    // Registered by hand: prepareWait would reclaim, and index "0" (more holders than entries).
    await redis.zAdd(keys.waiting, { score: 1e12, value: 'w' });
    await redis.set(keys.fence, '15'); // the next grant is number 16: it reclaims
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w', '2', '0', '25', 'me', 'g1', '', '200.000000'], [keys.inbox('w')])).toEqual([
      '1',
      0,
      16,
      0,
      'g1',
    ]);
    expect((await redis.hGet(keys.grabbed, '0'))?.split(' ')[1]).toBe('dead'); // left to misses, empty slices and the watchdog
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([1]);
  });
});

describe('entries an unlock leaves (past 16 holders, where every grant is indexed)', () => {
  test('an unlock leaves the entry of a token it leaves as the only free one, for its next grant; others go', async () => {
    const { name, keys, run } = setup();
    await crowd(keys);
    await run('tryLock', ['2', 'a', '5000', '', 'me', '100.000000']); // "0", lease ends at 105 s
    await run('tryLock', ['2', 'b', '5000', '', 'me', '100.000000']); // "1"
    // "0" is then the only free token: its entry stays for its next grant.
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']);
    // "1" joins a free "0", so it may stay free long after its lease: its entry goes.
    expect(await run('release', ['1', 'b', '1', ''])).toEqual([1, 2, 'b']);
    expect(await indexed(keys)).toEqual([{ value: '0', score: 105_000_000 }]);
    // Consumed (a job: never granted again), a token's entry goes too, whatever is free.
    await run('tryLock', ['2', 'c', '5000', '', 'me', '110.000000']); // "1" (the head of AVAILABLE)
    expect(await run('release', ['1', 'c', '0', ''])).toEqual([1, 1, 'c']);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['0']);
    // Not due yet: kept. Due: dropped, and the free token stays free (nothing reclaimed, nothing pushed).
    expect(await run('releaseStale', ['104.000000', '0', ''])).toEqual([0]);
    expect(await indexed(keys)).toHaveLength(1);
    expect(await run('releaseStale', ['106.000000', '0', ''])).toEqual([0]);
    expect(await indexed(keys)).toEqual([]);
    expect((await snapshot(redis, name)).available).toEqual(['0']);
    // The next grant indexes the token again; its unlock leaves it the only free one: the entry stays.
    await run('tryLock', ['2', 'd', '5000', '', 'me', '120.000000']);
    expect(await run('release', ['0', 'd', '1', ''])).toEqual([1, 1, 'd']);
    expect(await redis.zScore(keys.leases, '0')).toBe(125_000_000);
    // A grant the next overwrites: its lease end replaces the left one.
    await run('tryLock', ['2', 'e', '7000', '', 'me', '130.000000']);
    expect(await redis.zScore(keys.leases, '0')).toBe(137_000_000);
    // An entry at +inf (here a lease past any this library writes) would never fall due: it goes.
    expect(await run('release', ['0', 'e', '1', ''])).toEqual([1, 1, 'e']);
    await run('tryLock', ['2', 'f', '99999999999999999', '', 'me', '140.000000']);
    expect(await indexedAtInfinity(keys, '0')).toBe(true);
    expect(await run('release', ['0', 'f', '1', ''])).toEqual([1, 1, 'f']);
    expect(await indexed(keys)).toEqual([]);
  });

  test('entries left for tokens a Ruby client took and gave back do not hide a stale holder from releaseStale', async () => {
    const { keys, run } = setup();
    await run('create', ['121', '']);
    await crowd(keys);
    // 120 Node grants at 100 s with a 1 s lease; one more, at 100.5 s, whose holder crashes.
    for (let i = 0; i < 120; i++) await run('tryLock', ['121', `g${i}`, '1000', '', 'me', '100.000000']);
    const [crashed] = (await run('tryLock', ['121', 'crashed', '1000', '', 'me', '100.500000'])) as [string];
    const nodeTokens = Object.keys(await redis.hGetAll(keys.grabbed)).filter(
      (token) => token !== crashed && !token.startsWith('job'),
    );
    // Each Node unlock leaves its token the only free one, and a Ruby client (the gem's LPOP and
    // plain stamp) takes it next: its entry stays. Then the Ruby clients give every token back.
    for (const [i, token] of nodeTokens.entries()) {
      expect(await run('release', [token, `g${i}`, '1'])).toEqual([1, 1, `g${i}`]);
      expect(await redis.lPop(keys.available)).toBe(token);
      await redis.hSet(keys.grabbed, token, '100.7');
    }
    for (const token of nodeTokens) {
      await redis.hDel(keys.grabbed, token);
      await redis.lPush(keys.available, token);
    }
    expect(await indexed(keys)).toHaveLength(121);
    // 120 due entries of free tokens come first; the stale holder (due at 101.5 s) is still found.
    expect(await run('releaseStale', ['102.000000', '0', ''])).toEqual([1]);
    expect(await redis.hLen(keys.grabbed)).toBe(SMALL_HOLDERS);
    expect(await indexed(keys)).toEqual([]);
  });

  test('past 16 holders, an entry an unlock left hides a Ruby holder of its token from the hot-path reclaim only until it falls due', async () => {
    const { keys, run } = setup();
    await crowd(keys);
    await run('tryLock', ['1', 'a', '5000', '', 'me', '100.000000']); // "0": its entry falls due at 105 s
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']);
    // A Ruby client takes "0" at 101 s and dies: a plain stamp, no index entry of its own.
    expect(await redis.lPop(keys.available)).toBe('0');
    await redis.hSet(keys.grabbed, '0', '101.0');
    // At 103 s it is stale by a 1 s timeout, but the left entry makes the index count one holder.
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '103.000000'])).toEqual([null, 0, 'b']);
    // Once the entry is due, the miss drops it, counts one holder too many, and finds the Ruby holder.
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '106.000000'])).toEqual(['0', expect.any(Number), 'c']);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['0']); // c's own grant
  });

  test('resize removes the entry an unlock left for a token it retires', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['2', 'a', '5000', '', 'me', '100.000000']); // "0"
    await run('tryLock', ['2', 'b', '5000', '', 'me', '100.000000']); // "1"
    await run('refresh', ['0', 'a', '100.000000']);
    await run('refresh', ['1', 'b', '100.000000']);
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']);
    expect(await redis.zRange(keys.leases, 0, -1)).toEqual(['0', '1']);
    expect(await run('resize', ['1'])).toEqual([1, 2, 1, 1]);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual([]);
    expect(await redis.zRange(keys.leases, 0, -1)).toEqual(['1']);
  });

  test('a lease longer than any this library writes is indexed at +inf, not at an overflowed score', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await redis.lPop(keys.available);
    await redis.hSet(keys.grabbed, '0', '100.000000 g 7 99999999999999999 100.000000 me'); // about 3 × 10^9 years
    expect(await run('refresh', ['0', 'g', '150.000000'])).toEqual([1, 'g']);
    expect(await indexedAtInfinity(keys, '0')).toBe(true);
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([0]);
  });

  test('reclaims through the index, cleans entries whose record went behind its back, and finds Ruby holders', async () => {
    const { name, keys, run } = setup();
    await run('create', ['3', '']);
    await crowd(keys);
    await run('tryLock', ['3', 'a', '5000', '', 'me', '100.000000']); // "0"
    await run('tryLock', ['3', 'b', '5000', '', 'me', '100.000000']); // "1"
    // The gem reclaims "1" (HDEL + LPUSH), then a Ruby client takes it: a plain stamp, no index entry.
    await redis.hDel(keys.grabbed, '1');
    await redis.hSet(keys.grabbed, '1', '150.5');
    // A refresh on another clock leaves "0" indexed as due although its record says live.
    await redis.hSet(keys.grabbed, '0', (await redis.hGet(keys.grabbed, '0'))!.replace(/^100\.000000/, '199.000000'));
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([0]); // no Ruby timeout: Ruby holder kept
    expect(await indexed(keys)).toEqual([{ value: '0', score: 204_000_000 }]);
    expect(await run('releaseStale', ['200.000000', '10000', ''])).toEqual([1]); // 49.5 s old Ruby holder
    expect(Object.keys((await snapshot(redis, name)).grabbed).filter((token) => !token.startsWith('job'))).toEqual([
      '0',
    ]);
  });
});
