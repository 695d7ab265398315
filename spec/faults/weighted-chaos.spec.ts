/**
 * SIGKILL chaos with weighted grants: child processes (spec/support/crash-worker.js, mode
 * 'weighted', on the built library) loop acquire({ permits: 1..3 }) / hold / release on a semaphore
 * of 4 tokens, while the test SIGKILLs random children at random moments (holding, waiting or
 * collecting) and starts new ones. No mocks: a real redis-server, real processes, real signals.
 *   - 0 over-admission by weight: each child, once granted, records its weight in a hash and reads,
 *     in the same script, the weight every live holder records (the test deletes a killed child's
 *     entry once the process is gone, long before its lease lets its tokens go): never above 4.
 *     The same script checks that GRABBED names the child's grant for each of its tokens.
 *   - Every token back: once the children stop and the dead holders' leases lapse, reclaim and
 *     reap leave the census exact and idle: all 4 tokens free, nothing registered, no collection.
 */
import { Semaphore } from '../../lib';
import { useCrashWorkers, type Child, type Message } from '../support/crash-workers';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { connectClient, sleep, uniqueName, until } from '../support/redis';
import { startRedisServer } from '../support/redis-server';

const RESOURCES = 4;
const MAX_PERMITS = 3;
const CHILDREN = 5;
/** How long children are killed and replaced (bounded; replacements start slowly on a loaded machine). */
const CHAOS_MS = 12_000;
/** Short enough that dead holders and dead collectors are noticed within the test. */
const OPTIONS = { resources: RESOURCES, staleClientTimeout: 1000, waitSlice: 300 } as const;

const workers = useCrashWorkers();

interface Figures {
  children: number;
  grantsByWeight: number[];
  timeouts: number;
  kills: number;
  killedHolding: number;
  killedWaiting: number;
  maxWeight: number;
  lost: number;
  grantsAfterKills: number;
  recoveryMs: number;
  runMs: number;
}

