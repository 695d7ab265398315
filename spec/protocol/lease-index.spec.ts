import type { SemaphoreKeys } from '../../lib/redis/keys';
import { snapshot, useFixture } from '../support/fixture';
import type { Client } from '../support/redis';
import { hotScriptRunner } from './hot-calls';

/**
 * The LEASES index (includes/grant.lua, includes/reclaim.lua), through the Lua scripts called with raw
 * KEYS and ARGV as the library sends them: the canonical tokens "0".."15" are never indexed (reclaim
 * reads their records with one HMGET); every other grant is indexed when it is made; reclaim reads
 * GRABBED whole when more tokens other than "0".."15" are held than the index has entries for.
 */
const fixture = useFixture();
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

/** How many jobs `crowd` holds by default: as many as there are canonical tokens. */
const CROWD = 16;

const setup = () => hotScriptRunner(redis, 'leases');

/**
 * `count` holders of jobs (tokens `job<n>`) without a lease, recorded and indexed (at +inf) as a grant
 * of this library records them. No reclaim ever takes them.
 */
async function crowd(keys: SemaphoreKeys, count = CROWD): Promise<void> {
  for (let n = 0; n < count; n++) {
    await redis.hSet(keys.grabbed, `job${n}`, `1000.000000 j${n} ${n + 1} 0 1000.000000 worker`);
    await redis.sendCommand(['ZADD', keys.leases, '+inf', `job${n}`]);
  }
}

/** A semaphore (created) whose free tokens are `tokens`, head first: tokens other than "0".."15". */
async function withFree(keys: SemaphoreKeys, run: ReturnType<typeof setup>['run'], ...tokens: string[]): Promise<void> {
  await run('create', [String(tokens.length), '']);
  await redis.del(keys.available);
  await redis.rPush(keys.available, tokens);
}

/** The index's entries, with scores, but those of `crowd`'s jobs. */
async function indexed(keys: SemaphoreKeys): Promise<{ value: string; score: number }[]> {
  return (await redis.zRangeWithScores(keys.leases, 0, -1)).filter((entry) => !entry.value.startsWith('job'));
}

/** Whether `token` has an entry at +inf ("inf" in RESP2, Infinity as RESP3 decodes it: v6). */
async function indexedAtInfinity(keys: SemaphoreKeys, token: string): Promise<boolean> {
  return ['inf', 'Infinity'].includes(String(await redis.sendCommand(['ZSCORE', keys.leases, token])));
}

/** How many times Redis ran `command` (inside scripts too). */
async function calls(command: string): Promise<number> {
  const stats = await redis.info('commandstats');
  return Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
}

describe('when a grant is indexed', () => {
  test('the canonical tokens "0".."15" never are, with or without a lease, nor by a refresh: a mutex has no LEASES key', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['3', 'a', '5000', '', 'me', '100.000000']); // "0"
    await run('tryLock', ['3', 'b', '0', '', 'me', '100.000000']); // "1", no lease
    expect(await run('refresh', ['0', 'a', '102.000000'])).toEqual([1, 'a']);
    expect(await redis.exists(keys.leases)).toBe(0);
    expect(await run('release', ['1', 'b', '1', ''])).toEqual([1, 2, 'b']);
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 3, 'a']);
    expect(await redis.exists(keys.leases)).toBe(0);
  });

  test('any other token is, when granted (at +inf without a lease) and again by each refresh', async () => {
    const { keys, run } = setup();
    await withFree(keys, run, '16', 'job');
    await run('tryLock', ['2', 'a', '5000', '', 'me', '100.000000']); // "16"
    await run('tryLock', ['2', 'b', '0', '', 'me', '100.000000']); // "job"
    expect(await indexed(keys)).toEqual([{ value: '16', score: 105_000_000 }]);
    expect(await indexedAtInfinity(keys, 'job')).toBe(true);
    expect(await run('refresh', ['16', 'a', '102.000000'])).toEqual([1, 'a']);
    expect(await redis.zScore(keys.leases, '16')).toBe(107_000_000);
    // An unlock that leaves another token free removes its token's entry.
    expect(await run('release', ['job', 'b', '1', ''])).toEqual([1, 1, 'b']);
    expect(await run('release', ['16', 'a', '1', ''])).toEqual([1, 2, 'a']);
    expect(await redis.exists(keys.leases)).toBe(0);
  });

  test('a grant of a canonical token drops an entry its token kept, with a ZREM only when LEASES exists', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    const zrems = await calls('zrem');
    await run('tryLock', ['1', 'a', '5000', '', 'me', '100.000000']);
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']);
    expect(await calls('zrem')).toBe(zrems); // no LEASES: no ZREM in the whole cycle
    // An entry an older version left for "0" (due far ahead, or at +inf: it would hide a holder).
    await redis.zAdd(keys.leases, { score: 1e15, value: '0' });
    await run('tryLock', ['1', 'b', '5000', '', 'me', '101.000000']);
    expect(await redis.exists(keys.leases)).toBe(0);
  });
});

