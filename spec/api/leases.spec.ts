import { fork } from 'node:child_process';
import { join } from 'node:path';
import { LockLostError, Semaphore, type LockLostReason } from '../../lib';
import { snapshot, useFixture } from '../support/fixture';
import { startRedisServer } from '../support/redis-server';
import { blockedClients, connectClient, sleep, until } from '../support/redis';

/** Leases: autoRefresh, telling a holder it lost its token, and fencing numbers. */
const fixture = useFixture();

/** Records what onLockLost reports. */
function lossRecorder() {
  const losses: Array<{ token: string; reason: LockLostReason }> = [];
  return { losses, onLockLost: (token: string, reason: LockLostReason) => void losses.push({ token, reason }) };
}

/** Script calls the server has run by SHA1 or by function (a refresh is one or the other). */
async function scriptCalls(): Promise<number> {
  const stats = await fixture.redis.info('commandstats');
  const calls = (command: string) => Number(new RegExp(`cmdstat_${command}:calls=(\\d+)`).exec(stats)?.[1] ?? 0);
  return calls('evalsha') + calls('fcall');
}

describe('autoRefresh', () => {
  test('keeps a callback holder from going stale for as long as it runs, and stops at release', async () => {
    const { losses, onLockLost } = lossRecorder();
    // A stale timeout long enough that a loaded machine's event-loop stalls do not make it run out.
    const holder = fixture.semaphore({ staleClientTimeout: 1000, onLockLost });
    const rival = fixture.semaphore({ staleClientTimeout: 1000 }, holder.name);
    const aborted = await holder.lock(async (token, signal) => {
      expect(token).toBe('0');
      for (let i = 0; i < 6; i++) {
        await sleep(400); // 2.4 s in all, over two stale timeouts
        expect(await rival.lock(0)).toBeNull(); // lock(0) reclaims stale holders first: this one is not
      }
      return signal.aborted;
    });
    expect(aborted).toBe(false);
    expect(losses).toEqual([]);
    const before = await scriptCalls();
    await sleep(800); // over two refresh intervals
    expect(await scriptCalls()).toBe(before); // no refresh after the release
    expect(await rival.lock(0)).toBe('0');
  });

  test('covers linear lock() and unlock() too', async () => {
    const holder = fixture.semaphore({ staleClientTimeout: 1000 });
    const rival = fixture.semaphore({ staleClientTimeout: 1000 }, holder.name);
    await holder.lock();
    await sleep(2200);
    expect(await rival.releaseStaleLocks()).toBe(0);
    expect(await holder.unlock()).toBe(1);
  });

  test('is rejected without staleClientTimeout, and can be turned off', async () => {
    expect(() => new Semaphore('x', { staleClientTimeout: null, autoRefresh: true })).toThrow(/staleClientTimeout/);
    const holder = fixture.semaphore({ staleClientTimeout: 300, autoRefresh: false });
    await holder.lock();
    await sleep(450);
    expect(await fixture.semaphore({ staleClientTimeout: 300 }, holder.name).releaseStaleLocks()).toBe(1);
  });
});

