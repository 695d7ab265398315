/**
 * Server-side faults injected for real on private redis-server processes: restarts with and without
 * persistence, stalls longer than the stale timeout (CLIENT PAUSE, DEBUG SLEEP), the connection limit,
 * OOM under noeviction, NOPERM from an ACL, and eviction policies that can take the semaphore's keys.
 */
import { SemaphoreRedisError, type Semaphore, type SemaphoreOptions } from '../../lib';
import { EVICTION_WARNING_CODE } from '../../lib/redis/server-checks';
import { censusProblems, takeCensus, type Census } from '../support/census';
import { PrivateServers } from '../support/private-servers';
import { blockedClients, sleep, uniqueName, until } from '../support/redis';

const servers = new PrivateServers();
afterEach(() => servers.close());

/** Retries `fn` while the caller's own client is still reconnecting after a restart. */
async function once<T>(fn: () => Promise<T>, timeoutMs = 10_000): Promise<T> {
  const started = Date.now();
  for (;;) {
    try {
      return await fn();
    } catch (error) {
      if (Date.now() - started > timeoutMs) throw error;
      await sleep(50);
    }
  }
}

/**
 * Census problems of a semaphore at rest. Abandoned marks (`~<grant id>`, left by `recover` after a
 * connection failure) are allowed: they hold no token and expire on their own (four leases).
 */
function idleProblems(census: Census, resources: number): string[] {
  const waiting = census.waiting.filter((entry) => !entry.registration.startsWith('~'));
  return censusProblems({ ...census, waiting }, resources, { idle: true });
}

/**
 * The census once live registrations are gone: a busy instance's spare registration (DESIGN
 * "Contended mode") lasts up to 200 ms unused; anything still there after 2 s is a leak.
 */
async function settledCensus(admin: Parameters<typeof takeCensus>[0], name: string): Promise<Census> {
  const live = async () => (await takeCensus(admin, name)).waiting.filter((e) => !e.registration.startsWith('~'));
  await until(async () => (await live()).length === 0, 2000, 'spare registrations to go').catch(() => undefined);
  return takeCensus(admin, name);
}

function stateOf(census: Census) {
  return { available: census.available, grabbed: census.grabbed, owners: census.owners };
}

