/**
 * Fair across weights (issue 32): waiters are served in arrival order whatever their weight. A
 * waiter for k permits is not overtaken by waiters for fewer that arrived after it, and waiters that
 * arrived before it are not held back by it. Arrival is when a waiter is blocked in Redis (DESIGN
 * "First come, first served"); grant order is fence order. The figures go to the console.
 */
import { createClient } from 'redis';
import { Semaphore, type Lease } from '../../lib';
import { censusProblems, describeCensus, takeCensus } from '../support/census';
import { useFixture } from '../support/fixture';
import { blockedClients, redisUrl, sleep, uniqueName, until } from '../support/redis';

jest.setTimeout(60_000);

const fixture = useFixture();

/** One waiter of a queue: its label, its weight, and its lease once served. */
interface Queued {
  readonly label: string;
  readonly permits: number;
  lease?: Lease;
}

/** Labels of the served waiters in grant order (fence order: a grant's fence is its number). */
const grantOrder = (waiters: Queued[]) =>
  waiters
    .filter((w) => w.lease !== undefined)
    .sort((a, b) => a.lease!.fence - b.lease!.fence)
    .map((w) => w.label);

/**
 * Queues `waiters` one after another, each on an instance of its own (as a process of its own),
 * each once the one before is blocked in Redis, so that arrival order is known.
 */
async function queue(name: string, resources: number, waiters: Queued[]): Promise<Semaphore[]> {
  const instances: Semaphore[] = [];
  const base = await blockedClients(fixture.redis);
  for (const [i, waiter] of waiters.entries()) {
    const sem = fixture.semaphore({ resources }, name);
    instances.push(sem);
    void sem.acquire({ timeout: 30_000, permits: waiter.permits }).then((lease) => (waiter.lease = lease));
    await until(async () => (await blockedClients(fixture.redis)) >= base + i + 1, 5000, `${waiter.label} to block`);
  }
  return instances;
}

const servedCount = (waiters: Queued[]) => waiters.filter((w) => w.lease !== undefined).length;

/** Every token free and nobody registered, once idle advance registrations have ended (within 200–300 ms). */
async function expectIdle(name: string, resources: number): Promise<void> {
  const idle = async () => censusProblems(await takeCensus(fixture.redis, name), resources, { idle: true });
  await until(async () => (await idle()).length === 0, 3000, 'the semaphore to be idle').catch(() => undefined);
  const census = await takeCensus(fixture.redis, name);
  expect({ problems: censusProblems(census, resources, { idle: true }), census: describeCensus(census) }).toMatchObject(
    { problems: [] },
  );
}

describe('a queue of mixed weights is served in arrival order', () => {
  test('weight 1 before and after a weight-3 waiter, tokens freed one at a time', async () => {
    const name = uniqueName('wfair');
    const holder = fixture.semaphore({ resources: 4 }, name);
    const held = [await holder.acquire(), await holder.acquire(), await holder.acquire(), await holder.acquire()];
    const waiters: Queued[] = ['a1', 'b1', 'W3', 'c1', 'd1'].map((label) => ({
      label,
      permits: label === 'W3' ? 3 : 1,
    }));
    const [a1, b1, w3, c1, d1] = waiters as [Queued, Queued, Queued, Queued, Queued];
    await queue(name, 4, waiters);
    const freeOne = async (lease: Lease, then: number, what: string) => {
      await lease.release();
      await until(() => servedCount(waiters) >= then, 10_000, what);
      await sleep(50); // nobody else gets in meanwhile
      expect(servedCount(waiters)).toBe(then);
    };
    await freeOne(held[0]!, 1, 'a1');
    await freeOne(held[1]!, 2, 'b1');
    await held[2]!.release(); // W3 has 1 of 3: c1 and d1 wait behind it
    await sleep(100);
    await held[3]!.release(); // 2 of 3
    await sleep(100);
    expect(servedCount(waiters)).toBe(2);
    await freeOne(a1.lease!, 3, 'W3');
    await freeOne(b1.lease!, 4, 'c1');
    await freeOne(w3.lease!, 5, 'd1');
    const order = grantOrder(waiters);
    console.log(`tokens freed one at a time to [a1, b1, W3, c1, d1]: granted ${order.join(', ')}`);
    expect(order).toEqual(['a1', 'b1', 'W3', 'c1', 'd1']);
    await c1.lease!.release();
    await d1.lease!.release();
    await expectIdle(name, 4);
  });

  /**
   * Frees tokens by releasing the served waiters' grants, earliest first, each once the queue has
   * settled (no grant for 150 ms); resolves when every waiter has been served and released.
   */
  async function serveAll(waiters: Queued[], release: () => Promise<unknown>): Promise<void> {
    const released = new Set<Queued>();
    let next: (() => Promise<unknown>) | undefined = release;
    while (next) {
      await next();
      let seen = -1;
      while (servedCount(waiters) !== seen) {
        seen = servedCount(waiters);
        await sleep(150);
      }
      const holder = waiters
        .filter((w) => w.lease !== undefined && !released.has(w))
        .sort((a, b) => a.lease!.fence - b.lease!.fence)[0];
      if (holder) released.add(holder);
      next = holder && (() => holder.lease!.release());
    }
  }

  // A script that frees several tokens at once (the release of a weighted grant) hands them to the
  // waiters one at a time, each after the claim before it ran (DESIGN "Weighted grants"): pushed at
  // once, Redis would serve the next waiters one each before any claim ran, and a weighted waiter
  // among them could not take the rest first.
  test.each([
    ['A3 B2 C3 D2 E1', 4],
    ['A2 B3 C2 D3 E2 F1', 5],
    ['A3 B1 C3 D2 E1 F2', 4],
  ])('%s on %d permits, grants freed whole (several tokens at once)', async (labels, resources) => {
    const name = uniqueName('wfair');
    const holder = fixture.semaphore({ resources }, name);
    const held = await holder.acquire({ permits: resources });
    const waiters: Queued[] = labels.split(' ').map((label) => ({ label, permits: Number(label.slice(1)) }));
    await queue(name, resources, waiters);
    await serveAll(waiters, () => held.release());
    const order = grantOrder(waiters);
    console.log(`queue [${labels}] on ${resources} permits, frees of whole grants: granted ${order.join(', ')}`);
    expect(order).toEqual(waiters.map((w) => w.label));
    await expectIdle(name, resources);
  });
});

