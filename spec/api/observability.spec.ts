import { spawnSync } from 'node:child_process';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { join } from 'node:path';
import { CHANNELS, createLocks, Semaphore, type SemaphoreEvents } from '../../lib';
import { freePort } from '../support/redis-server';
import { useFixture } from '../support/fixture';
import { redisUrl, sleep, uniqueName, until } from '../support/redis';

/** Events, diagnostics channels, stats() and NODE_DEBUG. */
const fixture = useFixture();

describe('events', () => {
  test('acquired, released, lost and reclaimed carry token, fence and timings', async () => {
    const sem = fixture.semaphore({ staleClientTimeout: 200, autoRefresh: false });
    const seen: Array<[string, unknown]> = [];
    for (const event of ['acquired', 'released', 'lost', 'reclaimed'] as const) {
      sem.on(event, (payload: SemaphoreEvents[typeof event][0]) => seen.push([event, payload]));
    }
    await sem.lock(async () => sleep(20));
    const token = await sem.lock();
    await until(() => seen.some(([event]) => event === 'lost'), 5000, 'the lease to expire');
    await sleep(50);
    expect(await sem.releaseStaleLocks()).toBe(1);
    expect(await sem.unlock(token!)).toBe(false); // lost: no 'released'
    expect(seen.map(([event]) => event)).toEqual(['acquired', 'released', 'acquired', 'lost', 'reclaimed']);
    const [first, released, , lost, reclaimed] = seen.map(([, payload]) => payload as Record<string, unknown>);
    expect(first).toEqual({ token: '0', fence: expect.any(Number), waitedMs: expect.any(Number) });
    expect(released).toMatchObject({ token: '0', fence: first!['fence'] });
    expect(released!['heldMs']).toBeGreaterThanOrEqual(15);
    expect(lost).toMatchObject({ token: '0', reason: 'expired' });
    expect(reclaimed).toEqual({ count: 1 });
  });

  test('a listener that throws cannot strand a token: the call completes and a warning is emitted', async () => {
    const emitWarning = jest.spyOn(process, 'emitWarning');
    try {
      const sem = fixture.semaphore();
      sem.on('acquired', () => {
        throw new Error('listener bug');
      });
      expect(await sem.lock()).toBe('0');
      expect(await sem.unlock()).toBe(1);
      expect(
        emitWarning.mock.calls.some(([message]) => /"acquired" listener .* threw: listener bug/.test(String(message))),
      ).toBe(true);
    } finally {
      emitWarning.mockRestore();
    }
  });

  test('a failing watchdog run is an error event when someone listens', async () => {
    const sem = new Semaphore('unreachable', {
      url: `redis://127.0.0.1:${await freePort()}`,
      staleClientTimeout: 1000,
    });
    const errors: Error[] = [];
    sem.on('error', (error) => errors.push(error));
    const watchdog = sem.startWatchdog(20);
    try {
      await until(() => errors.length > 0, 10_000, 'an error event');
      expect(errors[0]).toMatchObject({ name: 'SemaphoreRedisError', semaphore: 'unreachable' });
    } finally {
      await watchdog.stop();
      await sem.close();
    }
  });
});

test('diagnostics channels publish acquisitions and releases with the semaphore name', async () => {
  const messages: unknown[] = [];
  const onMessage = (message: unknown) => messages.push(message);
  subscribe(CHANNELS.acquired, onMessage);
  subscribe(CHANNELS.released, onMessage);
  try {
    const sem = fixture.semaphore();
    await sem.lock(async () => undefined);
    expect(messages).toEqual([
      { semaphore: sem.name, token: '0', fence: expect.any(Number), waitedMs: expect.any(Number) },
      { semaphore: sem.name, token: '0', fence: expect.any(Number), heldMs: expect.any(Number) },
    ]);
  } finally {
    unsubscribe(CHANNELS.acquired, onMessage);
    unsubscribe(CHANNELS.released, onMessage);
  }
});

test('stats() counts acquisitions and reports wait percentiles', async () => {
  const sem = fixture.semaphore();
  const other = fixture.semaphore({}, sem.name);
  for (let i = 0; i < 5; i++) await sem.lock(async () => undefined);
  await other.lock();
  const waiting = sem.lock(5000);
  await sleep(150);
  await other.unlock();
  await sem.unlock((await waiting)!);
  const stats = sem.stats();
  expect(stats).toMatchObject({ acquisitions: 6, releases: 6, timeouts: 0, aborts: 0, losses: 0, reclaims: 0 });
  expect(stats.waits.count).toBe(6);
  expect(stats.waits.max).toBeGreaterThanOrEqual(100);
  expect(stats.waits.p50).toBeLessThan(stats.waits.max);
});