describe('Redis restarted while tokens are held and waiters block', () => {
  // spec/faults/faults.spec.ts covers one waiter; here every token is held and more waiters block than tokens.
  test('without persistence: waiters go on, old holders unlock false, and the pool is exactly N again', async () => {
    const { server, admin: first } = await servers.start([]);
    const name = uniqueName('restart');
    const N = 2;
    const holder = servers.semaphore(name, { url: server.url, resources: N });
    const held = [await holder.lock(0), await holder.lock(0)];
    expect(held).toEqual(['0', '1']);
    const waiters = [0, 1, 2].map(() => servers.semaphore(name, { url: server.url, resources: N, waitSlice: 500 }));
    const waiting = waiters.map((waiter) => waiter.lock(20_000));
    await until(async () => (await blockedClients(first)) === 3, 5000, 'three waiters to block');

    await server.kill('SIGKILL');
    await sleep(200);
    await server.restart();
    const admin = await servers.connect(server.url);

    // Re-created full at the first script after the restart: two waiters get the two new tokens.
    await until(
      async () => Object.keys((await takeCensus(admin, name)).grabbed).length === N,
      10_000,
      'two waiters to be served',
    );
    const served: string[] = [];
    for (const [i, promise] of waiting.entries()) {
      const result = await Promise.race([promise, sleep(100).then(() => `pending:${i}`)]);
      served.push(String(result));
    }
    expect(served.filter((token) => token === '0' || token === '1').sort()).toEqual(['0', '1']);

    // The old holders' tokens were wiped: their unlock resolves false and pushes nothing.
    expect(await once(() => holder.unlock(held[0] ?? ''))).toBe(false);
    expect(await once(() => holder.unlock(held[1] ?? ''))).toBe(false);
    let census = await takeCensus(admin, name);
    expect(censusProblems(census, N)).toEqual([]);
    expect(Object.keys(census.grabbed)).toHaveLength(N);
    expect(census.available).toEqual([]);

    // The served waiters release; the third gets a token; once it releases, exactly N are free.
    const servedIndex = served.map((token, i) => (token === '0' || token === '1' ? i : -1)).filter((i) => i >= 0);
    for (const i of servedIndex) expect(await waiters[i]?.unlock()).not.toBe(false);
    const third = served.findIndex((token) => token.startsWith('pending'));
    expect(await waiting[third]).not.toBeNull();
    expect(await waiters[third]?.unlock()).not.toBe(false);
    census = await settledCensus(admin, name);
    expect(idleProblems(census, N)).toEqual([]);
    const probe = servers.semaphore(name, { redis: admin, resources: N });
    const taken = [await probe.lock(0), await probe.lock(0)];
    expect(taken.sort()).toEqual(['0', '1']);
    expect(await probe.lock(0)).toBeNull();
  });

  test.each(['SIGKILL (a crash)', 'SIGTERM (a shutdown)'] as const)(
    'with AOF everysec, %s: grants, registrations and free tokens survive; holders unlock normally',
    async (how) => {
      const { server, admin: first } = await servers.start(['--appendonly', 'yes', '--appendfsync', 'everysec']);
      const name = uniqueName('aof');
      const N = 3;
      const holder = servers.semaphore(name, { url: server.url, resources: N, staleClientTimeout: 60_000 });
      const held = [await holder.lock(0), await holder.lock(0)];
      const job = await holder.signal('job-1'); // a signalled string survives too
      expect(job).toBe(2);
      const waiter = servers.semaphore(name, { url: server.url, resources: N, waitSlice: 500 });
      expect(await waiter.lock(0)).toBe('2'); // signal pushes at the tail: the free token first
      expect(await waiter.lock(0)).toBe('job-1');
      const waiting = waiter.lock(20_000);
      await until(async () => (await blockedClients(first)) === 1, 5000, 'the waiter to block');
      // everysec: the AOF is written at each event loop turn and fsynced every second; a process crash
      // loses nothing written (the kernel has it), a machine crash up to about a second.
      await sleep(1200);
      const before = await takeCensus(first, name);

      await server.kill(how.startsWith('SIGKILL') ? 'SIGKILL' : 'SIGTERM');
      await server.restart();
      const admin = await servers.connect(server.url);
      const after = await takeCensus(admin, name);
      expect(stateOf(after)).toEqual(stateOf(before));

      // The holder's grants survived: unlock puts its token back, and the blocked waiter gets it.
      expect(await once(() => holder.unlock(held[0] ?? ''))).not.toBe(false);
      expect(await waiting).toBe(held[0]);
      expect(await holder.unlock(held[1] ?? '')).not.toBe(false);
      for (const token of [held[0] ?? '', '2', 'job-1']) expect(await waiter.unlock(token)).not.toBe(false);
      const census = await settledCensus(admin, name);
      expect(idleProblems({ ...census, available: census.available.filter((t) => t !== 'job-1') }, N)).toEqual([]);
      expect(census.available).toContain('job-1');
    },
  );
});

