import fc from 'fast-check';
import { semaphoreKeys } from '../../lib/redis/keys';
import { scripts } from '../../lib/redis/registry';
import { runScript, scriptCall } from '../../lib/redis/send';
import { useFixture } from '../support/fixture';
import { hotCalls } from './hot-calls';
import { uniqueName, type Client } from '../support/redis';

/**
 * Re-creation after a partial loss (EXISTS gone, other keys kept), in batches that clients'
 * commands interleave with: includes/ensure.lua and includes/present.lua, driven by the scripts as
 * the library sends them. Whatever moves between batches, every token "0".."N-1" ends up in exactly
 * one place: AVAILABLE, GRABBED or a waiter's inbox.
 */
const fixture = useFixture();
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

function setup(resources: number) {
  const name = uniqueName('recreate');
  const keys = semaphoreKeys(name);
  const client = redis as unknown as Parameters<typeof runScript>[0];
  const run = hotCalls((script: keyof typeof scripts, args: string[], extraKeys: string[] = []) =>
    runScript(client, scriptCall(scripts[script], [...keys.scriptKeys, ...extraKeys], args)),
  );
  const size = String(resources);
  return {
    keys,
    /** One script of existsOrCreate: 0 existed, 1 completed, 2 batches remain. */
    create: () => run('create', [size, '']) as Promise<number>,
    async createAll(): Promise<number> {
      let scriptsRun = 1;
      while ((await this.create()) === 2) scriptsRun += 1;
      return scriptsRun;
    },
    tryLock: async (grant: string) => ((await run('tryLock', [size, grant, '0', '', 'me'])) as [string | null])[0],
    /** `count` tryLocks sent at once (one pipeline, run in order): the tokens, null for a miss. */
    async lockMany(grants: string[]): Promise<(string | null)[]> {
      await redis.sendCommand(['SCRIPT', 'LOAD', scripts.tryLock.source]);
      return Promise.all(
        grants.map(async (grant) => ((await run('tryLock', [size, grant, '0', '', 'me'])) as [string | null])[0]),
      );
    },
    release: (token: string, grant: string) => run('release', [token, grant, '1', '']),
    /** A waiter's BLMOVE moving the head token into its inbox (its registration first, as prepareWait does). */
    async moveToInbox(grant: string): Promise<string | null> {
      await redis.zAdd(keys.waiting, { score: Date.now() / 1000 + 600, value: grant });
      return redis.lMove(keys.available, keys.inbox(grant), 'LEFT', 'RIGHT');
    },
    claim: async (grant: string) =>
      ((await run('claim', [grant, size, '0', '', 'me', '', ''], [keys.inbox(grant)])) as [string | null])[0],
    /** Every token, wherever it is. */
    async census(): Promise<string[]> {
      const inboxes = await Promise.all(
        (await redis.zRange(keys.waiting, 0, -1)).map((r) => redis.lRange(keys.inboxOfRegistration(r), 0, -1)),
      );
      return [...(await redis.lRange(keys.available, 0, -1)), ...(await redis.hKeys(keys.grabbed)), ...inboxes.flat()];
    },
  };
}

function expectEachOnce(tokens: string[], resources: number): void {
  expect(tokens).toHaveLength(resources);
  expect(new Set(tokens).size).toBe(resources);
  expect(tokens.every((token) => Number(token) < resources)).toBe(true);
}

test('a small semaphore is re-created in one script, its held and free survivors kept', async () => {
  const sem = setup(5);
  await sem.createAll();
  expect(await sem.tryLock('g')).toBe('0');
  await redis.lRem(sem.keys.available, 1, '3'); // lost with EXISTS
  await redis.del(sem.keys.exists);
  expect(await sem.create()).toBe(1);
  expect(await redis.exists(sem.keys.creating)).toBe(0);
  expect((await redis.lRange(sem.keys.available, 0, -1)).sort()).toEqual(['1', '2', '3', '4']);
  expect(await redis.hKeys(sem.keys.grabbed)).toEqual(['0']);
});

test('re-creates 30,000 tokens in batches of at most 10,000 entries read or pushed, no duplicate', async () => {
  const sem = setup(30_000);
  await sem.createAll();
  expect(await sem.tryLock('g')).toBe('0');
  await redis.lPop(sem.keys.available); // "1" is lost with nothing to show for it: re-created
  await redis.del(sem.keys.exists);
  expect(await sem.create()).toBe(2);
  // The state between batches: step, target, position, then the bitmap of tokens found.
  expect(await redis.getRange(sem.keys.creating, 0, 63)).toMatch(/^A 30000 9999 +$/);
  // GRABBED (1 entry), AVAILABLE (29,998, from its tail) then the push of the missing: 30,000 + 30,000 entries.
  expect(await sem.createAll()).toBeLessThanOrEqual(6);
  expect(await redis.get(sem.keys.exists)).toBe('1');
  expect(await redis.exists(sem.keys.creating)).toBe(0);
  expectEachOnce(await sem.census(), 30_000);
  expect((await redis.lRange(sem.keys.available, -1, -1))[0]).toBe('1'); // pushed at the tail
});