describe('reclaim finds holders the index does not name', () => {
  test('a miss, a waiter\'s empty slice and releaseStale find a stale holder of "0".."15" by its record', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'dead', '1000', '', 'me', '100.000000']); // "0", never refreshed
    await crowd(keys); // indexed holders of other tokens do not change that
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
    expect(await redis.hLen(keys.grabbed)).toBe(CROWD);
    // releaseStale, once a new holder dies.
    await redis.zRem(keys.waiting, 'w');
    await run('tryLock', ['1', 'c', '1000', '', 'me', '110.000000']);
    expect(await run('releaseStale', ['112.000000', '0', ''])).toEqual([1]);
  });

  test('a Ruby holder of a canonical token is found by the next miss, whatever entry the token kept', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'a', '5000', '', 'me', '100.000000']);
    expect(await run('release', ['0', 'a', '1', ''])).toEqual([1, 1, 'a']);
    await redis.zAdd(keys.leases, { score: 1e15, value: '0' }); // an older version's entry
    // A Ruby client takes "0" at 101 s and dies: a plain stamp.
    expect(await redis.lPop(keys.available)).toBe('0');
    await redis.hSet(keys.grabbed, '0', '101.0');
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '103.000000'])).toEqual(['0', expect.any(Number), 'b']);
  });

  test('a grant of another token an older version left unindexed is found once more such tokens are held than indexed', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'live', '60000', '', 'me', '100.000000']); // "0"
    await crowd(keys);
    await redis.hSet(keys.grabbed, 'extra', '100.000000 x 7 1000 100.000000 old'); // no entry
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual([
      'extra',
      expect.any(Number),
      'b',
    ]);
    expect(await indexed(keys)).toEqual([{ value: 'extra', score: 103_000_000 }]); // b's grant
  });

  test('entries of canonical tokens do not count as indexing other tokens', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'live', '60000', '', 'me', '100.000000']); // "0"
    await crowd(keys, CROWD - 2);
    await redis.hSet(keys.grabbed, 'extra', '100.000000 x 7 1000 100.000000 old'); // no entry
    // Entries older versions left for "1".."3", due far ahead: 17 entries for 15 other holders.
    await redis.zAdd(
      keys.leases,
      ['1', '2', '3'].map((value) => ({ score: 1e15, value })),
    );
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual([
      'extra',
      expect.any(Number),
      'b',
    ]);
  });

  test('an entry left for a token nobody holds hides an unindexed holder of another token only until it falls due', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'live', '60000', '', 'me', '100.000000']); // "0"
    await crowd(keys);
    await redis.hSet(keys.grabbed, 'extra', '100.000000 x 7 1000 100.000000 old'); // no entry
    await redis.zAdd(keys.leases, { score: 105_000_000, value: 'gone' }); // left by an unlock of a retired token
    // 17 other holders, 17 entries: the index seems whole, so the miss does not read GRABBED.
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '102.000000'])).toEqual([null, 0, 'b']);
    // Due, the entry goes; then one more is held than indexed, and GRABBED is read.
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '106.000000'])).toEqual([
      'extra',
      expect.any(Number),
      'c',
    ]);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['extra']);
  });

  test('that read indexes every live grant of another token without an entry, 500 to a ZMSCORE', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    const records = Array.from({ length: 1200 }, (_, n) => [
      `job${n}`,
      `100.000000 j${n} ${n + 1} 60000 100.000000 worker`,
    ]);
    await redis.hSet(keys.grabbed, Object.fromEntries(records));
    await run('tryLock', ['1', 'a', '60000', '', 'me', '100.000000']); // "0": not indexed
    expect(await redis.zCard(keys.leases)).toBe(0);
    expect(await run('tryLock', ['1', 'b', '60000', '', 'me', '101.000000'])).toEqual([null, 0, 'b']);
    expect(await redis.zCard(keys.leases)).toBe(1200);
    expect(await redis.zScore(keys.leases, 'job1199')).toBe(160_000_000);
  });

  test('the read that finds grants without an entry indexes them: the next miss reads the index alone', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'live', '60000', '', 'me', '100.000000']); // "0": never indexed
    await crowd(keys);
    await redis.hSet(keys.grabbed, 'extra', '100.000000 x 7 60000 100.000000 old'); // no entry
    const before = await calls('hgetall');
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '101.000000'])).toEqual([null, 0, 'b']);
    expect(await calls('hgetall')).toBe(before + 1);
    expect(await redis.zScore(keys.leases, 'extra')).toBe(160_000_000);
    expect(await redis.zScore(keys.leases, '0')).toBeNull();
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '102.000000'])).toEqual([null, 0, 'c']);
    expect(await calls('hgetall')).toBe(before + 1);
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

  test('one grant in 16 reclaims through the index and the canonical tokens, judging no Ruby holder', async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    await run('tryLock', ['2', 'dead', '5000', '', 'me', '100.000000']); // "0": not indexed
    await crowd(keys);
    await redis.hSet(keys.grabbed, '5', '100.0'); // a Ruby holder, long stale by any timeout
    await redis.hSet(keys.grabbed, 'extra', '100.000000 x 7 1000 100.000000 old'); // unindexed: not read
    // Registered by hand: prepareWait would reclaim.
    await redis.zAdd(keys.waiting, { score: 1e12, value: 'w' });
    await redis.set(keys.fence, '15'); // the next grant is number 16: it reclaims
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w', '2', '10000', '25', 'me', 'g1', '', '200.000000'], [keys.inbox('w')])).toEqual([
      '1',
      0,
      16,
      0,
      'g1',
    ]);
    expect(await redis.hGet(keys.grabbed, '0')).toBeNull(); // reclaimed
    expect(await redis.hGet(keys.grabbed, '5')).toBe('100.0'); // left to misses, empty slices and the watchdog
    expect(await redis.hExists(keys.grabbed, 'extra')).toBe(true);
    expect(await run('releaseStale', ['200.000000', '10000', ''])).toEqual([2]);
  });
});