describe('Redis stalled longer than the stale timeout', () => {
  const STALE = 500;
  type Stall = 'CLIENT PAUSE ALL' | 'CLIENT PAUSE WRITE' | 'DEBUG SLEEP';

  /**
   * A holder that refreshes every 100 ms, a watchdog every 100 ms and a waiter blocked behind it; then
   * the server stalls for three stale timeouts. No refresh can be confirmed within the holder's lease,
   * so the holder is told ('expired') during the stall, by its own clock. Redis TIME runs on during
   * the stall, so the first reclaim to run afterwards (the watchdog's, or the waiter's claim at the end
   * of its slice) may find the holder stale before its queued refresh runs. Whichever runs first, the
   * state stays exact: the holder's unlock gives the token back if Redis still records it, or resolves
   * false and pushes nothing, and the token is granted once.
   */
  test.each(['CLIENT PAUSE ALL', 'CLIENT PAUSE WRITE', 'DEBUG SLEEP'] as Stall[])('%s', async (stall) => {
    const { server, admin } = await servers.start(['--enable-debug-command', 'local']);
    const name = uniqueName('stall');
    const options = { url: server.url, staleClientTimeout: STALE, waitSlice: 300 };
    const told: string[] = [];
    const holder = servers.semaphore(name, { ...options, onLockLost: (_token, reason) => void told.push(reason) });
    const watcher = servers.semaphore(name, options);
    // The waiter's own lease is long: on a busy machine the 100 ms refresh below can be starved past
    // 500 ms, and the watchdog would then reclaim the waiter's grant, which is not this test's subject
    // (a reclaim judges a grant by the lease in its own record, so the holder's stays 500 ms).
    const waiter = servers.semaphore(name, { ...options, staleClientTimeout: 30_000 });
    expect(await holder.lock(0)).toBe('0');
    const refreshes: boolean[] = [];
    let granted: string | null | undefined;
    const keepFresh = setInterval(() => {
      void holder.refresh('0').then(
        (ok) => refreshes.push(ok),
        () => undefined,
      );
      // The waiter, once served, is a live holder too: it keeps its token fresh against the watchdog.
      if (granted) void waiter.refresh(granted).catch(() => undefined);
    }, 100);
    const watchdog = watcher.startWatchdog(100, { onError: () => undefined });
    const waiting = waiter.lock(20_000).then((token) => (granted = token));
    try {
      await until(async () => (await blockedClients(admin)) === 1, 5000, 'the waiter to block');
      await sleep(300);
      expect(granted).toBeUndefined(); // refreshed: not stale before the stall
      const stallMs = 3 * STALE;
      const staller = await servers.connect(server.url);
      if (stall === 'DEBUG SLEEP') await staller.sendCommand(['DEBUG', 'SLEEP', String(stallMs / 1000)]);
      else await staller.sendCommand(['CLIENT', 'PAUSE', String(stallMs), stall.endsWith('WRITE') ? 'WRITE' : 'ALL']);
      await sleep(stallMs + 600);
    } finally {
      clearInterval(keepFresh);
      await watchdog.stop();
    }
    // Told during the stall, whatever Redis decides afterwards; a lost holding stays lost.
    expect(told).toEqual(['expired']);
    expect(await holder.refresh('0')).toBe(false);
    const census = await takeCensus(admin, name);
    expect(censusProblems(census, 1, { inboxesAllowed: true })).toEqual([]);
    const unlocked = await holder.unlock('0');
    if (unlocked !== false) {
      // Not reclaimed: the holder was still the only holder, and its unlock hands the token on.
      expect(unlocked).toBe(1);
      expect(await waiting).toBe('0');
    } else {
      // Reclaimed for a stall it did not cause (and told): its unlock pushed nothing.
      expect(await waiting).toBe('0');
      expect(Object.keys((await takeCensus(admin, name)).grabbed)).toEqual(['0']);
    }
    const outcome = unlocked !== false ? 'kept its token' : 'was reclaimed';
    console.log(
      `${stall} ${3 * STALE} ms with staleClientTimeout ${STALE} ms: holder told '${told.join()}', ${outcome}; ` +
        `refreshes ${refreshes.filter((ok) => !ok).length} false of ${refreshes.length}`,
    );
    expect(await waiter.unlock('0')).toBe(1);
    expect(idleProblems(await settledCensus(admin, name), 1)).toEqual([]);
  });
});

