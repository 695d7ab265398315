import { semaphoreKeys } from '../../lib/redis/keys';
import { claim, prepareWait, recover, refresh, release, tryLock } from '../../lib/redis/commands';
import { withoutUnusedFunctions } from '../../lib/redis/lua-source';
import { scripts } from '../../lib/redis/registry';
import { runScript } from '../../lib/redis/send';
import { snapshot, useFixture } from '../support/fixture';
import { uniqueName, type Client } from '../support/redis';
import { hotScriptRunner } from './hot-calls';

/** The Lua scripts, called with raw KEYS and ARGV as the library sends them. */
const fixture = useFixture();
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

/** Redis' clock, in seconds. */
async function serverSeconds(): Promise<number> {
  const [seconds, micros] = (await redis.sendCommand(['TIME'])) as [string, string];
  return Number(seconds) + Number(micros) / 1e6;
}

/** GRABBED values are "<stamp> <grant id> <fence> <lease ms> <acquired stamp> <owner label>": the grant ids alone. */
function grantIds(grabbed: Record<string, string>): Record<string, string> {
  return Object.fromEntries(Object.entries(grabbed).map(([token, record]) => [token, record.split(' ')[1] ?? '']));
}

const setup = () => hotScriptRunner(redis, 'lua');

describe('the replies of the hot-path scripts: one string that starts with the grant id', () => {
  test('tryLock, claim and release, as Redis sends them (raw ARGV: the settings argument, includes/settings.lua)', async () => {
    const { keys, raw } = setup();
    const settings = (lifetime: string, keep: string) => `5000 1 ${lifetime} ${keep} 1 - a  label `;
    const hit = (await raw('tryLock', ['g1', settings('25', '0')])) as string;
    expect(hit).toMatch(/^g1 \d{16} 0 0$/); // fence, no expired registration, token "0"
    expect(await redis.hGet(keys.grabbed, '0')).toMatch(/^\d+\.\d{6} g1 \d{16} 5000 \d+\.\d{6} a {2}label $/);
    await redis.lPush(keys.available, 'a job'); // a token with a space goes last, whole
    expect(await raw('tryLock', ['g2', settings('25', '0')])).toMatch(/^g2 \d{16} 0 a job$/);
    await redis.zAdd(keys.waiting, { score: 1, value: 'lapsed' });
    expect(await raw('tryLock', ['g3', settings('25', '0')])).toBe('g3 0 1 lapsed'); // a miss: no token
    expect(await redis.zScore(keys.waiting, 'g3')).not.toBeNull(); // registered
    expect(await raw('tryLock', ['g4', settings('-', '0')])).toBe('g4 0 1 lapsed'); // lock(0): not registered
    expect(await redis.zScore(keys.waiting, 'g4')).toBeNull();
    await redis.zRem(keys.waiting, 'lapsed');
    expect(await raw('release', ['0', 'g1'])).toBe('g1 +1'); // ended; AVAILABLE holds 1
    expect(await raw('release', ['0', 'g1'])).toBe('g1 -1'); // no longer held
    await redis.lMove(keys.available, keys.inbox('g3'), 'LEFT', 'RIGHT');
    // Others wait (g5): the registration is kept (K), and others are registered (W).
    await redis.zAdd(keys.waiting, { score: 9e9, value: 'g5' });
    expect(await raw('claim', ['g3', 'c1', settings('25', '1')], [keys.inbox('g3')])).toMatch(/^c1 \d{16} KW 0 0$/);
    expect(await raw('release', ['0', 'c1', '0'])).toBe('c1 +0'); // consumed
    expect(await raw('claim', ['g5', 'c2', settings('-', '1')], [keys.inbox('g5')])).toBe('c2 0 EN 0'); // empty, last slice
  });
});