describe('losing a token', () => {
  test('a lease that was not refreshed in time is reported lost by the holder’s own clock', async () => {
    const { losses, onLockLost } = lossRecorder();
    const holder = fixture.semaphore({ staleClientTimeout: 300, autoRefresh: false, onLockLost });
    const started = performance.now();
    let reason: unknown;
    const outcome = await holder
      .lock(async (_token, signal) => {
        await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
        reason = signal.reason;
        return 'stopped';
      })
      .catch((error: unknown) => error);
    // lock(fn) rejects: the callback ran past its lease (its result kept on the error).
    expect(outcome).toMatchObject({ name: 'LockLostError', reason: 'expired', result: 'stopped' });
    const elapsed = performance.now() - started;
    expect(elapsed).toBeGreaterThanOrEqual(250);
    expect(elapsed).toBeLessThan(2000);
    expect(losses).toEqual([{ token: '0', reason: 'expired' }]);
    expect(reason).toBeInstanceOf(LockLostError);
    expect(reason).toMatchObject({ token: '0', reason: 'expired', semaphore: holder.name });
  });

  test('a peer with a shorter staleClientTimeout never reclaims a live holder of a longer lease', async () => {
    const { losses, onLockLost } = lossRecorder();
    const holder = fixture.semaphore({ staleClientTimeout: 3000, onLockLost }); // refreshes every second
    const impatient = fixture.semaphore({ staleClientTimeout: 100, autoRefresh: false }, holder.name);
    const watchdog = impatient.startWatchdog(50);
    try {
      await holder.lock();
      await sleep(1500); // 15 of the impatient's timeouts, half the holder's lease
      expect(await impatient.lock(0)).toBeNull();
      expect(await impatient.releaseStaleLocks()).toBe(0);
      expect(losses).toEqual([]);
      expect(await holder.unlock()).toBe(1);
    } finally {
      await watchdog.stop();
    }
  });

  test('a refresh that finds the token reclaimed reports it at once, and the late unlock pushes nothing', async () => {
    const { losses, onLockLost } = lossRecorder();
    const holder = fixture.semaphore({ staleClientTimeout: 3000, onLockLost }); // refreshes every second
    const impatient = fixture.semaphore({ staleClientTimeout: 100, autoRefresh: false }, holder.name);
    await holder.lock();
    // Reclaimed behind the holder's back, as the Ruby gem's release_stale_locks! does: HDEL + LPUSH.
    await fixture.redis.hDel(`SEMAPHORE:${holder.name}:GRABBED`, '0');
    await fixture.redis.lPush(`SEMAPHORE:${holder.name}:AVAILABLE`, '0');
    expect(await impatient.lock(0)).toBe('0');
    await until(() => losses.length > 0, 5000, 'the loss to be reported');
    expect(losses).toEqual([{ token: '0', reason: 'reclaimed' }]);
    expect(await holder.unlock('0')).toBe(false);
    const state = await snapshot(fixture.redis, holder.name);
    expect(state.available).toEqual([]);
    expect(Object.keys(state.grabbed)).toEqual(['0']);
    expect(await impatient.unlock()).toBe(1);
  });

  test('a holder cut off from Redis is told within its lease, while Redis stays unreachable', async () => {
    const server = await startRedisServer();
    const { losses, onLockLost } = lossRecorder();
    const holder = new Semaphore(`lease:${server.port}`, { url: server.url, staleClientTimeout: 500, onLockLost });
    try {
      await holder.lock();
      const cut = performance.now();
      await server.kill();
      await until(() => losses.length > 0, 5000, 'the loss to be reported');
      expect(performance.now() - cut).toBeLessThan(2500); // lease 500 ms; generous for a loaded machine
      expect(losses).toEqual([{ token: '0', reason: 'expired' }]);
    } finally {
      await holder.close();
      await server.stop();
    }
  });

  test('a release whose connection is cut is retried: the token goes back, and nobody hears of a loss', async () => {
    const server = await startRedisServer();
    const admin = await connectClient(server.url);
    const { losses, onLockLost } = lossRecorder();
    const holder = new Semaphore(`release-fails:${server.port}`, {
      url: server.url,
      staleClientTimeout: 600,
      onLockLost,
    });
    const rival = new Semaphore(holder.name, { url: server.url, staleClientTimeout: 600 });
    try {
      const lease = await holder.acquire();
      await rival.existsOrCreate(); // connect the rival before the cut
      // Writes stall, so the release is in flight when the holder's connection is cut.
      await admin.sendCommand(['CLIENT', 'PAUSE', '400', 'WRITE']);
      const releasing = lease.release().then(
        () => 'released',
        (error: unknown) => error, // handled at once: it rejects while this test awaits the kill
      );
      await sleep(100);
      await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes']);
      expect(await releasing).toBe('released');
      expect(await lease.release()).toBe(true); // idempotent
      expect(await rival.lock(0)).toBe('0');
      await sleep(700); // past the holder's lease: still no loss, since it released
      expect(losses).toEqual([]);
      expect(await rival.unlock()).toBe(1);
    } finally {
      await Promise.all([holder.close(), rival.close()]);
      await admin.quit();
      await server.stop();
    }
  });

  test('signal(token) and delete() report the holdings they end as lost', async () => {
    const { losses, onLockLost } = lossRecorder();
    const sem = fixture.semaphore({ resources: 2, onLockLost });
    const first = await sem.acquire();
    await sem.signal(first.token);
    expect(first.signal.aborted).toBe(true);
    const second = await sem.acquire();
    await sem.delete();
    expect(second.signal.aborted).toBe(true);
    expect(losses.map((loss) => loss.reason)).toEqual(['reclaimed', 'reclaimed']);
    expect(await second.release()).toBe(false);
  });

  test('after close(), a held token is no longer refreshed and its holder hears the lease end', async () => {
    const { losses, onLockLost } = lossRecorder();
    const sem = fixture.semaphore({ staleClientTimeout: 300, onLockLost });
    const lease = await sem.acquire();
    await sem.close();
    await until(() => lease.signal.aborted, 5000, 'the lease to end');
    expect(losses).toEqual([{ token: lease.token, reason: 'expired' }]);
    // The holder's lease ends a little before Redis counts the token stale: then another may take it.
    const rival = fixture.semaphore({ staleClientTimeout: 300 }, sem.name);
    await until(async () => (await rival.lock(0)) === lease.token, 5000, 'the rival to reclaim it');
  });

  test('a token handed over after a wait longer than the lease is refreshed first, not handed out already lost', async () => {
    const { losses, onLockLost } = lossRecorder();
    const holder = fixture.semaphore({ staleClientTimeout: 400 });
    const waiter = fixture.semaphore({ staleClientTimeout: 400, onLockLost }, holder.name);
    const held = await holder.acquire();
    // The waiter's pipeline was sent ~700 ms before the grant: more than its whole lease.
    const aborted = waiter.lock(10_000, async (_token, signal) => {
      const atStart = signal.aborted;
      await sleep(300);
      return [atStart, signal.aborted];
    });
    await sleep(700);
    await held.release();
    expect(await aborted).toEqual([false, false]);
    expect(losses).toEqual([]);
  });

  test('an onLockLost that rejects becomes a warning, never an unhandled rejection', async () => {
    const emitWarning = jest.spyOn(process, 'emitWarning');
    try {
      const holder = fixture.semaphore({
        staleClientTimeout: 200,
        autoRefresh: false,
        onLockLost: async () => {
          throw new Error('async listener bug');
        },
      });
      await holder.lock();
      const warned = () =>
        emitWarning.mock.calls.some(([message]) => /threw: async listener bug/.test(String(message)));
      await until(warned, 5000, 'the warning');
    } finally {
      emitWarning.mockRestore();
    }
  });

  test('an onLockLost that throws becomes a warning, never a crash', async () => {
    // Observed, not replaced: the warning still goes out.
    const emitWarning = jest.spyOn(process, 'emitWarning');
    try {
      const holder = fixture.semaphore({
        staleClientTimeout: 200,
        autoRefresh: false,
        onLockLost: () => {
          throw new Error('listener bug');
        },
      });
      await holder.lock();
      const warned = () =>
        emitWarning.mock.calls.some(([message]) => /onLockLost .* threw: listener bug/.test(String(message)));
      await until(warned, 5000, 'the warning');
    } finally {
      emitWarning.mockRestore();
    }
  });

  test('a holder frozen past the stale timeout (SIGSTOP) loses its token to a waiter, is told, and its fence is older', async () => {
    const options = { staleClientTimeout: 600 };
    const { losses, onLockLost } = lossRecorder();
    const waiter = fixture.semaphore({ ...options, onLockLost });
    const child = fork(join(__dirname, '../support/lease-worker.js'), [], {
      env: {
        ...process.env,
        LEASE_WORKER: JSON.stringify({ url: process.env['REDIS_URL'], name: waiter.name, options }),
      },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const messages: Array<Record<string, unknown>> = [];
    child.on('message', (message) => messages.push(message as Record<string, unknown>));
    const watchdog = waiter.startWatchdog(100);
    try {
      await until(() => messages.some((m) => 'acquired' in m || 'error' in m), 10_000, 'the child to lock');
      const acquired = messages.find((m) => 'acquired' in m);
      expect(acquired).toMatchObject({ acquired: '0', fence: expect.any(Number) });
      process.kill(child.pid!, 'SIGSTOP');
      // Frozen, it cannot refresh: the watchdog reclaims its token and Redis hands it to the waiter.
      const granted = await waiter.lock(10_000, async (token, signal, fence) => {
        expect(token).toBe('0');
        expect(fence).toBeGreaterThan(acquired!['fence'] as number);
        process.kill(child.pid!, 'SIGCONT');
        await until(() => messages.some((m) => 'lost' in m), 10_000, 'the resumed holder to learn of the loss');
        child.send('unlock');
        await until(() => messages.some((m) => 'unlocked' in m), 10_000, 'the late unlock');
        // The late unlock changed nothing: the waiter still holds the only token.
        const state = await snapshot(fixture.redis, waiter.name);
        expect(state.available).toEqual([]);
        expect(Object.keys(state.grabbed)).toEqual(['0']);
        return signal.aborted;
      });
      expect(losses).toEqual([]);
      expect(granted).toBe(false);
      expect(messages.find((m) => 'lost' in m)).toMatchObject({
        token: '0',
        lost: expect.stringMatching(/expired|reclaimed/),
      });
      expect(messages.find((m) => 'unlocked' in m)).toEqual({ unlocked: false });
      expect(await waiter.availableCount()).toBe(1);
    } finally {
      await watchdog.stop();
      if (child.exitCode === null && child.signalCode === null) {
        process.kill(child.pid!, 'SIGCONT');
        child.kill('SIGKILL');
      }
    }
  });
});

describe('fencing numbers and introspection', () => {
  test('every acquisition gets a larger fence, on the fast path and through a blocking wait', async () => {
    const sem = fixture.semaphore({ waitSlice: 200 });
    const other = fixture.semaphore({}, sem.name);
    const fences: number[] = [];
    await sem.lock(async (_token, _signal, fence) => void fences.push(fence));
    await sem.lock();
    fences.push(sem.fence()!);
    const waiting = other.lock(5000, async (_token, _signal, fence) => void fences.push(fence));
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the waiter to block');
    await sem.unlock();
    await waiting;
    expect(fences).toHaveLength(3);
    expect([...fences].sort((a, b) => a - b)).toEqual(fences);
    expect(new Set(fences).size).toBe(3);
    expect(sem.fence()).toBeUndefined();
    // Deleting the semaphore does not restart the numbering.
    await sem.delete();
    await sem.lock();
    expect(sem.fence()).toBeGreaterThan(fences[2]!);
  });

  test('holders() shows each holder with its owner label, fence and age; waiting() counts waiters', async () => {
    const sem = fixture.semaphore({ resources: 2, owner: 'host-a:42 nightly report' });
    const other = fixture.semaphore({ owner: 'host-b:7' }, sem.name);
    expect(await sem.holders()).toEqual([]);
    await sem.lock();
    await sleep(20);
    await other.lock();
    const waiter = fixture.semaphore({ owner: 'host-c:1' }, sem.name);
    const waiting = waiter.lock(5000);
    await until(async () => (await sem.waiting()) === 1, 5000, 'one registered waiter');
    const holders = await sem.holders();
    expect(holders.map((h) => [h.token, h.owner])).toEqual([
      ['0', 'host-a:42 nightly report'],
      ['1', 'host-b:7'],
    ]);
    expect(holders[0]).toMatchObject({ fence: sem.fence(), grantId: expect.any(String) });
    expect(holders[0]!.heldMs).toBeGreaterThanOrEqual(holders[1]!.heldMs!);
    expect(holders[0]!.since).toBeInstanceOf(Date);
    await sem.unlock();
    expect(await waiting).toBe('0');
    expect(await sem.waiting()).toBe(0);
  });

  test('holders() orders grants of the same millisecond by their fencing numbers (the order they were made)', async () => {
    const sem = fixture.semaphore({ resources: 3 });
    await sem.existsOrCreate();
    const key = `SEMAPHORE:${sem.name}`;
    await fixture.redis.del(`${key}:AVAILABLE`);
    // Three grant records stamped in one millisecond, written in an order their fences do not follow.
    const stamp = '1763800000.123456';
    for (const [token, fence] of [
      ['2', 30],
      ['0', 10],
      ['1', 20],
    ] as const) {
      await fixture.redis.hSet(`${key}:GRABBED`, token, `${stamp} g.${token} ${fence} 0 ${stamp} label`);
    }
    expect((await sem.holders()).map((h) => [h.token, h.fence])).toEqual([
      ['0', 10],
      ['1', 20],
      ['2', 30],
    ]);
  });

  test('holders() shows a holder the Ruby gem recorded, without owner or fence', async () => {
    const sem = fixture.semaphore();
    await sem.existsOrCreate();
    await fixture.redis.lPop(`SEMAPHORE:${sem.name}:AVAILABLE`);
    await fixture.redis.hSet(`SEMAPHORE:${sem.name}:GRABBED`, '0', 'not a time');
    expect(await sem.holders()).toEqual([
      {
        token: '0',
        since: null,
        heldMs: null,
        refreshedAt: null,
        refreshedMs: null,
        leaseMs: undefined,
        fence: undefined,
        owner: undefined,
        grantId: undefined,
      },
    ]);
  });
});