test('tokens that move behind the scan are not pushed again: taken from the head, released back onto it', async () => {
  const sem = setup(25_000);
  await sem.createAll();
  await redis.del(sem.keys.exists);
  expect(await sem.create()).toBe(2); // read the last 9,999 tokens of AVAILABLE: "15001".."24999"
  // Take 20,000 from the head (tokens the scan has not read: they are marked as they are granted),
  // so AVAILABLE (5,000) is now shorter than the scan's offset; then release some back onto the
  // head, into the part of the list the scan counts as read.
  const held = await sem.lockMany(Array.from({ length: 20_000 }, (_, i) => `g${i}`));
  expect(new Set(held).size).toBe(20_000);
  for (let i = 0; i < 10; i += 1) await sem.release(held[i]!, `g${i}`);
  await sem.createAll();
  expectEachOnce(await sem.census(), 25_000);
});

test("a token in a waiter's inbox when the scan ends is not pushed again, and its claim grants it", async () => {
  const sem = setup(3);
  await sem.createAll();
  expect(await sem.moveToInbox('w')).toBe('0'); // BLMOVE served; its claim not run yet
  await redis.lRem(sem.keys.available, 1, '2'); // lost
  await redis.del(sem.keys.exists);
  expect(await sem.create()).toBe(1);
  expect((await redis.lRange(sem.keys.available, 0, -1)).sort()).toEqual(['1', '2']);
  expect(await sem.claim('w')).toBe('0');
  expectEachOnce(await sem.census(), 3);
});

test('a fresh creation while waiters are registered goes through the scan: an in-flight token is never duplicated', async () => {
  const sem = setup(2);
  await sem.createAll();
  expect(await sem.moveToInbox('w1')).toBe('0');
  expect(await sem.moveToInbox('w2')).toBe('1');
  // Every key but WAITING and the inboxes is lost: AVAILABLE was empty (so gone), nothing was held.
  await redis.del([sem.keys.exists, sem.keys.available, sem.keys.grabbed]);
  expect(await sem.create()).toBe(1);
  expect(await redis.exists(sem.keys.available)).toBe(0);
  expect(await sem.claim('w1')).toBe('0');
  expectEachOnce(await sem.census(), 2);
});

test('whatever clients do between batches, each token ends up in one place exactly (fast-check)', async () => {
  const resources = 24_000;
  type Step = { kind: 'lock' | 'release' | 'inbox' | 'claim' | 'batch'; count: number };
  const step = fc.record({
    kind: fc.constantFrom<Step['kind']>('lock', 'release', 'inbox', 'claim', 'batch'),
    count: fc.integer({ min: 1, max: 12_000 }),
  });
  await fc.assert(
    fc.asyncProperty(
      fc.array(step, { minLength: 3, maxLength: 12 }),
      fc.integer({ min: 0, max: 5 }),
      async (steps, lost) => {
        const sem = setup(resources);
        await sem.createAll();
        const held = new Map<string, string>(); // token → grant
        const inboxes: string[] = [];
        let grants = 0;
        const lockMany = async (count: number) => {
          const ids = Array.from({ length: count }, () => `g${(grants += 1)}`);
          (await sem.lockMany(ids)).forEach((token, i) => token !== null && held.set(token, ids[i]!));
        };
        await lockMany(100);
        for (let i = 0; i < lost; i += 1) await redis.rPop(sem.keys.available);
        await redis.del(sem.keys.exists);
        for (const { kind, count } of steps) {
          if (kind === 'lock') await lockMany(count);
          if (kind === 'release') {
            for (const [token, grant] of [...held].slice(0, Math.min(count, 500))) {
              await sem.release(token, grant);
              held.delete(token);
            }
          }
          if (kind === 'inbox' && inboxes.length < 5) {
            const id = `w${(grants += 1)}`;
            if ((await sem.moveToInbox(id)) !== null) inboxes.push(id);
          }
          if (kind === 'claim' && inboxes.length > 0) {
            const id = inboxes.shift()!;
            const token = await sem.claim(id);
            if (token !== null) held.set(token, id);
          }
          if (kind === 'batch') await sem.create();
        }
        await sem.createAll();
        const tokens = await sem.census();
        expect(new Set(tokens).size).toBe(tokens.length);
        expect(tokens.length).toBe(resources);
        await redis.del([...sem.keys.scriptKeys, ...inboxes.map((id) => sem.keys.inbox(id))]);
      },
    ),
    { numRuns: 12 },
  );
}, 120_000);