describe('tryLock.lua', () => {
  test('creates, takes the first token, records holder and owner', async () => {
    const { name, run } = setup();
    expect(await run('tryLock', ['2', 'g1', '', '', 'me'])).toEqual(['0', expect.any(Number), 'g1']);
    const state = await snapshot(redis, name);
    expect(state.available).toEqual(['1']);
    expect(grantIds(state.grabbed)).toEqual({ '0': 'g1' });
    expect(state.owners).toEqual({}); // one record per grant: nothing writes OWNERS
    expect(await run('tryLock', ['2', 'g2', '', '', 'me'])).toEqual(['1', expect.any(Number), 'g2']);
    expect(await run('tryLock', ['2', 'g3', '', '', 'me'])).toEqual([null, 0, 'g3']);
  });

  test('numbers every grant with a fence that keeps growing, even after the keys are gone', async () => {
    const { keys, run } = setup();
    const [, first] = (await run('tryLock', ['2', 'g1', '', '', 'host:1 worker a'])) as [string, number];
    const [, second] = (await run('tryLock', ['2', 'g2', '', '', ''])) as [string, number];
    expect(second).toBe(first + 1);
    // One record: stamp, grant id, fence, lease, acquired stamp (the stamp, at first), the label last.
    expect(await redis.hGet(keys.grabbed, '0')).toMatch(
      new RegExp(`^(\\d+\\.\\d{6}) g1 ${first} 0 \\1 host:1 worker a$`),
    );
    expect(await redis.hGet(keys.grabbed, '1')).toMatch(new RegExp(`^\\d+\\.\\d{6} g2 ${second} 0 \\d+\\.\\d{6} $`)); // an empty label
    expect(await redis.exists(keys.owners)).toBe(0);
    await redis.del([...keys.scriptKeys]); // expired, deleted, or lost in a restart without persistence
    const [token, afterReset] = (await run('tryLock', ['2', 'g3', '', '', ''])) as [string, number];
    expect(token).toBe('0');
    expect(afterReset).toBeGreaterThan(second);
  });

  test('registers the caller as a waiter on a miss when given a lease', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'g1', '', '', 'me', '100.000000']);
    expect(await run('tryLock', ['1', 'g2', '', '25', 'me', '100.000000'])).toEqual([null, 0, 'g2']);
    // Leases count on Redis TIME even when the caller brings its own clock (useLocalTime).
    const [registration] = await redis.zRangeWithScores(keys.waiting, 0, -1);
    expect(registration?.value).toBe('g2');
    expect(Math.abs(registration!.score - (await serverSeconds()) - 25)).toBeLessThan(2);
  });

  test('leaves a reclaimed token to a registered waiter, and reports expired registrations', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'old', '5000', '', 'me', '100.000000']);
    await redis.zAdd(keys.waiting, [
      { score: 1e12, value: 'waiter' },
      { score: 1, value: 'gone' },
    ]);
    expect(await run('tryLock', ['1', 'new', '5', '', 'me', '200.000000'])).toEqual([null, 0, 'new', 'gone']);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
  });
  test('a hit leaves expired registrations to callers that will wait (no lookup on the fast path)', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await redis.zAdd(keys.waiting, [{ score: 1, value: 'gone' }]);
    expect(await run('tryLock', ['1', 'hit', '', '25', 'me'])).toEqual(['0', expect.any(Number), 'hit']);
    expect(await run('tryLock', ['1', 'miss', '', '25', 'me'])).toEqual([null, 0, 'miss', 'gone']);
  });
});