describe('Redis stalled while a lock waits for its first try', () => {
  /**
   * The try goes unanswered past TRY_ANSWER_MS (1 s) and the lock times out; close() comes during the
   * stall. The try runs once Redis wakes and takes the free token; close() waits for its
   * undo (up to 10 s) with the semaphore's own client still open, so the token goes back rather than
   * waiting out its lease.
   */
  test('close() during the stall: the token the late try takes goes back before the client quits', async () => {
    const { server, admin } = await servers.start(['--enable-debug-command', 'local']);
    const name = uniqueName('stall');
    const sem = servers.semaphore(name, { url: server.url, staleClientTimeout: null });
    expect(await sem.lock(0)).toBe('0'); // its scripts are loaded: the stalled try runs as soon as Redis wakes
    expect(await sem.unlock()).toBe(1);
    const staller = await servers.connect(server.url);
    const stalled = staller.sendCommand(['DEBUG', 'SLEEP', '8']);
    await sleep(100);
    // Its timeout passes during the stall (the try left behind at 1 s): only the try's undo is left.
    expect(await sem.lock(1200)).toBeNull();
    await sem.close();
    await stalled;
    // No lease (staleClientTimeout: null): a token left to the late try would stay held for good.
    const census = await takeCensus(admin, name);
    expect(census.grabbed).toEqual({});
    expect(census.available).toEqual(['0']);
  });
});

describe('Redis stalled while a weighted lock waits for its first try', () => {
  /**
   * The try (permits: 2, one token free) goes unanswered past TRY_ANSWER_MS and the lock times out.
   * Once Redis wakes the try misses: it lists the caller as a weighted waiter and parks the free token
   * for it (tryLock.lua). Its undo ends that wait: the entry goes, and the parked token is handed on.
   */
  test('the late miss leaves no COLLECTING entry, and its parked token is free again', async () => {
    const { server, admin } = await servers.start(['--enable-debug-command', 'local']);
    const name = uniqueName('stall-weighted');
    const sem = servers.semaphore(name, { url: server.url, resources: 3, waitSlice: 60_000 });
    const held = await sem.acquire({ permits: 2 }); // one token left free
    const staller = await servers.connect(server.url);
    const stalled = staller.sendCommand(['DEBUG', 'SLEEP', '3']);
    await sleep(100);
    expect(await sem.lock(1200, { permits: 2 })).toBeNull();
    await stalled;
    // Nobody else waits or releases meanwhile: only the undo can hand the parked token on.
    await until(async () => (await takeCensus(admin, name)).available.length === 1, 10_000, 'the token free');
    const census = await takeCensus(admin, name);
    expect(census.collection).toEqual({ registration: null, pending: [], collected: [] });
    expect(await admin.hGetAll(`SEMAPHORE:${name}:COLLECTING`)).toEqual({});
    expect(await held.release()).toBe(true);
    expect(censusProblems(await takeCensus(admin, name), 3, { idle: true, marksAllowed: true })).toEqual([]);
  });
});

describe('a plain (not Cluster) client on a Redis Cluster node', () => {
  /**
   * On a single Redis the hot-path scripts get AVAILABLE alone and name the other keys; a Cluster
   * node must see every key a call touches (a slot migration checks only declared keys before a
   * script runs). A plain client talking to a one-node cluster is told apart by INFO at first use.
   */
  test.each([false, true])(
    'cluster-enabled %s: the calls declare every key exactly on a Cluster node',
    async (clusterEnabled) => {
      const { server, admin } = await servers.start(clusterEnabled ? ['--cluster-enabled', 'yes'] : []);
      if (clusterEnabled) {
        await admin.sendCommand(['CLUSTER', 'ADDSLOTSRANGE', '0', '16383']);
        await until(
          async () => String(await admin.sendCommand(['CLUSTER', 'INFO'])).includes('cluster_state:ok'),
          10_000,
          'a one-node cluster',
        );
      }
      // Every command into the slow log, with its arguments (KEYS count third for EVALSHA and FCALL).
      await admin.sendCommand(['CONFIG', 'SET', 'slowlog-log-slower-than', '0']);
      await admin.sendCommand(['CONFIG', 'SET', 'slowlog-max-len', '1000']);
      const sem = servers.semaphore(`{${uniqueName('plain')}}`, { redis: await servers.connect(server.url) });
      expect(await sem.lock(0)).toBe('0');
      expect(await sem.unlock()).toBe(1);
      const log = (await admin.sendCommand(['SLOWLOG', 'GET', '1000'])) as Array<[unknown, unknown, unknown, string[]]>;
      const keyCounts = log
        .map((entry) => entry[3])
        .filter((args) => ['EVALSHA', 'EVAL', 'FCALL'].includes(args[0]!.toUpperCase()))
        .map((args) => Number(args[2]));
      expect(keyCounts.length).toBeGreaterThanOrEqual(2); // tryLock and release, at least
      if (clusterEnabled) expect(Math.min(...keyCounts)).toBeGreaterThan(1);
      else expect(keyCounts).toContain(1);
      // The function library is loaded on a single Redis only (each Cluster primary would need it).
      expect(log.some((entry) => entry[3][0]!.toUpperCase() === 'FCALL')).toBe(!clusterEnabled);
    },
  );
});