describe('entries an unlock leaves (tokens other than "0".."15")', () => {
  test('an unlock leaves the entry of a token it leaves as the only free one, for its next grant; others go', async () => {
    const { name, keys, run } = setup();
    await withFree(keys, run, '16', '17');
    await run('tryLock', ['2', 'a', '5000', '', 'me', '100.000000']); // "16", lease ends at 105 s
    await run('tryLock', ['2', 'b', '5000', '', 'me', '100.000000']); // "17"
    // "16" is then the only free token: its entry stays for its next grant.
    expect(await run('release', ['16', 'a', '1', ''])).toEqual([1, 1, 'a']);
    // "17" joins a free "16", so it may stay free long after its lease: its entry goes.
    expect(await run('release', ['17', 'b', '1', ''])).toEqual([1, 2, 'b']);
    expect(await indexed(keys)).toEqual([{ value: '16', score: 105_000_000 }]);
    // Consumed (a job: never granted again), a token's entry goes too, whatever is free.
    await run('tryLock', ['2', 'c', '5000', '', 'me', '110.000000']); // "17" (the head of AVAILABLE)
    expect(await run('release', ['17', 'c', '0', ''])).toEqual([1, 1, 'c']);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['16']);
    // Not due yet: kept. Due: dropped, and the free token stays free (nothing reclaimed, nothing pushed).
    expect(await run('releaseStale', ['104.000000', '0', ''])).toEqual([0]);
    expect(await indexed(keys)).toHaveLength(1);
    expect(await run('releaseStale', ['106.000000', '0', ''])).toEqual([0]);
    expect(await indexed(keys)).toEqual([]);
    expect((await snapshot(redis, name)).available).toEqual(['16']);
    // The next grant indexes the token again; its unlock leaves it the only free one: the entry stays.
    await run('tryLock', ['2', 'd', '5000', '', 'me', '120.000000']);
    expect(await run('release', ['16', 'd', '1', ''])).toEqual([1, 1, 'd']);
    expect(await redis.zScore(keys.leases, '16')).toBe(125_000_000);
    // A grant the next overwrites: its lease end replaces the left one.
    await run('tryLock', ['2', 'e', '7000', '', 'me', '130.000000']);
    expect(await redis.zScore(keys.leases, '16')).toBe(137_000_000);
    // An entry at +inf (here a lease past any this library writes) would never fall due: it goes.
    expect(await run('release', ['16', 'e', '1', ''])).toEqual([1, 1, 'e']);
    await run('tryLock', ['2', 'f', '99999999999999999', '', 'me', '140.000000']);
    expect(await indexedAtInfinity(keys, '16')).toBe(true);
    expect(await run('release', ['16', 'f', '1', ''])).toEqual([1, 1, 'f']);
    expect(await indexed(keys)).toEqual([]);
  });

  test('entries left for tokens a Ruby client took and gave back do not hide a stale holder from releaseStale', async () => {
    const { keys, run } = setup();
    await run('create', ['121', '']);
    await crowd(keys);
    // 120 Node grants at 100 s with a 1 s lease; one more, at 100.5 s, whose holder crashes.
    for (let i = 0; i < 120; i++) await run('tryLock', ['121', `g${i}`, '1000', '', 'me', '100.000000']);
    const [crashed] = (await run('tryLock', ['121', 'crashed', '1000', '', 'me', '100.500000'])) as [string];
    expect(crashed).toBe('120');
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
    expect(await indexed(keys)).toHaveLength(105); // "16".."120" ("0".."15" have none)
    // 104 due entries of free tokens come first; the stale holder (due at 101.5 s) is still found.
    expect(await run('releaseStale', ['102.000000', '0', ''])).toEqual([1]);
    expect(await redis.hLen(keys.grabbed)).toBe(CROWD);
    expect(await indexed(keys)).toEqual([]);
  });

  test('an entry an unlock left hides a Ruby holder of its token from the hot-path reclaim only until it falls due', async () => {
    const { keys, run } = setup();
    await withFree(keys, run, '16');
    await crowd(keys);
    await run('tryLock', ['1', 'a', '5000', '', 'me', '100.000000']); // "16": its entry falls due at 105 s
    expect(await run('release', ['16', 'a', '1', ''])).toEqual([1, 1, 'a']);
    // A Ruby client takes "16" at 101 s and dies: a plain stamp, no index entry of its own.
    expect(await redis.lPop(keys.available)).toBe('16');
    await redis.hSet(keys.grabbed, '16', '101.0');
    // At 103 s it is stale by a 1 s timeout, but the left entry makes the index count one holder.
    expect(await run('tryLock', ['1', 'b', '1000', '', 'me', '103.000000'])).toEqual([null, 0, 'b']);
    // Once the entry is due, the miss drops it, counts one holder too many, and finds the Ruby holder.
    expect(await run('tryLock', ['1', 'c', '1000', '', 'me', '106.000000'])).toEqual(['16', expect.any(Number), 'c']);
    expect((await indexed(keys)).map((entry) => entry.value)).toEqual(['16']); // c's own grant
  });

  test('resize removes the entry an unlock left for a token it retires', async () => {
    const { keys, run } = setup();
    await run('create', ['18', '']);
    await redis.zAdd(keys.leases, { score: 105_000_000, value: '17' }); // as an unlock of "17" leaves it
    expect(await run('resize', ['17'])).toEqual([1, 18, 0, 17]);
    expect(await redis.lRange(keys.available, 0, -1)).not.toContain('17');
    expect(await redis.exists(keys.leases)).toBe(0);
  });

  test('a lease longer than any this library writes is indexed at +inf, not at an overflowed score', async () => {
    const { keys, run } = setup();
    await withFree(keys, run, '16');
    await redis.lPop(keys.available);
    await redis.hSet(keys.grabbed, '16', '100.000000 g 7 99999999999999999 100.000000 me'); // about 3 × 10^9 years
    expect(await run('refresh', ['16', 'g', '150.000000'])).toEqual([1, 'g']);
    expect(await indexedAtInfinity(keys, '16')).toBe(true);
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([0]);
  });

  test('reclaims through the index, cleans entries whose record went behind its back, and finds Ruby holders', async () => {
    const { name, keys, run } = setup();
    await withFree(keys, run, '16', '17', '18');
    await crowd(keys);
    await run('tryLock', ['3', 'a', '5000', '', 'me', '100.000000']); // "16"
    await run('tryLock', ['3', 'b', '5000', '', 'me', '100.000000']); // "17"
    // The gem reclaims "17" (HDEL + LPUSH), then a Ruby client takes it: a plain stamp, no index entry.
    await redis.hDel(keys.grabbed, '17');
    await redis.hSet(keys.grabbed, '17', '150.5');
    // A refresh on another clock leaves "16" indexed as due although its record says live.
    await redis.hSet(keys.grabbed, '16', (await redis.hGet(keys.grabbed, '16'))!.replace(/^100\.000000/, '199.000000'));
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([0]); // no Ruby timeout: Ruby holder kept
    expect(await indexed(keys)).toEqual([{ value: '16', score: 204_000_000 }]);
    expect(await run('releaseStale', ['200.000000', '10000', ''])).toEqual([1]); // 49.5 s old Ruby holder
    expect(Object.keys((await snapshot(redis, name)).grabbed).filter((token) => !token.startsWith('job'))).toEqual([
      '16',
    ]);
  });
});