describe('claim.lua', () => {
  test('turns the token in a registered inbox into a grant', async () => {
    const { keys, run } = setup();
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    await run('tryLock', ['1', 'other', '', '', 'me']); // take "0" so we can place it by hand
    await redis.hDel(keys.grabbed, '0');
    await redis.rPush(keys.inbox('w'), '0');
    expect(await run('claim', ['w', '1', '', '25', 'me'], [keys.inbox('w')])).toEqual([
      '0',
      0,
      expect.any(Number),
      0,
      'w',
    ]);
    expect(grantIds(await redis.hGetAll(keys.grabbed))).toEqual({ '0': 'w' });
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual([]);
  });

  test('after an empty slice, renews the registration (or ends it on the last slice)', async () => {
    const { keys, run } = setup();
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    expect(await run('claim', ['w', '1', '', '25', 'me', '', '', '105.000000'], [keys.inbox('w')])).toEqual([
      null,
      1,
      0,
      0,
      'w',
    ]);
    const [renewed] = await redis.zRangeWithScores(keys.waiting, 0, -1);
    expect(Math.abs(renewed!.score - (await serverSeconds()) - 25)).toBeLessThan(2);
    expect(await run('claim', ['w', '1', '', '', 'me', '', '', '106.000000'], [keys.inbox('w')])).toEqual([
      null,
      0,
      0,
      0,
      'w',
    ]);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual([]);
  });

  test('while waiting, reclaims stale holders so the next slice can get their token', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['1', 'dead', '5000', '', 'me', '100.000000']);
    await run('tryLock', ['1', 'w', '', '25', 'me', '100.000000']);
    expect(await run('claim', ['w', '1', '5', '25', 'me', '', '', '200.000000'], [keys.inbox('w')])).toEqual([
      null,
      1,
      0,
      0,
      'w',
    ]);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
    expect(await redis.hGetAll(keys.grabbed)).toEqual({});
  });

  test('reports how many others are registered after a grant (the next lock of a contended semaphore skips tryLock)', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    await run('prepareWait', ['next', '', '10', '1', '', '']);
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    const [token, renewed, fence, others] = (await run(
      'claim',
      ['w', '1', '', '25', 'me'],
      [keys.inbox('w')],
    )) as number[];
    expect([token, renewed, others]).toEqual(['0', 0, 1]);
    expect(fence).toBeGreaterThan(0);
    // Nobody is blocked while a token is still free, however many registrations there are.
    await run('release', ['0', 'w', '1', '']);
    await run('signal', ['extra', '1', '']); // behind "0"
    await run('prepareWait', ['w3', '', '10', '1', '', '']);
    await run('prepareWait', ['w4', '', '10', '1', '', '']);
    await redis.lMove(keys.available, keys.inbox('w3'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w3', '1', '', '25', 'me'], [keys.inbox('w3')])).toEqual([
      '0',
      0,
      expect.any(Number),
      0,
      'w3',
    ]);
  });

  test('reports others whichever end of WAITING the served registration is at, and none when it is alone', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    // "late" registered last (rank 1): its rank tells; "early" (rank 0) needs the count.
    await run('prepareWait', ['early', '', '10', '1', '', '']);
    await run('prepareWait', ['late', '', '20', '1', '', '']);
    for (const [served, others] of [
      ['late', 1],
      ['early', 1],
    ] as const) {
      await redis.lMove(keys.available, keys.inbox(served), 'LEFT', 'RIGHT');
      const reply = (await run(
        'claim',
        [served, '1', '', '25', 'me', `${served}-g`, '1'],
        [keys.inbox(served)],
      )) as number[];
      expect([reply[0], reply[1], reply[3]]).toEqual(['0', 1, others]); // kept: others wait
      await run('release', ['0', `${served}-g`, '1', '']);
    }
    await redis.zRem(keys.waiting, 'late');
    await redis.lMove(keys.available, keys.inbox('early'), 'LEFT', 'RIGHT');
    const alone = (await run(
      'claim',
      ['early', '1', '', '25', 'me', 'alone-g', '1'],
      [keys.inbox('early')],
    )) as number[];
    expect([alone[0], alone[1], alone[3]]).toEqual(['0', 0, 0]);
    expect(await redis.zCard(keys.waiting)).toBe(0);
  });

  test("keeps the registration for the caller's next wait when asked while others wait, and reclaims stale holders one grant in 16", async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    await run('tryLock', ['2', 'dead', '5000', '', 'me', '100.000000']); // takes "0"; stale by t=200
    // Local time (useLocalTime) keeps the dead holder's lease running until the claim at t=200.
    await run('prepareWait', ['w', '', '10', '2', '', '100.000000']);
    await run('prepareWait', ['other', '', '10', '2', '', '100.000000']);
    const before = await redis.zScore(keys.waiting, 'w');
    await redis.set(keys.fence, '15'); // the next grant is number 16: it reclaims
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    const claimed = await run('claim', ['w', '2', '0', '25', 'me', 'g1', '1', '200.000000'], [keys.inbox('w')]);
    expect(claimed).toEqual(['1', 1, 16, 1, 'g1']);
    // Kept as it was (its expiry unchanged), and the grant recorded under its own id.
    expect(await redis.zScore(keys.waiting, 'w')).toBe(before);
    expect((await redis.zRange(keys.waiting, 0, -1)).sort()).toEqual(['other', 'w']);
    expect((await redis.hGet(keys.grabbed, '1'))?.split(' ')[1]).toBe('g1');
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']); // the stale holder's token
    // Not asked to keep it: the registration ends with the grant.
    await redis.zRem(keys.waiting, 'w');
    await run('prepareWait', ['w2', '', '10', '2', '', '200.000000']);
    await redis.lMove(keys.available, keys.inbox('w2'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w2', '2', '', '25', 'me', 'g2', ''], [keys.inbox('w2')])).toEqual([
      '0',
      0,
      17,
      1,
      'g2',
    ]);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['other']);
    // Nobody else registered: not kept even when asked.
    await redis.zRem(keys.waiting, 'other');
    await run('release', ['0', 'g2', '1', '']);
    await run('prepareWait', ['w4', '', '10', '2', '', '']);
    await redis.lMove(keys.available, keys.inbox('w4'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w4', '2', '', '25', 'me', 'g4', '1'], [keys.inbox('w4')])).toEqual([
      '0',
      0,
      18,
      0,
      'g4',
    ]);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual([]);
    // A token left free: not kept even when others are registered.
    await run('release', ['0', 'g4', '1', '']);
    await run('signal', ['job', '2', '']); // behind "0"
    await run('prepareWait', ['other', '', '10', '2', '', '']);
    await run('prepareWait', ['w3', '', '10', '2', '', '']);
    await redis.lMove(keys.available, keys.inbox('w3'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w3', '2', '', '25', 'me', 'g3', '1'], [keys.inbox('w3')])).toEqual([
      '0',
      0,
      19,
      0,
      'g3',
    ]);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['other']);
  });

  test('on a grant, looks for expired registrations once in 16 grants (by fencing number)', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await redis.zAdd(keys.waiting, [{ score: 1, value: 'gone' }]);
    const grant = async (id: string, fenceBefore: number) => {
      await redis.set(keys.fence, String(fenceBefore));
      await run('prepareWait', [id, '', '10', '1', '', '']);
      await redis.lMove(keys.available, keys.inbox(id), 'LEFT', 'RIGHT');
      const reply = await run('claim', [id, '1', '', '25', 'me'], [keys.inbox(id)]);
      await run('release', ['0', id, '1', '']);
      return reply;
    };
    expect(await grant('a', 1000)).toEqual(['0', 0, 1001, 1, 'a']);
    expect(await grant('b', 1007)).toEqual(['0', 0, 1008, 1, 'b', 'gone']);
  });

  test('from an inbox a BLMOVE reached more than once (re-sent after a reconnect): grants the head token and returns the others, which count as free', async () => {
    const { keys, run } = setup();
    await run('create', ['3', '']);
    await run('prepareWait', ['w', '', '10', '3', '', '']);
    await run('prepareWait', ['other', '', '10', '3', '', '']);
    for (let i = 0; i < 3; i += 1) await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    expect(await redis.exists(keys.available)).toBe(0);
    // Asked to keep the registration while another is registered, but the returned tokens are free.
    expect(await run('claim', ['w', '3', '', '25', 'me', 'g', '1'], [keys.inbox('w')])).toEqual([
      '0',
      0,
      expect.any(Number),
      0,
      'g',
    ]);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['1', '2']);
    expect(await redis.exists(keys.inbox('w'))).toBe(0);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['other']);
  });

  test('bounces every token of an inbox whose registration is gone', async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    for (let i = 0; i < 2; i += 1) await redis.lMove(keys.available, keys.inbox('gone'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['gone', '2', '', '25', 'me'], [keys.inbox('gone')])).toEqual([null, 0, 0, 0, 'gone']);
    expect((await redis.lRange(keys.available, 0, -1)).sort()).toEqual(['0', '1']);
    expect(await redis.hLen(keys.grabbed)).toBe(0);
    expect(await redis.exists(keys.inbox('gone'))).toBe(0);
  });

  test('bounces a token that reaches an unregistered (abandoned) inbox back to AVAILABLE', async () => {
    const { name, keys, run } = setup();
    await run('create', ['1', '']);
    await redis.lMove(keys.available, keys.inbox('gone'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['gone', '1', '', '25', 'me'], [keys.inbox('gone')])).toEqual([null, 0, 0, 0, 'gone']);
    const state = await snapshot(redis, name);
    expect(state.available).toEqual(['0']);
    expect(state.grabbed).toEqual({});
    expect(await redis.exists(keys.inbox('gone'))).toBe(0);
  });
});