test('children killed at random while holding, waiting or collecting: never over 4 by weight, every token back', async () => {
  const server = await startRedisServer();
  const redis = await connectClient(server.url);
  const name = uniqueName('weighted-chaos');
  const heldKey = `${name}:held-by-children`;
  const watcher = new Semaphore(name, { redis, ...OPTIONS });
  try {
    await watcher.existsOrCreate();
    const figures: Figures = {
      children: 0,
      grantsByWeight: Array.from({ length: MAX_PERMITS + 1 }, () => 0),
      timeouts: 0,
      kills: 0,
      killedHolding: 0,
      killedWaiting: 0,
      maxWeight: 0,
      lost: 0,
      grantsAfterKills: 0,
      recoveryMs: 0,
      runMs: 0,
    };
    const problems: string[] = [];
    /** What each live child is doing: holding (granted, not yet released) or waiting. */
    const live = new Map<string, { child: Child; holding: boolean; acquired: number }>();
    const spawn = () => {
      const id = `c${++figures.children}`;
      const child = workers.spawn({
        mode: 'weighted',
        url: server.url,
        name,
        options: OPTIONS,
        holdMs: [5, 60],
        lockTimeout: 2000,
        maxPermits: MAX_PERMITS,
        heldKey,
        child: id,
      });
      const state = { child, holding: false, acquired: 0 };
      child.onMessage((message: Message) => {
        const { event, permits, total, recorded, tokens } = message as Record<string, number | string>;
        if ('error' in message) problems.push(`${id} failed: ${String(message['error'])}`);
        if (event === 'acquired') {
          state.holding = true;
          state.acquired++;
          figures.grantsByWeight[Number(permits)]!++;
          figures.maxWeight = Math.max(figures.maxWeight, Number(total));
          if (Number(total) > RESOURCES) problems.push(`${id} granted ${permits}: ${total} held by weight`);
          if (tokens !== permits || recorded !== permits) {
            problems.push(`${id} granted ${permits}: ${tokens} tokens, ${recorded} recorded as its grant's`);
          }
        } else if (event === 'released' || event === 'lost') {
          state.holding = false;
          if (event === 'lost') figures.lost++;
        } else if (event === 'timeout') figures.timeouts++;
      });
      live.set(id, state);
      return child;
    };

    for (let i = 0; i < CHILDREN; i++) spawn();
    await Promise.all(
      [...live.values()].map(({ child }) => child.waitFor((m) => m['ready'] === true, 30_000, 'ready')),
    );

    // Kill a random child every 150-450 ms, every other kill one that holds; replace it at once.
    // (A dead holder's tokens stay held for its lease, a dead collector's for its registration: the
    // others wait meanwhile, so grants are far fewer than without kills.)
    const started = Date.now();
    for (let i = 0; Date.now() - started < CHAOS_MS; i++) {
      await sleep(150 + Math.random() * 300);
      const ids = [...live.keys()].filter((id) => live.get(id)!.child.messages.some((m) => m['ready'] === true));
      const holders = ids.filter((id) => live.get(id)!.holding);
      const pool = i % 2 === 0 && holders.length > 0 ? holders : ids;
      const victim = pool[Math.floor(Math.random() * pool.length)];
      if (victim === undefined) continue;
      const state = live.get(victim)!;
      live.delete(victim);
      await state.child.kill();
      // Gone: whatever it held, it no longer uses (its tokens stay held in Redis until its lease lapses).
      await redis.hDel(heldKey, victim);
      figures.kills++;
      if (state.holding) figures.killedHolding++;
      else figures.killedWaiting++;
      spawn();
    }
    // After the last kill the survivors go on: the dead's tokens and collections come back to them
    // (reclaimed once stale, reaped once their registrations lapse) without anyone stopping.
    const grants = () => figures.grantsByWeight.reduce((a, b) => a + b, 0);
    const grantsAtLastKill = grants();
    await until(() => grants() >= grantsAtLastKill + 5, 15_000, 'grants after the last kill').catch(() => undefined);
    figures.grantsAfterKills = grants() - grantsAtLastKill;

    // The survivors stop (a child that does not within 10 s is killed), then every token comes back.
    for (const { child } of live.values()) child.send('stop');
    for (const [id, { child }] of live) {
      const stopped = await child
        .waitFor((m) => m['stopped'] === true, 10_000, 'stop')
        .then(
          () => true,
          () => false,
        );
      if (!stopped) {
        await child.kill();
        await redis.hDel(heldKey, id);
        figures.kills++;
      }
      await child.exited;
    }
    figures.runMs = Date.now() - started;
    const recovering = Date.now();
    let last = await takeCensus(redis, name);
    await until(
      async () => {
        await watcher.releaseStaleLocks();
        last = await takeCensus(redis, name);
        return censusProblems(last, RESOURCES, { idle: true }).length === 0;
      },
      20_000,
      'every token free and nothing registered',
    ).catch(() => undefined);
    figures.recoveryMs = Date.now() - recovering;
    console.log(`weighted chaos: ${JSON.stringify(figures)}`);
    if (censusProblems(last, RESOURCES, { idle: true }).length > 0) console.log(describeCensus(last));

    expect(problems).toEqual([]);
    expect(censusProblems(last, RESOURCES, { idle: true })).toEqual([]);
    expect(last.available.sort()).toEqual(['0', '1', '2', '3']);
    expect(last.collection).toEqual({ registration: null, pending: [], collected: [] });
    expect(await redis.hLen(heldKey)).toBe(0);
    expect(figures.maxWeight).toBeLessThanOrEqual(RESOURCES);
    // The run did what it claims: grants of every weight, kills of holders and of waiters, and
    // grants throughout (the kills never stopped the others for good).
    for (let k = 1; k <= MAX_PERMITS; k++) expect(figures.grantsByWeight[k]).toBeGreaterThan(0);
    expect(figures.kills).toBeGreaterThanOrEqual(6);
    expect(figures.killedHolding).toBeGreaterThan(0);
    expect(figures.killedWaiting).toBeGreaterThan(0);
    expect(grantsAtLastKill).toBeGreaterThan(figures.kills);
    expect(figures.grantsAfterKills).toBeGreaterThanOrEqual(5);
    expect(figures.lost).toBe(0);
  } finally {
    await workers.killAll();
    await watcher.close();
    await redis.quit().catch(() => undefined);
    await server.stop();
  }
}, 90_000);
