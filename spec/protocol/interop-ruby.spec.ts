/**
 * Interoperability with the real Ruby gem redis-semaphore 0.3.1 (spec/support/ruby.ts runs it with
 * Debian's ruby and redis-rb): Ruby and Node processes share one semaphore by name, on the gem's
 * keys. The gem knows nothing of this library: it reclaims by the float at the head of a GRABBED
 * value, signals with HDEL + LPUSH, and deletes four keys. Whatever it does, a Node holder must never
 * push a token it no longer holds, and every test ends with the tokens "0".."N-1" each exactly once
 * across AVAILABLE and GRABBED. No mocks: a real redis-server, real Ruby processes on loopback.
 */
import { Semaphore, type LockLostReason } from '../../lib';
import { takeCensus, tally } from '../support/census';
import { useFixture } from '../support/fixture';
import { sleep, uniqueName, until } from '../support/redis';
import {
  killRubyProcesses,
  parseLines,
  RubyProcess,
  rubyAvailability,
  runRuby,
  startRubyWorker,
} from '../support/ruby';

const ruby = rubyAvailability();
if (!ruby.available) {
  console.warn(`spec/protocol/interop-ruby.spec.ts is SKIPPED: ${ruby.reason}`);
}
const describeRuby = ruby.available ? describe : describe.skip;

/** The gem's key names, spelled out here on purpose: they are the contract with Ruby processes. */
function gemKeys(name: string) {
  return {
    available: `SEMAPHORE:${name}:AVAILABLE`,
    grabbed: `SEMAPHORE:${name}:GRABBED`,
    exists: `SEMAPHORE:${name}:EXISTS`,
    version: `SEMAPHORE:${name}:VERSION`,
  };
}

/** A Node grant's GRABBED value: "<stamp seconds.micro> <grant id> <fence> <lease ms> <acquired stamp> <owner label>". */
function nodeGrant(leaseMs: number): RegExp {
  return new RegExp(`^\\d+\\.\\d{6} \\S+ \\d+ ${leaseMs} \\d+\\.\\d{6} [\\s\\S]*$`);
}
/** A Ruby holder's GRABBED value: `Time#to_f`, a plain float. */
const RUBY_STAMP = /^\d+\.\d+$/;

function initialTokens(resources: number): string[] {
  return Array.from({ length: resources }, (_, i) => String(i));
}