describe('recover.lua', () => {
  test('adopts a grant whose claim ran but whose reply was lost', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['2', 'lost-reply', '', '', 'me']);
    expect(await run('recover', ['lost-reply', '', '', '100', 'me'], [keys.inbox('lost-reply')])).toEqual([
      '0',
      expect.any(Number),
      expect.any(Number),
      'lost-reply',
    ]);
  });

  test('adopting a grant whose claim kept its registration ends that registration too', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    await run('prepareWait', ['other', '', '10', '1', '', '']);
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    // The claim grants as g1 and keeps w (others wait, no token free); its reply is lost.
    expect(await run('claim', ['w', '1', '', '25', 'me', 'g1', '1'], [keys.inbox('w')])).toEqual([
      '0',
      1,
      expect.any(Number),
      1,
      'g1',
    ]);
    expect((await redis.zRange(keys.waiting, 0, -1)).sort()).toEqual(['other', 'w']);
    // recover by grant id and registration id adopts the grant, and the kept registration goes:
    // the client never heard of it.
    expect(await run('recover', ['g1', '', '', '100', 'me', '', 'w'], [keys.inbox('w')])).toEqual([
      '0',
      expect.any(Number),
      expect.any(Number),
      'g1',
    ]);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['other']);
    expect(grantIds(await redis.hGetAll(keys.grabbed))).toEqual({ '0': 'g1' });
  });

  test('claims a token still in the inbox', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    expect(await run('recover', ['w', '', '', '100', 'me'], [keys.inbox('w')])).toEqual([
      '0',
      expect.any(Number),
      0,
      'w',
    ]);
    expect(grantIds(await redis.hGetAll(keys.grabbed))).toEqual({ '0': 'w' });
  });

  test('with nothing delivered yet, marks the grant id abandoned for the longer of its lease and the mark', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await run('prepareWait', ['w', '', '10', '1', '', '']);
    expect(await run('recover', ['w', '', '', '100', 'me'], [keys.inbox('w')])).toEqual([null, 'w']);
    const [mark] = await redis.zRangeWithScores(keys.waiting, 0, -1);
    expect(mark?.value).toBe('~w');
    expect(Math.abs(mark!.score - (await serverSeconds()) - 100)).toBeLessThan(2);
    // A blocked command still alive on the server delivers late: its claim bounces the token.
    await redis.lMove(keys.available, keys.inbox('w'), 'LEFT', 'RIGHT');
    expect(await run('claim', ['w', '1', '', '25', 'me'], [keys.inbox('w')])).toEqual([null, 0, 0, 0, 'w']);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual([]);
  });
});