describe('server limits: a typed error naming the semaphore, nothing half-written', () => {
  test('maxclients reached: a waiter that cannot get a blocking connection says so', async () => {
    // Two connections allowed: the admin client and the semaphore's own; none left for blocking waits.
    const { server, admin } = await servers.start(['--maxclients', '2']);
    const name = uniqueName('maxclients');
    const main = await servers.connect(server.url);
    const sem = servers.semaphore(name, { redis: main, waitSlice: 500 });
    expect(await sem.lock(0)).toBe('0');
    const error = await sem.lock(5000).then(
      () => null,
      (caught: unknown) => caught,
    );
    expect(error).toBeInstanceOf(SemaphoreRedisError);
    expect(error).toMatchObject({ name: 'SemaphoreRedisError', semaphore: name });
    // v4 and v5 drop Redis' reason ("Socket closed unexpectedly"), so the library asks INFO and names
    // the limit; v6 passes Redis' own error on.
    expect((error as Error).message).toMatch(
      new RegExp(`lock on semaphore "${name}" failed: .*(maxclients 2|max number of clients reached)`),
    );
    const census = await takeCensus(admin, name);
    expect(censusProblems(census, 1)).toEqual([]);
    expect(Object.keys(census.grabbed)).toEqual(['0']); // the holder only; the failed waiter holds nothing
    expect(census.waiting.every((entry) => entry.registration.startsWith('~') || entry.expiry > 0)).toBe(true);
    expect(await sem.unlock()).toBe(1);

    // A semaphore that makes its own client cannot even connect: typed, named, and it writes nothing.
    const other = servers.semaphore(uniqueName('maxclients'), { url: server.url });
    await expect(other.lock(0)).rejects.toMatchObject({ name: 'SemaphoreRedisError', semaphore: other.name });
    expect(await admin.keys(`SEMAPHORE:${other.name}:*`)).toEqual([]);
  });

  test('OOM with noeviction: typed errors; a failed call writes nothing, and releases still work', async () => {
    const { admin } = await servers.start(['--maxmemory-policy', 'noeviction']);
    const name = uniqueName('oom');
    const sem = servers.semaphore(name, { redis: admin, resources: 2, waitSlice: 300 });
    expect(await sem.lock(0)).toBe('0');
    const before = await takeCensus(admin, name);
    // Some data, then a maxmemory below what is used: every write that may grow memory is refused.
    for (let i = 0; i < 100; i++) await admin.set(`filler:${i}`, 'x'.repeat(4096));
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
    await admin.configSet('maxmemory', String(Math.floor(used * 0.8)));
    expect(String(await admin.set('probe', 'x').catch((error: unknown) => error))).toMatch(/OOM/);
    // A new semaphore cannot be created: nothing of it is written.
    const fresh = servers.semaphore(uniqueName('oom'), { redis: admin });
    const created = await fresh.lock(0).catch((error: unknown) => error);
    expect(created).toMatchObject({ name: 'SemaphoreRedisError', semaphore: fresh.name });
    expect((created as Error).message).toMatch(/OOM/);
    expect(await admin.keys(`SEMAPHORE:${fresh.name}:*`)).toEqual([]);
    // A waiter on a full semaphore cannot register: typed error, nothing left registered or moved.
    expect(await sem.lock(0)).toBe('1'); // taking a free token writes nothing new (LPOP first)
    const waited = await sem.lock(1000).catch((error: unknown) => error);
    expect(waited).toMatchObject({ name: 'SemaphoreRedisError', semaphore: name });
    expect((waited as Error).message).toMatch(/OOM/);
    // (Read key by key: Redis refuses MULTI while out of memory.)
    const prefix = `SEMAPHORE:${name}:`;
    expect(await admin.zRange(`${prefix}WAITING`, 0, -1)).toEqual([]);
    expect((await admin.hKeys(`${prefix}GRABBED`)).sort()).toEqual(['0', '1']);
    expect(await admin.lRange(`${prefix}AVAILABLE`, 0, -1)).toEqual([]);
    expect(await admin.keys(`${prefix}INBOX:*`)).toEqual([]);
    // Releasing frees memory and works under OOM.
    expect(await sem.unlock('1')).toBe(1);
    expect(await sem.unlock('0')).toBe(2);
    await admin.configSet('maxmemory', '0');
    const after = await takeCensus(admin, name);
    expect(idleProblems(after, 2)).toEqual([]);
    expect(before.available).toEqual(['1']);
  });

  test('OOM with noeviction: a contended waiter (registering in its blocking pipeline) writes nothing either', async () => {
    const { admin } = await servers.start(['--maxmemory-policy', 'noeviction']);
    const name = uniqueName('oom');
    const options = { redis: admin, resources: 1, waitSlice: 300 };
    const [holder, a, b] = [0, 1, 2].map(() => servers.semaphore(name, options)) as [Semaphore, Semaphore, Semaphore];
    expect(await holder.lock(0)).toBe('0');
    const first = a.lock(5000);
    await until(async () => (await blockedClients(admin)) === 1, 5000, 'a to block');
    const second = b.lock(5000);
    await until(async () => (await blockedClients(admin)) === 2, 5000, 'b to block');
    await holder.unlock();
    expect(await first).toBe('0'); // granted while b waited: a's next lock skips tryLock
    await a.unlock();
    expect(await second).toBe('0');
    // Spare registrations of the two grants go within 200 ms; a's next lock then registers itself.
    await until(async () => (await b.waiting()) === 0, 2000, 'spare registrations to go');
    for (let i = 0; i < 100; i++) await admin.set(`filler:${i}`, 'x'.repeat(4096));
    const used = Number(/used_memory:(\d+)/.exec(await admin.info('memory'))?.[1]);
    await admin.configSet('maxmemory', String(Math.floor(used * 0.8)));
    const waited = await a.lock(1000).catch((error: unknown) => error);
    expect(waited).toMatchObject({ name: 'SemaphoreRedisError', semaphore: name });
    expect((waited as Error).message).toMatch(/OOM/);
    const prefix = `SEMAPHORE:${name}:`;
    expect(await admin.zRange(`${prefix}WAITING`, 0, -1)).toEqual([]);
    expect(await admin.hKeys(`${prefix}GRABBED`)).toEqual(['0']);
    expect(await admin.keys(`${prefix}INBOX:*`)).toEqual([]);
    expect(await b.unlock()).toBe(1);
    await admin.configSet('maxmemory', '0');
  });

  test('NOPERM from an ACL that does not cover the keys: typed error, nothing written', async () => {
    const { server, admin } = await servers.start([]);
    await admin.sendCommand(['ACL', 'SETUSER', 'narrow', 'on', '>pw', '~OTHER:*', '+@all']);
    const url = server.url.replace('redis://', 'redis://narrow:pw@');
    const name = uniqueName('noperm');
    const sem = servers.semaphore(name, { url });
    for (const call of [
      () => sem.lock(0),
      () => sem.signal('x'),
      () => sem.existsOrCreate(),
      () => sem.availableCount(),
    ]) {
      const error = await call().then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(error).toMatchObject({ name: 'SemaphoreRedisError', semaphore: name });
      expect((error as Error).message).toMatch(/NOPERM/);
    }
    expect(await admin.keys('SEMAPHORE:*')).toEqual([]);
  });
});