test('timeout and aborted: events, channels and counters of waits that got no token', async () => {
  const sem = fixture.semaphore();
  const other = fixture.semaphore({}, sem.name);
  await other.lock();
  const seen: Array<[string, unknown]> = [];
  sem.on('timeout', (event) => seen.push(['timeout', event]));
  sem.on('aborted', (event) => seen.push(['aborted', event]));
  const published: unknown[] = [];
  const onMessage = (message: unknown) => published.push(message);
  subscribe(CHANNELS.timeout, onMessage);
  subscribe(CHANNELS.aborted, onMessage);
  const reason = new Error('caller gave up');
  try {
    expect(await sem.lock(100)).toBeNull();
    await expect(sem.lock(0, async () => undefined)).rejects.toMatchObject({ name: 'LockTimeoutError' });
    const controller = new AbortController();
    setTimeout(() => controller.abort(reason), 100);
    await expect(sem.acquire({ signal: controller.signal })).rejects.toBe(reason);
  } finally {
    unsubscribe(CHANNELS.timeout, onMessage);
    unsubscribe(CHANNELS.aborted, onMessage);
  }
  expect(seen).toEqual([
    ['timeout', { timeout: 100, waitedMs: expect.any(Number) }],
    ['timeout', { timeout: 0, waitedMs: expect.any(Number) }],
    ['aborted', { reason, waitedMs: expect.any(Number) }],
  ]);
  const [first, , aborted] = seen.map(([, event]) => event as { waitedMs: number });
  expect(first!.waitedMs).toBeGreaterThanOrEqual(90);
  expect(aborted!.waitedMs).toBeGreaterThanOrEqual(90);
  expect(published).toEqual(seen.map(([, event]) => ({ semaphore: sem.name, ...(event as object) })));
  expect(sem.stats()).toMatchObject({ acquisitions: 0, timeouts: 2, aborts: 1 });
});

test('stats() gauges: tokens held, callers queued for a blocking connection, connections open', async () => {
  const sem = fixture.semaphore({ resources: 2, maxBlockingConnections: 1 });
  const other = fixture.semaphore({ resources: 2 }, sem.name);
  expect(sem.stats()).toMatchObject({ held: 0, queued: 0, connections: 0 });
  const mine = await sem.lock();
  const theirs = await other.lock();
  expect(sem.stats()).toMatchObject({ held: 1, queued: 0, connections: 0 });
  // Two waiters, one connection: the second queues for it.
  const first = sem.lock(5000);
  const second = sem.lock(5000);
  await until(() => sem.stats().queued === 1, 5000, 'a caller to queue');
  expect(sem.stats()).toMatchObject({ held: 1, queued: 1, connections: 1 });
  await other.unlock(theirs!);
  await sem.unlock(mine!);
  const tokens = await Promise.all([first, second]);
  expect(sem.stats()).toMatchObject({ held: 2, queued: 0, connections: 1 });
  for (const token of tokens) await sem.unlock(token!);
  expect(sem.stats()).toMatchObject({ held: 0, queued: 0 });
});

test("stats() gauges of a lock manager's semaphore count its own callers and connections", async () => {
  const locks = createLocks({ redis: fixture.semaphoreRedis, maxBlockingConnections: 1 });
  try {
    const a = locks.semaphore(uniqueName('gauge-a'));
    const b = locks.semaphore(uniqueName('gauge-b'));
    const heldA = await a.lock();
    const heldB = await b.lock();
    const waitA = a.lock(5000); // takes the one connection
    await until(() => a.stats().connections === 1, 5000, 'a waiter to block');
    const waitB = b.lock(5000); // queues for it
    await until(() => b.stats().queued === 1, 5000, 'a caller to queue');
    expect(a.stats()).toMatchObject({ held: 1, queued: 0, connections: 1 });
    expect(b.stats()).toMatchObject({ held: 1, queued: 1, connections: 0 });
    await a.unlock(heldA!);
    await b.unlock(heldB!);
    await a.unlock((await waitA)!);
    await b.unlock((await waitB)!);
  } finally {
    await locks.close();
  }
});

test('NODE_DEBUG=redis-token-semaphore logs each step', () => {
  const script = `
    const { Semaphore } = require(${JSON.stringify(join(__dirname, '../../dist'))});
    const sem = new Semaphore(process.argv[2], { url: process.argv[1] });
    sem.lock().then(() => sem.unlock()).then(() => sem.close());
  `;
  const name = uniqueName('debug-log');
  const run = spawnSync(process.execPath, ['-e', script, redisUrl(), name], {
    env: { ...process.env, NODE_DEBUG: 'redis-token-semaphore' },
    encoding: 'utf8',
    timeout: 20_000,
  });
  expect(run.status).toBe(0);
  expect(run.stderr).toContain(`: ${name} tryLock `);
  expect(run.stderr).toMatch(/REDIS-TOKEN-SEMAPHORE \d+: \S+ tryLock \S+: token 0, fence \d+/);
  expect(run.stderr).toContain(`${name} acquired`);
  expect(run.stderr).toContain(`${name} unlock 0: done`);
});