describe('prepareWait.lua', () => {
  test('does what tryLock does before a wait: creates the semaphore and reclaims stale holders', async () => {
    const { name, keys, run } = setup();
    expect(await run('prepareWait', ['w', '', '10', '2', '', ''])).toBe(1);
    expect((await snapshot(redis, name)).available).toEqual(['0', '1']);
    await run('tryLock', ['2', 'dead', '5000', '', 'me', '100.000000']);
    expect(await run('prepareWait', ['w2', '', '10', '2', '5', '200.000000'])).toBe(1);
    const state = await snapshot(redis, name);
    expect(state.available.sort()).toEqual(['0', '1']);
    expect(state.grabbed).toEqual({});
    expect((await redis.zRange(keys.waiting, 0, -1)).sort()).toEqual(['w', 'w2']);
  });

  test('registers nothing for an abandoned grant id, so a pipeline arriving late cannot be granted', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    // The client gave up on `late` (its reply never came) before its pipeline reached Redis.
    expect(await run('recover', ['late', '', '', '100', 'me'], [keys.inbox('late')])).toEqual([null, 'late']);
    expect(await run('prepareWait', ['late', '', '10', '1', '', ''])).toBe(0);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['~late']);
    await redis.lMove(keys.available, keys.inbox('late'), 'LEFT', 'RIGHT'); // its BLMOVE
    expect(await run('claim', ['late', '1', '', '25', 'me'], [keys.inbox('late')])).toEqual([null, 0, 0, 0, 'late']);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
    expect(await redis.hGetAll(keys.grabbed)).toEqual({});
  });
});

describe('includes: ensure and touch_expiry', () => {
  test('re-creation after EXISTS alone was lost does not duplicate tokens still on AVAILABLE', async () => {
    const { name, keys, run } = setup();
    await run('create', ['3', '']);
    await run('tryLock', ['3', 'g', '', '', 'me']); // holds "0"
    await redis.del(keys.exists); // e.g. evicted
    expect(await run('create', ['3', ''])).toBe(1);
    const state = await snapshot(redis, name);
    expect([...state.available].sort()).toEqual(['1', '2']);
    expect(Object.keys(state.grabbed)).toEqual(['0']);
  });

  test('creates a large semaphore in batches of 10,000 that other commands interleave with, pushing each token once', async () => {
    const { name, keys, run } = setup();
    expect(await run('create', ['25000', ''])).toBe(2);
    expect(await redis.get(keys.creating)).toBe('N 25000 10000');
    expect(await redis.exists(keys.exists)).toBe(0);
    // Between batches the pool is usable: a lock takes the first token (and pushes the next batch).
    expect(await run('tryLock', ['25000', 'g', '', '', 'me'])).toEqual(['0', expect.any(Number), 'g']);
    expect(await redis.get(keys.creating)).toBe('N 25000 20000');
    expect(await run('create', ['25000', ''])).toBe(1);
    expect(await redis.exists([keys.creating])).toBe(0);
    expect(await redis.get(keys.exists)).toBe('1');
    const available = await redis.lRange(keys.available, 0, -1);
    expect(available).toHaveLength(24_999);
    expect(new Set([...available, '0']).size).toBe(25_000);
    expect(available.slice(0, 2)).toEqual(['1', '2']); // in order, as the gem creates them
    expect(await run('create', ['25000', ''])).toBe(0);
    expect(Object.keys((await snapshot(redis, name)).grabbed)).toEqual(['0']);
  });

  // Re-creation after a partial loss: spec/protocol/recreation.spec.ts.

  test('gives every key one absolute deadline, extended to the last registration lease', async () => {
    const { name, keys, run } = setup();
    await run('create', ['1', '60000']);
    const deadlines = await Promise.all(
      (await snapshot(redis, name)).keys.map((key) => redis.sendCommand(['PEXPIRETIME', key])),
    );
    expect(new Set(deadlines).size).toBe(1);
    const far = Date.now() / 1000 + 3600;
    await redis.zAdd(keys.waiting, { score: far, value: 'w' });
    await run('create', ['1', '60000']);
    expect(Number(await redis.sendCommand(['PEXPIRETIME', keys.exists]))).toBeGreaterThanOrEqual(Math.ceil(far * 1000));
  });
});

describe('signal.lua', () => {
  test('pushes at the tail, so jobs leave in signal order, behind free tokens and tokens unlocked meanwhile', async () => {
    const { name, keys, run } = setup();
    expect(await run('signal', ['a', '2', ''])).toBe(3); // creates "0", "1" first, then the job behind them
    expect(await run('signal', ['b', '2', ''])).toBe(4);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0', '1', 'a', 'b']);
    await run('tryLock', ['2', 'g1', '', '', 'me']); // takes "0"
    await run('signal', ['c', '2', '']);
    await run('release', ['0', 'g1', '1', '']); // an unlock pushes at the head
    expect((await snapshot(redis, name)).available).toEqual(['0', '1', 'a', 'b', 'c']);
  });

  test('with resources 0 creates the keys and no token: only jobs are on AVAILABLE', async () => {
    const { keys, run } = setup();
    expect(await run('signal', ['a', '0', ''])).toBe(1);
    expect(await run('signal', ['b', '0', ''])).toBe(2);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['a', 'b']);
    expect(await redis.get(keys.exists)).toBe('1');
    expect(await run('tryLock', ['0', 'g1', '', '', 'me'])).toEqual(['a', expect.any(Number), 'g1']);
    expect(await run('tryLock', ['0', 'g2', '', '', 'me'])).toEqual(['b', expect.any(Number), 'g2']);
    expect(await run('tryLock', ['0', 'g3', '', '', 'me'])).toEqual([null, 0, 'g3']);
  });

  test('a semaphore of resources 0 is created empty, and a re-creation pushes no token', async () => {
    const { name, keys, run } = setup();
    expect(await run('create', ['0', ''])).toBe(1);
    expect(await redis.exists(keys.available)).toBe(0);
    await run('signal', ['job', '0', '']);
    await redis.del(keys.exists); // e.g. evicted: a re-creation scans and pushes nothing
    expect(await run('create', ['0', ''])).toBe(1);
    expect((await snapshot(redis, name)).available).toEqual(['job']);
  });
});