/** A grant to a looping weight-1 caller: when its lock() started and when it was granted (performance.now()), its fence. */
interface Grant {
  readonly started: number;
  readonly granted: number;
  readonly fence: number;
}

const percentile = (values: number[], p: number) =>
  values.length === 0
    ? 0
    : [...values].sort((a, b) => a - b)[Math.min(values.length - 1, Math.floor(p * values.length))]!;

describe('a weight-3 waiter among looping weight-1 callers', () => {
  test('is served within the FIFO bound, and holds back no weight-1 waiter that arrived before it', async () => {
    const name = uniqueName('wfair');
    const resources = 4;
    // 16 callers on 3 instances (3 processes, as it were) lock, hold 20–60 ms, unlock, again.
    const instances = Array.from({ length: 3 }, () => fixture.semaphore({ resources }, name));
    const grants: Grant[] = [];
    let running = true;
    const loops = Array.from({ length: 16 }, async (_, i) => {
      const sem = instances[i % instances.length]!;
      while (running) {
        const started = performance.now();
        const lease = await sem.acquire({ timeout: 20_000 });
        grants.push({ started, granted: performance.now(), fence: lease.fence });
        await sleep(20 + Math.random() * 40);
        await lease.release();
      }
    });
    // The weight-3 waiter on a client of its own, named, so CLIENT LIST shows when it is blocked.
    const clientName = `wfair-w3-${Math.random().toString(36).slice(2, 10)}`;
    const w3Client = createClient({ url: redisUrl(), name: clientName });
    w3Client.on('error', () => undefined);
    await w3Client.connect();
    const w3 = new Semaphore(name, { redis: w3Client, resources });
    const blocked = async () =>
      String(await fixture.redis.sendCommand(['CLIENT', 'LIST']))
        .split('\n')
        .some((line) => line.includes(`name=${clientName} `) && /cmd=blmove/.test(line));
    const rounds: Array<{ waitMs: number; overtakes: number; before: number; heldBack: number; between: number }> = [];
    try {
      for (let round = 0; round < 5; round++) {
        await sleep(300);
        const called = performance.now();
        const granted = w3.acquire({ timeout: 20_000, permits: 3 }).then((lease) => ({ lease, at: performance.now() }));
        let settled = false;
        void granted.then(() => (settled = true));
        // Arrival: W3 blocked in Redis (or granted before the poll saw it blocked).
        while (!settled && !(await blocked())) await sleep(2);
        const arrived = performance.now();
        const { lease, at } = await granted;
        const fence = lease.fence;
        // Weight-1 grants made before W3's to callers that called lock() once W3 was blocked: overtakes.
        const overtakes = grants.filter((g) => g.started > arrived && g.fence < fence).length;
        // Callers waiting well before W3 called (100 ms: their BLMOVE was surely sent) must go first.
        const before = grants.filter((g) => g.started < called - 100 && g.granted > called);
        const heldBack = before.filter((g) => g.fence > fence).length;
        const between = grants.filter((g) => g.started >= called && g.started <= arrived && g.fence < fence).length;
        rounds.push({ waitMs: Math.round(at - called), overtakes, before: before.length, heldBack, between });
        await sleep(20 + Math.random() * 40);
        await lease.release();
      }
    } finally {
      running = false;
      await Promise.all(loops);
      await w3.close();
      await w3Client.disconnect().catch(() => undefined);
    }
    const waits = grants.map((g) => g.granted - g.started);
    console.log(
      `weight-3 waiter among 16 weight-1 callers on 4 permits, 5 rounds: ` +
        rounds
          .map(
            (r) =>
              `W3 waited ${r.waitMs} ms, overtaken ${r.overtakes}×, ${r.between} granted while it arrived, ${r.heldBack} of ${r.before} earlier waiters after it`,
          )
          .join('; ') +
        `. Weight-1 waits over ${grants.length} grants: median ${Math.round(percentile(waits, 0.5))} ms, p99 ${Math.round(percentile(waits, 0.99))} ms, max ${Math.round(Math.max(...waits))} ms`,
    );
    // The FIFO bound (DESIGN "Weighted grants"): once W3 collects, nobody behind it is served. Each
    // release Redis runs in the instant between W3's BLMOVE returning and its claim (the collection's
    // start) frees a token the next blocked waiter takes, one per release of that instant: at most one
    // per other holder, resources - 1 a round. (A quiet clean-clone run counted 2 in one round.)
    for (const r of rounds) expect(r.heldBack).toBe(0);
    for (const r of rounds) expect(r.overtakes).toBeLessThanOrEqual(resources - 1);
    // Most rounds have none: the instant is short.
    expect(rounds.filter((r) => r.overtakes > 0).length).toBeLessThanOrEqual(2);
    // The check of earlier waiters is not empty: some waited when W3 came.
    expect(rounds.reduce((sum, r) => sum + r.before, 0)).toBeGreaterThan(0);
    expect(Math.max(...rounds.map((r) => r.waitMs))).toBeLessThan(10_000);
    await expectIdle(name, resources);
  });
});