describeRuby(
  `interoperability with the Ruby gem redis-semaphore 0.3.1 (${ruby.available ? ruby.versions : 'missing'})`,
  () => {
    const fixture = useFixture();

    afterAll(killRubyProcesses);

    /**
     * Asserts the exact pool: AVAILABLE and GRABBED together hold "0".."resources-1", each once, and
     * no token sits in an inbox. With `idle`, every token is on AVAILABLE. Resolves the census.
     */
    async function expectExactPool(name: string, resources: number, { idle = false } = {}) {
      const census = await takeCensus(fixture.redis, name);
      const counted = tally(census, resources);
      const everywhere = [...census.available, ...Object.keys(census.grabbed)].sort((a, b) => Number(a) - Number(b));
      expect({ tokens: everywhere, duplicated: counted.duplicated, inInboxes: counted.inInboxes }).toEqual({
        tokens: initialTokens(resources),
        duplicated: [],
        inInboxes: [],
      });
      if (idle) expect(census.grabbed).toEqual({});
      return census;
    }

    describe('the gem reclaims Node holders', () => {
      test("release_stale_locks! reclaims a Node holder (the stamp at the head of its GRABBED value); the holder's unlock then pushes nothing and its refresh fails", async () => {
        const sem = fixture.semaphore({ resources: 3, staleClientTimeout: 5000, autoRefresh: false });
        const keys = gemKeys(sem.name);
        expect(await sem.lock(0)).toBe('0');
        expect(await sem.lock(0)).toBe('1');
        const grabbed = await fixture.redis.hGetAll(keys.grabbed);
        expect(grabbed['0']).toMatch(nodeGrant(5000));
        expect(grabbed['1']).toMatch(nodeGrant(5000));

        // The gem with a short stale_client_timeout judges both holders dead once 0.3 s have passed.
        const out = await runRuby(
          `
        name = ARGV[0]
        s = semaphore(name, resources: 3, stale_client_timeout: 0.2)
        sleep 0.3
        s.release_stale_locks!
        puts JSON.generate(REDIS.lrange("SEMAPHORE:#{name}:AVAILABLE", 0, -1).sort)
        puts JSON.generate(REDIS.hgetall("SEMAPHORE:#{name}:GRABBED"))
        `,
          { args: [sem.name] },
        );
        expect(parseLines(out)).toEqual([['0', '1', '2'], {}]);

        // The Node holder's unlock finds its grant gone in Redis: false, and nothing pushed.
        expect(await sem.unlock('0')).toBe(false);
        expect(await fixture.redis.lLen(keys.available)).toBe(3);
        // Its refresh of the other reclaimed token fails and writes nothing.
        expect(await sem.refresh('1')).toBe(false);
        expect(await fixture.redis.hGetAll(keys.grabbed)).toEqual({});
        expect(await sem.unlock('1')).toBe(false);
        expect(await fixture.redis.lLen(keys.available)).toBe(3);
        await expectExactPool(sem.name, 3, { idle: true });
      });

      test("an auto-refreshing Node holder reclaimed by the gem learns it with onLockLost('reclaimed') and pushes nothing", async () => {
        const lost: Array<[string, LockLostReason]> = [];
        // Refreshes every 500 ms; between refreshes its stamp is older than the gem's 0.2 s.
        const holder = fixture.semaphore({
          resources: 2,
          staleClientTimeout: 1500,
          onLockLost: (token, reason) => lost.push([token, reason]),
        });
        const keys = gemKeys(holder.name);
        const token = await holder.lock(0);
        expect(token).toBe('0');

        const out = await runRuby(
          `
        name, token = ARGV
        grabbed = "SEMAPHORE:#{name}:GRABBED"
        s = semaphore(name, resources: 2, stale_client_timeout: 0.2)
        deadline = monotonic + 10
        while REDIS.hexists(grabbed, token) && monotonic < deadline
          sleep 0.05
          s.release_stale_locks!
        end
        puts REDIS.hexists(grabbed, token) ? 'still held' : 'reclaimed'
        `,
          { args: [holder.name, '0'] },
        );
        expect(out.trim()).toBe('reclaimed');

        await until(() => lost.length > 0, 5000, 'onLockLost after the gem reclaimed the token');
        expect(lost).toEqual([['0', 'reclaimed']]);
        expect(await holder.unlock('0')).toBe(false);
        expect(await fixture.redis.lLen(keys.available)).toBe(2);
        await sleep(600); // a refresh period: no late write from the lost holding
        expect(await fixture.redis.hGetAll(keys.grabbed)).toEqual({});
        expect(lost).toHaveLength(1);
        await expectExactPool(holder.name, 2, { idle: true });
      });

      test("the gem's delete! while Node holds: the holder's unlock resolves false and pushes nothing", async () => {
        const lost: Array<[string, LockLostReason]> = [];
        const sem = fixture.semaphore({ resources: 2, staleClientTimeout: 5000, autoRefresh: false });
        const refreshing = fixture.semaphore(
          { resources: 2, staleClientTimeout: 600, onLockLost: (token, reason) => lost.push([token, reason]) },
          sem.name,
        );
        const keys = gemKeys(sem.name);
        expect(await sem.lock(0)).toBe('0');
        expect(await refreshing.lock(0)).toBe('1');

        await runRuby('semaphore(ARGV[0], resources: 2).delete!', { args: [sem.name] });
        expect(await fixture.redis.exists([keys.available, keys.grabbed, keys.exists, keys.version])).toBe(0);

        expect(await sem.unlock('0')).toBe(false);
        expect(await fixture.redis.exists(keys.available)).toBe(0);
        expect(await fixture.redis.exists(keys.grabbed)).toBe(0);

        // The refreshing holder notices within a refresh period (200 ms) and pushes nothing either.
        await until(() => lost.length > 0, 5000, 'onLockLost after delete!');
        expect(lost).toEqual([['1', 'reclaimed']]);
        expect(await refreshing.unlock('1')).toBe(false);
        expect(await fixture.redis.exists(keys.available)).toBe(0);

        // Re-created, the pool is whole again.
        await sem.existsOrCreate();
        await expectExactPool(sem.name, 2, { idle: true });
      });

      test.each(['unlock', 'refresh'] as const)(
        "after the gem reclaims a Node holder's token and a Ruby client takes it, the Node holder's %s leaves the Ruby holder untouched",
        async (operation) => {
          const sem = fixture.semaphore({ resources: 1, staleClientTimeout: 5000, autoRefresh: false });
          const keys = gemKeys(sem.name);
          expect(await sem.lock(0)).toBe('0');

          // The gem's lock runs release_stale_locks! first (stale_client_timeout set), then BLPOPs the token.
          const rubyHolder = new RubyProcess(
            `
          s = semaphore(ARGV[0], resources: 1, stale_client_timeout: 0.2)
          sleep 0.3
          puts JSON.generate(locked: s.lock(5))
          $stdin.gets
          puts JSON.generate(unlocked: s.unlock)
          `,
            { args: [sem.name] },
          );
          expect(JSON.parse(await rubyHolder.waitForLine(/"locked"/))).toEqual({ locked: '0' });
          const rubyStamp = await fixture.redis.hGet(keys.grabbed, '0');
          expect(rubyStamp).toMatch(RUBY_STAMP);

          if (operation === 'unlock') {
            expect(await sem.unlock('0')).toBe(false);
          } else {
            expect(await sem.refresh('0')).toBe(false);
          }
          expect(await fixture.redis.hGetAll(keys.grabbed)).toEqual({ '0': rubyStamp });
          expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual([]);
          await expectExactPool(sem.name, 1);

          // Ruby's unlock gives it back: LPUSH's reply, the new length of AVAILABLE.
          rubyHolder.send('go');
          expect(parseLines(await rubyHolder.finished())).toEqual([{ locked: '0' }, { unlocked: 1 }]);
          expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['0']);
          await expectExactPool(sem.name, 1, { idle: true });
        },
      );
    });

    test('a Ruby process whose stale_client_timeout is well above the refresh interval never reclaims a live, auto-refreshing Node holder', async () => {
      const lost: Array<[string, LockLostReason]> = [];
      // Refreshes every ~333 ms; the gem calls its stamp stale only after 2 s.
      const holder = fixture.semaphore({
        resources: 1,
        staleClientTimeout: 1000,
        onLockLost: (token, reason) => lost.push([token, reason]),
      });
      const keys = gemKeys(holder.name);
      expect(await holder.lock(0)).toBe('0');

      // About three times the holder's staleClientTimeout of reclaim attempts, each also a lock(0).
      const out = await runRuby(
        `
      name = ARGV[0]
      s = semaphore(name, resources: 1, stale_client_timeout: 2.0)
      deadline = monotonic + 3.2
      calls = 0
      taken = []
      while monotonic < deadline
        s.release_stale_locks!
        token = s.lock(0)
        calls += 1
        if token
          taken << token
          s.unlock
        end
        sleep 0.1
      end
      puts JSON.generate(calls: calls, taken: taken)
      `,
        { args: [holder.name], timeoutMs: 30_000 },
      );
      const [report] = parseLines<{ calls: number; taken: string[] }>(out);
      expect(report?.taken).toEqual([]);
      expect(report?.calls).toBeGreaterThan(10);

      expect(lost).toEqual([]);
      expect(await fixture.redis.hGet(keys.grabbed, '0')).toMatch(nodeGrant(1000));
      expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual([]);
      expect(await holder.refresh('0')).toBe(true);
      expect(await holder.unlock('0')).toBe(1);
      await expectExactPool(holder.name, 1, { idle: true });
    });

    describe('either side creates, the other uses', () => {
      test('a semaphore the gem created is used by Node', async () => {
        const name = uniqueName('interop');
        const keys = gemKeys(name);
        await runRuby('semaphore(ARGV[0], resources: 2).exists_or_create!', { args: [name] });
        expect(await fixture.redis.get(keys.exists)).toBe('1');
        expect(await fixture.redis.get(keys.version)).toBe('1');
        expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['0', '1']);

        const sem = fixture.semaphore({ resources: 2 }, name);
        await sem.existsOrCreate(); // exists already: changes nothing
        expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['0', '1']);
        const first = await sem.lock(0);
        const second = await sem.lock(0);
        expect([first, second].sort()).toEqual(['0', '1']);
        expect(await sem.lock(0)).toBeNull();
        await expectExactPool(name, 2);
        expect(await sem.unlock(first!)).toBe(1);
        expect(await sem.unlock(second!)).toBe(2);
        await expectExactPool(name, 2, { idle: true });
      });

      test("a semaphore Node created is used by the gem's lock and unlock, next to a Node holder", async () => {
        const sem = fixture.semaphore({ resources: 2 });
        const keys = gemKeys(sem.name);
        await sem.existsOrCreate();
        expect(await fixture.redis.get(keys.exists)).toBe('1');
        expect(await fixture.redis.get(keys.version)).toBe('1');
        expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['0', '1']);
        expect(await sem.lock(0)).toBe('0');

        const out = await runRuby(
          `
        name = ARGV[0]
        s = semaphore(name, resources: 2, stale_client_timeout: 60)
        token = s.lock(2)
        held = REDIS.hget("SEMAPHORE:#{name}:GRABBED", token)
        again = s.lock(0)
        locked = s.locked?
        puts JSON.generate(token: token, held: held, again: again, locked: locked, unlocked: s.unlock)
        `,
          { args: [sem.name] },
        );
        const [report] = parseLines<Record<string, unknown>>(out);
        expect(report).toEqual({
          token: '1',
          held: expect.stringMatching(RUBY_STAMP),
          again: false,
          locked: true,
          unlocked: 1,
        });
        // The Ruby holder neither disturbed the Node holder nor was disturbed by Node's refreshes.
        expect(await fixture.redis.hGet(keys.grabbed, '0')).toMatch(nodeGrant(30000));
        expect(await sem.unlock('0')).toBe(2);
        await expectExactPool(sem.name, 2, { idle: true });
      });

      test('existsOrCreate puts back a deleted VERSION key ("1") and duplicates no token', async () => {
        const sem = fixture.semaphore({ resources: 2 });
        const keys = gemKeys(sem.name);
        await sem.existsOrCreate();
        expect(await sem.lock(0)).toBe('0');
        await fixture.redis.del(keys.version);
        await sem.existsOrCreate();
        expect(await fixture.redis.get(keys.version)).toBe('1');
        expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['1']);
        await expectExactPool(sem.name, 2);
        expect(await sem.unlock('0')).toBe(2);
        await expectExactPool(sem.name, 2, { idle: true });
      });
    });

    describe('jobs: Node signals at the tail, the gem at the head', () => {
      test('a Ruby consumer takes Node jobs in signal order; a job the gem signals goes to the front', async () => {
        const producer = fixture.semaphore({ resources: 0 });
        const keys = gemKeys(producer.name);
        for (const job of ['a', 'b', 'c']) await producer.signal(job);
        expect(await fixture.redis.lRange(keys.available, 0, -1)).toEqual(['a', 'b', 'c']);
        const out = await runRuby(
          `
        s = semaphore(ARGV[0], resources: 1)
        first = s.lock(1)
        s.signal('ruby-job')
        rest = [s.lock(1), s.lock(1), s.lock(1), s.lock(0)]
        puts JSON.generate([first, *rest])
        `,
          { args: [producer.name] },
        );
        // The gem's lock (exists_or_create!) sees the Node queue as created: it adds no token "0".
        expect(parseLines<Array<string | false>>(out)).toEqual([['a', 'ruby-job', 'b', 'c', false]]);
        // Node consumers see the same order: a Ruby signal (LPUSH) ahead of Node jobs (RPUSH).
        for (const job of ['d', 'e']) await producer.signal(job);
        await runRuby(`semaphore(ARGV[0], resources: 1).signal('ruby-2')`, { args: [producer.name] });
        const taken = [];
        for (let i = 0; i < 4; i++) taken.push(await producer.wait(0));
        expect(taken).toEqual(['ruby-2', 'd', 'e', null]);
      });
    });

    describe('weighted grants (the permits option)', () => {
      /** The gem's view of `name`: available_count, its holders (GRABBED), and locked?(token) for `tokens`. */
      async function gemView(name: string, resources: number, tokens: readonly string[]) {
        const out = await runRuby(
          `
        name, resources, tokens = ARGV[0], ARGV[1].to_i, ARGV[2].split(',')
        s = semaphore(name, resources: resources)
        puts JSON.generate(available: s.available_count, holders: REDIS.hkeys("SEMAPHORE:#{name}:GRABBED").sort,
                           locked: tokens.map { |t| s.locked?(t) })
        `,
          { args: [name, resources, tokens.join(',')] },
        );
        return parseLines<{ available: number; holders: string[]; locked: boolean[] }>(out)[0]!;
      }

      /** A collection's tokens in Redis (PENDING, COLLECTED), which neither AVAILABLE nor GRABBED shows. */
      async function collecting(name: string): Promise<string[]> {
        const census = await takeCensus(fixture.redis, name);
        return [...census.collection.pending, ...census.collection.collected];
      }

      test('a grant of 3 is 3 holders to the gem: its lock takes only the others, and its reclaim ends the grant', async () => {
        const sem = fixture.semaphore({ resources: 5, staleClientTimeout: 5000, autoRefresh: false });
        const lease = await sem.acquire({ permits: 3 });
        const tokens = [...lease.tokens].sort();
        expect(tokens).toHaveLength(3);
        const grabbed = await fixture.redis.hGetAll(gemKeys(sem.name).grabbed);
        for (const token of tokens) expect(grabbed[token]).toMatch(nodeGrant(5000));
        expect(await gemView(sem.name, 5, tokens)).toEqual({
          available: 2,
          holders: tokens,
          locked: [true, true, true],
        });

        // The gem takes the two others and no more, and gives them back.
        const out = await runRuby(
          `
        s = semaphore(ARGV[0], resources: 5)
        taken = [s.lock(0), s.lock(0), s.lock(0)]
        puts JSON.generate(taken: taken, available: s.available_count)
        s.unlock; s.unlock
        puts JSON.generate(available: s.available_count)
        `,
          { args: [sem.name] },
        );
        const [during, after] = parseLines<{ taken?: Array<string | false>; available: number }>(out);
        expect(during!.taken!.filter((t) => t !== false)).toHaveLength(2);
        expect(during!.taken![2]).toBe(false);
        expect(during!.available).toBe(0);
        expect(after!.available).toBe(2);

        // The gem, judging by its own stale timeout (0.2 s), reclaims all 3: the grant is over for
        // Node, whose release then pushes nothing.
        await runRuby(
          `
        s = semaphore(ARGV[0], resources: 5, stale_client_timeout: 0.2)
        sleep 0.3
        s.release_stale_locks!
        `,
          { args: [sem.name] },
        );
        expect(await fixture.redis.lLen(gemKeys(sem.name).available)).toBe(5);
        expect(await lease.release()).toBe(false);
        expect(await fixture.redis.lLen(gemKeys(sem.name).available)).toBe(5);
        await expectExactPool(sem.name, 5, { idle: true });
      });

      test.each([
        ['while Node holders release too', true],
        ['alone (no Node release after it)', false],
      ])(
        'a gem signal during a weighted collection, %s: its token completes the grant, none lost or duplicated',
        async (_, nodeReleases) => {
          const name = uniqueName('interop');
          const holder = fixture.semaphore({ resources: 3 }, name);
          // Short slices: a collector looks at AVAILABLE again at least once a slice.
          const waiter = fixture.semaphore({ resources: 3, waitSlice: 1000 }, name);
          const held = [await holder.lock(0)];
          if (nodeReleases) held.push(await holder.lock(0));
          // The gem holds the rest (its process exits holding them, as a crashed worker would).
          const gemTokens = parseLines<string>(
            await runRuby(
              `
            s = semaphore(ARGV[0], resources: 3)
            while (t = s.lock(0)) do puts JSON.generate(t) end
            `,
              { args: [name] },
            ),
          );
          expect(gemTokens).toHaveLength(nodeReleases ? 1 : 2);
          const started = performance.now();
          let grantedAt = 0;
          const waiting = waiter.acquire({ timeout: 15_000, permits: 3 }).then((lease) => {
            grantedAt = performance.now();
            return lease;
          });
          await until(async () => (await waiter.waiting()) > 0, 5000, 'the weighted waiter to register');
          await holder.unlock(held.shift()!);
          await until(async () => (await collecting(name)).length === 1, 5000, 'the waiter to collect its first token');
          // The gem gives its tokens back as its unlock does (HDEL + LPUSH AVAILABLE), knowing nothing of the collection.
          await runRuby(`s = semaphore(ARGV[0], resources: 3); ARGV[1].split(',').each { |t| s.signal(t) }`, {
            args: [name, gemTokens.join(',')],
          });
          if (nodeReleases) await holder.unlock(held.shift()!);
          const lease = await waiting;
          console.log(
            `gem signal during a weighted collection (${nodeReleases ? 'with' : 'without'} a Node release after it): ` +
              `the waiter for 3 was granted ${Math.round(grantedAt - started)} ms after it called`,
          );
          expect([...lease.tokens].sort()).toEqual(['0', '1', '2']);
          expect(await gemView(name, 3, lease.tokens)).toEqual({
            available: 0,
            holders: ['0', '1', '2'],
            locked: [true, true, true],
          });
          expect(await collecting(name)).toEqual([]);
          await expectExactPool(name, 3);
          expect(await lease.release()).toBe(true);
          await expectExactPool(name, 3, { idle: true });
        },
      );
    });

    test('mixed load: 2 Ruby worker processes and 4 concurrent Node callers share 3 tokens for 8 s; none duplicated or lost', async () => {
      const RESOURCES = 3;
      const DURATION = 8000;
      const name = uniqueName('interop');
      const keys = gemKeys(name);
      // Counts holders inside their critical section on both sides (INCR after the grant, DECR before the release).
      const occupancyKey = `interop-occupancy:${name}`;
      const lostEvents: Array<[string, LockLostReason]> = [];
      const sem = new Semaphore(name, {
        redis: fixture.redis,
        resources: RESOURCES,
        staleClientTimeout: 3000,
        onLockLost: (token, reason) => lostEvents.push([token, reason]),
      });
      try {
        await sem.existsOrCreate();
        // The gem's stale timeout (6 s) is far above Node's refresh interval (1 s); Node's (3 s) judges
        // Ruby holders, which hold for at most 25 ms.
        const workers = [0, 1].map(() =>
          startRubyWorker({
            name,
            resources: RESOURCES,
            staleClientTimeout: 6,
            durationMs: DURATION,
            maxGrants: 100_000,
            holdMs: [5, 25],
            lockTimeout: 1,
            occupancyKey,
          }),
        );
        await Promise.all(workers.map((worker) => worker.process.waitForLine(/"started"/)));

        const deadline = Date.now() + DURATION;
        const node = { grants: 0, timeouts: 0, failedUnlocks: 0, maxOccupancy: 0 };
        const caller = async () => {
          while (Date.now() < deadline) {
            const token = await sem.lock(2000);
            if (token === null) {
              node.timeouts++;
              continue;
            }
            node.grants++;
            node.maxOccupancy = Math.max(node.maxOccupancy, await fixture.redis.incr(occupancyKey));
            await sleep(5 + Math.random() * 20);
            await fixture.redis.decr(occupancyKey);
            if ((await sem.unlock(token)) === false) node.failedUnlocks++;
          }
        };
        await Promise.all([caller(), caller(), caller(), caller()]);
        const reports = await Promise.all(workers.map((worker) => worker.report()));

        for (const report of reports) {
          expect(report.grants).toBeGreaterThan(0);
          expect(report.lost).toBe(0);
          expect(report.maxOccupancy).toBeLessThanOrEqual(RESOURCES);
          expect(Object.keys(report.tokens).every((token) => initialTokens(RESOURCES).includes(token))).toBe(true);
        }
        expect(node.grants).toBeGreaterThan(0);
        expect(node.failedUnlocks).toBe(0);
        expect(node.maxOccupancy).toBeLessThanOrEqual(RESOURCES);
        expect(lostEvents).toEqual([]);
        expect(await fixture.redis.get(occupancyKey)).toBe('0');
        console.log(
          `interop load: Node ${node.grants} grants (${node.timeouts} timeouts), ` +
            reports.map((r, i) => `Ruby worker ${i + 1} ${r.grants} grants (${r.timeouts} timeouts)`).join(', '),
        );
      } finally {
        await sem.close();
        await fixture.redis.del(occupancyKey);
      }
      const census = await expectExactPool(name, RESOURCES, { idle: true });
      expect(census.waiting.filter((entry) => !entry.registration.startsWith('~'))).toEqual([]);
      expect((await fixture.redis.lRange(keys.available, 0, -1)).sort()).toEqual(initialTokens(RESOURCES));
    }, 60_000);
  },
);