describe('reapWaiters.lua', () => {
  test('returns tokens from inboxes whose lease is over, and leaves live registrations alone', async () => {
    const { name, keys, run } = setup();
    await run('create', ['2', '']);
    await redis.zAdd(keys.waiting, [
      { score: 1, value: '~dead' },
      { score: 1e12, value: 'alive' },
    ]);
    await redis.lMove(keys.available, keys.inbox('dead'), 'LEFT', 'RIGHT');
    await redis.lMove(keys.available, keys.inbox('alive'), 'LEFT', 'RIGHT');
    expect(await run('reapWaiters', ['', '~dead', 'alive'], [keys.inbox('dead'), keys.inbox('alive')])).toBe(1);
    const state = await snapshot(redis, name);
    expect(state.available).toEqual(['0']);
    expect(state.waiting).toEqual(['alive']);
    expect(state.inboxes).toEqual({ [keys.inbox('alive')]: ['1'] });
  });

  test('drains an abandoned inbox at any time, keeping the mark until its lease is over', async () => {
    const { keys, run } = setup();
    await run('create', ['1', '']);
    await redis.zAdd(keys.waiting, { score: 1e12, value: '~zombie' });
    await redis.lMove(keys.available, keys.inbox('zombie'), 'LEFT', 'RIGHT'); // a zombie BLMOVE delivered
    expect(await run('reapWaiters', ['', '~zombie'], [keys.inbox('zombie')])).toBe(1);
    expect(await redis.lRange(keys.available, 0, -1)).toEqual(['0']);
    expect(await redis.exists(keys.inbox('zombie'))).toBe(0);
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['~zombie']);
  });

  test("a reaped weighted waiter's COLLECTING entry goes with its registration; a live one's stays", async () => {
    const { keys, run } = setup();
    await run('create', ['3', '']);
    await redis.zAdd(keys.waiting, [
      { score: 1, value: 'dead' },
      { score: 1e12, value: 'alive' },
    ]);
    await redis.hSet(keys.collecting, { '#dead': '2', '#alive': '3' });
    await run('reapWaiters', ['', 'dead', 'alive'], [keys.inbox('dead'), keys.inbox('alive')]);
    expect(await redis.hGetAll(keys.collecting)).toEqual({ '#alive': '3' });
    expect(await redis.zRange(keys.waiting, 0, -1)).toEqual(['alive']);
  });
});

describe('release.lua and refresh.lua', () => {
  test('only the owning grant releases, refreshes or consumes', async () => {
    const { name, run } = setup();
    await run('tryLock', ['1', 'g1', '', '', 'me', '100.000000']);
    expect(await run('refresh', ['0', 'intruder', ''])).toEqual([0, 'intruder']);
    expect(await run('release', ['0', 'intruder', '1', ''])).toEqual([0, 0, 'intruder']);
    expect(await run('refresh', ['0', 'g1', '150.000000'])).toEqual([1, 'g1']);
    // The refresh restamps the lease and keeps the rest of the record: the acquisition time, the label.
    const { grabbed, owners } = await snapshot(redis, name);
    expect(grabbed).toEqual({ '0': expect.stringMatching(/^150\.000000 g1 \d+ 0 100\.000000 me$/) });
    expect(owners).toEqual({});
    expect(await run('release', ['0', 'g1', '1', ''])).toEqual([1, 1, 'g1']);
    expect(await run('release', ['0', 'g1', '1', ''])).toEqual([0, 1, 'g1']); // a second release pushes nothing
    expect((await snapshot(redis, name)).available).toEqual(['0']);
    await run('tryLock', ['1', 'g2', '', '', 'me']);
    expect(await run('release', ['0', 'g2', '0', ''])).toEqual([1, 0, 'g2']); // consume: not put back
    expect(await redis.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1)).toEqual([]);
  });
});

