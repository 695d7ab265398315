import { buildFunctionLibrary, functionLibrary, loadFunctionLibrary } from '../../lib/redis/functions';
import { semaphoreKeys } from '../../lib/redis/keys';
import { claim, refresh, release, tryLock, type ScriptTarget } from '../../lib/redis/commands';
import { runScript, storedCommand } from '../../lib/redis/send';
import { useFixture } from '../support/fixture';
import { replyField } from '../support/script-calls';
import { uniqueName, type Client } from '../support/redis';

/** The hot-path scripts as a Redis function library: built from the same files, answering as the scripts do. */
const fixture = useFixture();
let redis: Client;
let client: Parameters<typeof runScript>[0];
beforeAll(async () => {
  redis = fixture.redis;
  client = redis as unknown as typeof client;
  expect(await loadFunctionLibrary(client)).toBe(true);
});

function target(
  name: string,
  { functions = false, cluster = false, useLocalTime = false, expiration = null as number | null } = {},
): ScriptTarget {
  return {
    keys: semaphoreKeys(name, { cluster }),
    resources: 2,
    options: { staleClientTimeout: 30_000, expiration, useLocalTime, owner: 'host:1 worker a' },
    functions,
  };
}

/**
 * Every key of semaphore `name` and what it holds, with what differs from run to run made alike:
 * GRABBED stamps, fencing numbers and LEASES scores (which count from a stamp).
 */
async function dump(name: string): Promise<Record<string, unknown>> {
  const prefix = semaphoreKeys(name).available.slice(0, -'AVAILABLE'.length);
  const keys = (await redis.keys(`${prefix}*`)).sort();
  const alike = (text: string) => text.replace(/\d{10}\.\d{6}/g, 'STAMP').replace(/\d{15,}/g, 'NUMBER');
  const entries = await Promise.all(
    keys.map(async (key) => {
      const type = String(await redis.sendCommand(['TYPE', key]));
      const read: Record<string, string[]> = {
        list: ['LRANGE', key, '0', '-1'],
        hash: ['HGETALL', key],
        zset: ['ZRANGE', key, '0', '-1', 'WITHSCORES'],
        string: ['GET', key],
      };
      const value = read[type] ? await redis.sendCommand(read[type]!) : type;
      return [key.slice(prefix.length), alike(JSON.stringify(value))] as const;
    }),
  );
  return Object.fromEntries(entries);
}

/**
 * A semaphore's life in script calls: a grant, a miss that registers, a refresh, an unlock that hands
 * the token to the waiter (LMOVE as its BLMOVE), the waiter's claim, a claim that finds its inbox
 * empty, a consume, and calls that find their grant over. Between every two steps, `between` runs.
 */
async function cycle(t: ScriptTarget, between: () => Promise<void>): Promise<unknown[]> {
  const fence = (reply: { fence: number }) => ({ ...reply, fence: reply.fence > 0 ? 'FENCE' : 0 });
  const replies: unknown[] = [];
  const step = async (reply: unknown) => {
    replies.push(reply);
    await between();
  };
  await step(fence(await runScript(client, tryLock(t, 'g1', 10_000))));
  await step(fence(await runScript(client, tryLock(t, 'g2', 10_000))));
  await step(fence(await runScript(client, tryLock(t, 'g3', 10_000)))); // a miss: registers g3
  await step(await runScript(client, refresh(t, '0', 'g1')));
  await step(await runScript(client, release(t, '0', 'g1', true)));
  await redis.sendCommand(['LMOVE', t.keys.available, t.keys.inbox('g3'), 'LEFT', 'RIGHT']);
  await step(fence(await runScript(client, claim(t, 'g3', { grantId: 'g3', nextLifetimeMs: 10_000, keep: true }))));
  await step(fence(await runScript(client, claim(t, 'g3', { grantId: 'g4', nextLifetimeMs: 10_000, keep: false }))));
  await step(await runScript(client, release(t, '1', 'g2', false)));
  await step(await runScript(client, release(t, '0', 'g1', true))); // over: changes nothing
  await step(await runScript(client, refresh(t, '1', 'g2')));
  return replies;
}