describe('replication settings that narrow the failover window', () => {
  test('min-replicas-to-write with too few replicas: writes are refused (typed error), nothing written', async () => {
    const { server, admin } = await servers.start(['--min-replicas-to-write', '1', '--min-replicas-max-lag', '10']);
    const name = uniqueName('minreplicas');
    const sem = servers.semaphore(name, { url: server.url });
    const error = await sem.lock(0).catch((caught: unknown) => caught);
    expect(error).toMatchObject({ name: 'SemaphoreRedisError', semaphore: name });
    expect((error as Error).message).toMatch(/NOREPLICAS/);
    expect(await admin.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
  });

  test('WAIT on the caller client after a fast-path grant: acknowledged by the replica', async () => {
    const { server: primary, admin } = await servers.start([]);
    const replica = await servers.start(['--replicaof', '127.0.0.1', String(primary.port)]);
    await until(
      async () => /master_link_status:up/.test(await replica.admin.info('replication')),
      10_000,
      'the replica to sync',
    );
    const name = uniqueName('wait');
    const sem = servers.semaphore(name, { redis: admin });
    expect(await sem.lock(0)).toBe('0');
    // WAIT covers the writes of the connection it runs on: the grant tryLock made on this client.
    expect(await admin.sendCommand(['WAIT', '1', '2000'])).toBe(1);
    expect(await replica.admin.hKeys(`SEMAPHORE:${name}:GRABBED`)).toEqual(['0']);
    // With the replica gone, WAIT says so (0 after its timeout): the grant is not on a replica yet.
    await replica.server.kill('SIGKILL');
    expect(await sem.unlock()).toBe(1);
    expect(await admin.sendCommand(['WAIT', '1', '200'])).toBe(0);
  });
});

describe('an eviction policy that can evict the semaphore keys', () => {
  async function warningsFor(args: string[], options: Partial<SemaphoreOptions> = {}): Promise<string[]> {
    const { server } = await servers.start(args);
    // Jest's sandboxed `process` does not forward emitted warnings to listeners: watch emitWarning itself.
    const emitted = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const seen = () =>
      emitted.mock.calls
        .filter(([, options]) => (options as { code?: string } | undefined)?.code === EVICTION_WARNING_CODE)
        .map(([warning]) => String(warning));
    try {
      const client = await servers.connect(server.url);
      for (const name of [uniqueName('evict'), uniqueName('evict')]) {
        const sem = servers.semaphore(name, { redis: client, ...options });
        expect(await sem.lock(0)).toBe('0');
        expect(await sem.unlock()).toBe(1);
      }
      await sleep(50); // INFO runs in the background
      return seen();
    } finally {
      emitted.mockRestore();
    }
  }

  test('allkeys-lru with maxmemory: one warning per client, at first use, naming the policy', async () => {
    const seen = await warningsFor(['--maxmemory', '50mb', '--maxmemory-policy', 'allkeys-lru']);
    expect(seen).toHaveLength(1);
    expect(seen[0]).toMatch(/maxmemory-policy allkeys-lru .*noeviction/);
  });

  test('volatile-lru warns only when `expiration` gives the keys a TTL', async () => {
    const policy = ['--maxmemory', '50mb', '--maxmemory-policy', 'volatile-lru'];
    expect(await warningsFor(policy)).toEqual([]);
    expect(await warningsFor(policy, { expiration: 60_000 })).toHaveLength(1);
  });

  test('noeviction, or no maxmemory: no warning', async () => {
    expect(await warningsFor(['--maxmemory', '50mb', '--maxmemory-policy', 'noeviction'])).toEqual([]);
    expect(await warningsFor(['--maxmemory-policy', 'allkeys-lru'])).toEqual([]);
  });
});