describe('releaseStale.lua', () => {
  test("reclaims by each holder's own lease, Ruby holders and unreadable stamps by the caller's, and forgets their records", async () => {
    const { name, keys, run } = setup();
    await run('create', ['5', '']);
    await run('tryLock', ['5', 'a', '5000', '', 'me', '100.000000']); // "0": lease over at 105
    await run('tryLock', ['5', 'b', '10000', '', 'me', '104.000000']); // "1": lease runs to 114
    await run('tryLock', ['5', 'c', '60000', '', 'me', '104.000000']); // "2": a longer lease than the caller's
    await redis.lPop(keys.available);
    await redis.hSet(keys.grabbed, '3', 'garbage');
    await redis.lPop(keys.available);
    await redis.hSet(keys.grabbed, '4', '104.5'); // a Ruby holder's plain stamp
    expect(await run('releaseStale', ['110.000000', '5000', ''])).toEqual([3]);
    const state = await snapshot(redis, name);
    expect(Object.keys(state.grabbed).sort()).toEqual(['1', '2']);
    expect(grantIds(state.grabbed)).toEqual({ '1': 'b', '2': 'c' });
    expect([...state.available].sort()).toEqual(['0', '3', '4']);
    // Without a stale timeout of its own, a caller still honours leases, and leaves Ruby holders alone.
    await redis.hSet(keys.grabbed, '4', '104.5');
    await redis.lRem(keys.available, 1, '4');
    expect(await run('releaseStale', ['200.000000', '0', ''])).toEqual([2]);
    expect(Object.keys((await snapshot(redis, name)).grabbed)).toEqual(['4']);
  });
});

describe('the grant record (includes/grant.lua)', () => {
  test('one HSET per grant: the label stays last and whole, with spaces or empty, through refreshes', async () => {
    const { keys, run } = setup();
    await run('tryLock', ['2', 'g1', '5000', '', ' two  spaces ', '100.000000']);
    expect(await run('refresh', ['0', 'g1', '101.500000'])).toEqual([1, 'g1']);
    expect(await redis.hGet(keys.grabbed, '0')).toMatch(/^101\.500000 g1 \d+ 5000 100\.000000 {2}two {2}spaces $/);
    expect(await redis.zScore(keys.leases, '0')).toBeNull(); // a canonical token: never indexed
    expect(await run('release', ['0', 'g1', '1', ''])).toEqual([1, 2, 'g1']);
    expect(await redis.exists([keys.grabbed, keys.owners])).toBe(0);
  });

  test('a four-field record of an earlier version is refreshed, reclaimed and released; its OWNERS entry is left alone', async () => {
    const { keys, run } = setup();
    await run('create', ['2', '']);
    const [a, b] = [await redis.lPop(keys.available), await redis.lPop(keys.available)];
    expect([a, b]).toEqual(['0', '1']);
    await redis.hSet(keys.grabbed, { '0': '100.000000 old-a 7 5000', '1': '100.000000 old-b 8 0' });
    await redis.hSet(keys.owners, { '0': 'old-a 7 100.000000 label a', '1': 'old-b 8 100.000000 label b' });
    await redis.zAdd(keys.leases, [{ score: 105, value: '0' }]); // an entry as written before scores were µs
    expect(await run('refresh', ['0', 'old-a', '102.000000'])).toEqual([1, 'old-a']);
    expect(await redis.hGet(keys.grabbed, '0')).toBe('102.000000 old-a 7 5000');
    // "0" is a canonical token, which LEASES never indexes: the refresh leaves the entry, reclaim drops it.
    expect(await redis.zScore(keys.leases, '0')).toBe(105);
    expect(await run('releaseStale', ['106.000000', '0', ''])).toEqual([0]);
    expect(await redis.zScore(keys.leases, '0')).toBeNull();
    expect(await run('releaseStale', ['108.000000', '0', ''])).toEqual([1]);
    expect(await run('release', ['1', 'intruder', '1', ''])).toEqual([0, 1, 'intruder']);
    expect(await run('release', ['1', 'old-b', '1', ''])).toEqual([1, 2, 'old-b']);
    expect(await redis.hGetAll(keys.grabbed)).toEqual({});
    // Nothing reads OWNERS any more: its old entries go with delete() or the keys' expiry.
    expect(Object.keys(await redis.hGetAll(keys.owners)).sort()).toEqual(['0', '1']);
  });

  test('with expiration, old OWNERS data expires with the other keys, and is never made persistent', async () => {
    const { keys, run } = setup();
    await redis.hSet(keys.owners, '0', 'old 1 100.000000 label');
    await run('tryLock', ['1', 'g1', '', '', 'me', '', '60000']);
    expect(await redis.pTTL(keys.exists)).toBe(-1); // held: no TTL on the semaphore's keys
    expect(await run('release', ['0', 'g1', '1', '60000'])).toEqual([1, 1, 'g1']);
    const ttl = await redis.pTTL(keys.owners);
    expect(ttl).toBeGreaterThan(50_000);
    expect(Math.abs(ttl - (await redis.pTTL(keys.exists)))).toBeLessThan(1000);
  });
});