describe('the function library (lib/redis/functions.ts)', () => {
  test('holds a function per hot-path script, named after a hash of its code, and defines each helper of their includes once', () => {
    expect([...functionLibrary.functions.keys()]).toEqual(['tryLock', 'claim', 'release', 'refresh']);
    expect(functionLibrary.name).toMatch(/^rts_[0-9a-f]{12}$/);
    for (const fn of functionLibrary.functions.values()) expect(fn.startsWith(`${functionLibrary.name}_`)).toBe(true);
    expect(buildFunctionLibrary()).toEqual(functionLibrary); // the same files give the same library
    const definitions = (helper: string) => functionLibrary.source.split(`local function ${helper}(`).length - 1;
    for (const helper of [
      'clock_stamp',
      'settings_of',
      'mark_present',
      'ensure',
      'record_grant',
      'index_lease',
      'holds',
      'is_small',
      'parse_grant',
    ]) {
      expect(definitions(helper)).toBe(1);
    }
    // The keys' and the clock's state is set afresh by every call, not kept from the last one.
    const tryLockBody = functionLibrary.source.split(
      `register_function('${functionLibrary.functions.get('tryLock')}'`,
    )[1]!;
    expect(tryLockBody).toMatch(/^[\s\S]*?K_PREFIX = nil[\s\S]*?redis_time = nil[\s\S]*?known_to_exist = false/);
    // Only the names made from a prefix are kept from call to call: one table, made when the library loads.
    expect(functionLibrary.source.match(/^local LIBRARY_NAMES = \{\}$/gm)).toHaveLength(1);
    expect(functionLibrary.source).not.toMatch(/^LIBRARY_NAMES =/m);
    // So are the settings read from their argument (includes/settings.lua).
    expect(functionLibrary.source.match(/^local LIBRARY_SETTINGS = \{\}$/gm)).toHaveLength(1);
  });

  test('loads once per server: another load (another process of this version) finds it there', async () => {
    await redis.sendCommand(['FUNCTION', 'DELETE', functionLibrary.name]);
    expect(await loadFunctionLibrary(client)).toBe(true);
    expect(await loadFunctionLibrary(client)).toBe(true);
    const [library] = (await redis.sendCommand(['FUNCTION', 'LIST', 'LIBRARYNAME', functionLibrary.name])) as unknown[];
    const functions = replyField(library, 'functions') as unknown[];
    expect(functions.map((fn) => replyField(fn, 'name')).sort()).toEqual(
      [...functionLibrary.functions.values()].sort(),
    );
  });

  test('a call goes by FCALL only when the target says the server has the library, and only for its scripts', () => {
    const name = uniqueName('fn');
    expect(storedCommand(tryLock(target(name), 'g1', null))[0]).toBe('EVALSHA');
    expect(storedCommand(tryLock(target(name, { functions: true }), 'g1', null)).slice(0, 2)).toEqual([
      'FCALL',
      functionLibrary.functions.get('tryLock'),
    ]);
    expect(storedCommand(release(target(name, { functions: true }), '0', 'g1', true))[0]).toBe('FCALL');
  });

  test('every call stamps with its own TIME, not the one a call before it read', async () => {
    const name = uniqueName('fn');
    const t = target(name, { functions: true });
    const stampOf = async (token: string) => Number((await redis.hGet(t.keys.grabbed, token))!.split(' ')[0]);
    const serverSeconds = async () => {
      const [seconds, micros] = (await redis.sendCommand(['TIME'])) as [string, string];
      return Number(seconds) + Number(micros) / 1e6;
    };
    /** Sleeps past a second (TIME's seconds move on), then `step`; the stamp of `token` is at least TIME before the step. */
    const stampsNow = async (token: string, step: () => Promise<unknown>) => {
      await new Promise((resolve) => setTimeout(resolve, 1100));
      const before = await serverSeconds();
      await step();
      expect(await stampOf(token)).toBeGreaterThanOrEqual(before);
    };
    expect((await runScript(client, tryLock(t, 'g1', 10_000))).token).toBe('0');
    await stampsNow('0', () => runScript(client, refresh(t, '0', 'g1')));
    await stampsNow('1', () => runScript(client, tryLock(t, 'g2', 10_000)));
    expect((await runScript(client, tryLock(t, 'g3', 10_000))).token).toBeNull(); // registers g3
    expect((await runScript(client, release(t, '0', 'g1', true))).ended).toBe(true);
    await redis.sendCommand(['LMOVE', t.keys.available, t.keys.inbox('g3'), 'LEFT', 'RIGHT']);
    await stampsNow('0', () =>
      runScript(client, claim(t, 'g3', { grantId: 'g3', nextLifetimeMs: 10_000, keep: false })),
    );
  });

  test.each([
    ['a single Redis', {}],
    ['every key declared (Cluster)', { cluster: true }],
    ['useLocalTime', { useLocalTime: true }],
    ['expiration', { expiration: 60_000 }],
  ])('a cycle by FCALL answers and leaves what the same cycle by EVALSHA does: %s', async (_, settings) => {
    const name = `{${uniqueName('fn')}}`; // a hash tag: the same key names with every key declared
    // Calls for other semaphores, in the other key form and in the same, between every two steps: a
    // call must not inherit the keys or the clock of the one before, nor the names the library keeps
    // for the last prefix it saw (LIBRARY_NAMES).
    const others = [`{${uniqueName('fn-other')}}`, `{${uniqueName('fn-same')}}`];
    const noise = (functions: boolean) => async () => {
      for (const [i, other] of others.entries()) {
        const t = target(other, { functions, cluster: (i === 0) !== 'cluster' in settings });
        const { token } = await runScript(client, tryLock(t, 'n', null));
        if (token !== null) await runScript(client, release(t, token, 'n', true));
      }
    };
    const byEvalsha = await cycle(target(name, settings), noise(false));
    const evalshaState = await dump(name);
    await redis.del(await redis.keys(`${semaphoreKeys(name).available.slice(0, -'AVAILABLE'.length)}*`));
    const before = Number(/cmdstat_fcall:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1] ?? 0);
    const byFcall = await cycle(target(name, { ...settings, functions: true }), noise(true));
    expect(Number(/cmdstat_fcall:calls=(\d+)/.exec(await redis.info('commandstats'))?.[1])).toBeGreaterThanOrEqual(
      before + 10,
    );
    expect(byFcall).toEqual(byEvalsha);
    expect(await dump(name)).toEqual(evalshaState);
    expect(Object.keys(evalshaState)).toContain('GRABBED'); // the cycle ends with a grant held
  });
});