describe('loading (lib/redis/lua-source.ts)', () => {
  test('drops the helpers a script never calls, and the helpers only they called', () => {
    const source = [
      'local function used()\n  return 1\nend\n',
      'local function only_for_unused()\n  return 2\nend\n',
      'local function unused()\n  return only_for_unused()\nend\n',
      'local function recursive(n)\n  if n > 0 then\n    return recursive(n - 1)\n  end\nend\n',
      'return used()\n',
    ].join('');
    expect(withoutUnusedFunctions(source)).toBe('local function used()\n  return 1\nend\nreturn used()\n');
  });

  test('a release defines no grant, creation or reclaim helper; a grant defines creation and reclaim only where they run', () => {
    const release = scripts.release.source;
    for (const helper of ['record_grant', 'index_lease', 'create_batch', 'reclaim_stale', 'ensure']) {
      expect(release).not.toContain(`function ${helper}(`);
    }
    // In claim, the helpers of an empty slice or a sampled reclaim come after the grant, in their
    // block, or in the block of a weighted wait (includes/weighted.lua), which returns at its end.
    const claim = scripts.claim.source;
    const block = claim.indexOf('if not token or number % 16 == 0 then');
    const weighted = [claim.indexOf('if settings.permits > 1 then'), claim.indexOf('local reply = collect(')];
    expect(block).toBeGreaterThan(claim.indexOf('local function record_grant('));
    expect(weighted[0]).toBeGreaterThan(0);
    expect(weighted[1]).toBeGreaterThan(weighted[0]!);
    for (const helper of ['reclaim_stale', 'ensure', 'touch_expiry']) {
      const definitions = [...claim.matchAll(new RegExp(`local function ${helper}\\(`, 'g'))].map((m) => m.index);
      expect(definitions.length).toBeGreaterThan(0);
      for (const at of definitions) {
        expect(at > block || (at > weighted[0]! && at < weighted[1]!)).toBe(true);
      }
    }
  });
});

describe('the keys a hot-path call passes', () => {
  const target = (name: string, cluster: boolean) => ({
    keys: semaphoreKeys(name, { cluster }),
    resources: 1,
    options: { staleClientTimeout: 30_000, expiration: null, useLocalTime: false, owner: 'me' },
  });

  test('on a single Redis AVAILABLE alone, on Cluster every key (a slot migration checks only those)', () => {
    const single = target('jobs', false);
    const cluster = target('jobs', true);
    const calls = (t: typeof single) => [
      tryLock(t, 'g1', 10_000),
      prepareWait(t, 'g1', 10_000),
      claim(t, 'g1', { grantId: 'g1', nextLifetimeMs: 10_000, keep: false }),
      recover(t, 'g1', 'g1', 10_000),
      release(t, '0', 'g1', true),
      refresh(t, '0', 'g1'),
    ];
    for (const call of calls(single)) expect(call.keys).toEqual([single.keys.available]);
    const [tried, prepared, claimed, recovered, released, refreshed] = calls(cluster).map((call) => call.keys);
    expect(tried).toEqual(cluster.keys.scriptKeys);
    expect(prepared).toEqual(cluster.keys.scriptKeys);
    expect(claimed).toEqual([...cluster.keys.scriptKeys, cluster.keys.inbox('g1')]);
    expect(recovered).toEqual([...cluster.keys.scriptKeys, cluster.keys.inbox('g1')]);
    expect(released).toEqual(cluster.keys.scriptKeys);
    expect(refreshed).toEqual(cluster.keys.holderKeys);
  });

  test.each([false, true])(
    'a cycle leaves the same keys and state with AVAILABLE alone as with every key (cluster: %s)',
    async (cluster) => {
      const name = `{${uniqueName('keys')}}`; // a hash tag: the same key names either way
      const t = target(name, cluster);
      const client = redis as unknown as Parameters<typeof runScript>[0];
      expect((await runScript(client, tryLock(t, 'g1', 10_000))).token).toBe('0');
      expect((await runScript(client, tryLock(t, 'g2', 10_000))).token).toBeNull(); // registers g2
      expect(await runScript(client, refresh(t, '0', 'g1'))).toBe(true);
      expect(await redis.exists(t.keys.leases)).toBe(0); // "0" is never indexed (includes/grant.lua)
      expect((await runScript(client, release(t, '0', 'g1', true))).ended).toBe(true);
      // An entry an older version's unlock left for the token.
      await redis.zAdd(t.keys.leases, { score: 1, value: '0' });
      await redis.sendCommand(['LMOVE', t.keys.available, t.keys.inbox('g2'), 'LEFT', 'RIGHT']); // as BLMOVE would
      const claimed = await runScript(client, claim(t, 'g2', { grantId: 'g2', nextLifetimeMs: 10_000, keep: false }));
      expect(claimed).toMatchObject({ token: '0', renewed: false });
      const held = await snapshot(redis, name);
      expect(grantIds(held.grabbed)).toEqual({ '0': 'g2' });
      expect(held.waiting).toEqual([]);
      // g2's grant of "0" (not indexed) dropped the entry left for the token.
      expect(await redis.zRange(t.keys.leases, 0, -1)).toEqual([]);
      expect((await runScript(client, release(t, '0', 'g2', true))).ended).toBe(true);
      const after = await snapshot(redis, name);
      expect(after.available).toEqual(['0']);
      expect(after.grabbed).toEqual({});
      const prefix = t.keys.available.slice(0, -'AVAILABLE'.length);
      expect(after.keys).toEqual(['AVAILABLE', 'EXISTS', 'FENCE', 'VERSION'].map((key) => prefix + key));
    },
  );
});
