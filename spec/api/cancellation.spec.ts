/**
 * Cancelling a blocked wait (an AbortSignal, or close()) ends it with `CLIENT UNBLOCK` from the main
 * connection and keeps the blocking connection, so the claim pipelined behind BLMOVE still runs and
 * settles the wait (DESIGN "Cancellation"). Covered here on real servers:
 *
 * 1. The race behind the ~100 s stranded token: Redis, stalled by a slow command, reads a release's
 *    LPUSH and the cancellation in either order once the stall ends (a release read first moves the
 *    token into the cancelled wait's inbox, and its pipelined claim must settle it). Before the
 *    change, on Redis 7.0.15, this sequence did not strand (recover, sent after the socket closed,
 *    found the token in the inbox); what tells the two apart here is the blocking connection kept.
 * 2. What a cancellation costs in connections: ~0 per abort, standalone and on a Redis Cluster.
 * 3. Aborts that arrive before the BLMOVE is blocked in Redis (0–5 ms after lock()).
 */
import { createClient, createCluster } from 'redis';
import { Semaphore, SemaphoreClosedError } from '../../lib';
import { semaphoreKeys } from '../../lib/redis/keys';
import { censusProblems, describeCensus, takeCensus, type Census } from '../support/census';
import { PrivateServers } from '../support/private-servers';
import {
  blockedClients,
  closeAll,
  connectSemaphoreClient,
  sleep,
  uniqueName,
  until,
  type Client,
} from '../support/redis';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster';

jest.setTimeout(60_000);

/** How long the stall holds Redis, and when (after sending it) the race's two calls are made. */
const STALL_MS = 400;
const LEAD_MS = 80;
const GAP_MS = 30;
const ROUNDS = 10;

/**
 * Stalls the server of `admin` (a connection no semaphore uses) for `ms` with DEBUG SLEEP, so it
 * reads no socket meanwhile; resolves the stall's span in wall-clock ms of Redis TIME, read in the
 * same pipeline just before. (Not a busy Lua loop timed by TIME: Valkey 8 freezes TIME inside a
 * script, so such a loop ran to its busy-reply-threshold, 5 s, and Valkey then answered the calls
 * queued behind it -BUSY, the release and CLIENT UNBLOCK among them.)
 */
async function stall(admin: Client, ms: number): Promise<{ from: number; to: number }> {
  const time = admin.sendCommand(['TIME']) as Promise<[string, string]>;
  const slept = admin.sendCommand(['DEBUG', 'SLEEP', String(ms / 1000)]);
  const [seconds, micros] = await time;
  await slept;
  const from = Number(seconds) * 1000 + Number(micros) / 1000;
  return { from, to: from + ms };
}

async function info(client: Client, field: string): Promise<number> {
  const text = await client.info('stats');
  const value = new RegExp(`${field}:(\\d+)`).exec(text)?.[1];
  if (value === undefined) throw new Error(`no ${field} in INFO stats`);
  return Number(value);
}

async function inboxKeys(client: Client, name: string): Promise<string[]> {
  const pattern = `${semaphoreKeys(name).inbox('')}*`.replace(/[?[\]\\]/g, '\\$&');
  return (await client.keys(pattern)).sort();
}

/** Registrations in WAITING other than abandoned marks (`~<grant id>`, which may legitimately remain). */
async function liveRegistrations(client: Client, key: string): Promise<string[]> {
  return (await client.zRange(key, 0, -1)).filter((member) => !member.startsWith('~'));
}

/** Polls until `census` finds nothing wrong (or `timeoutMs` passes), and returns the last census. */
async function settledCensus(
  read: () => Promise<Census>,
  resources: number,
  expectation: Parameters<typeof censusProblems>[2],
  timeoutMs = 3000,
): Promise<{ census: Census; problems: string[] }> {
  const started = Date.now();
  for (;;) {
    const census = await read();
    const problems = censusProblems(census, resources, expectation);
    if (problems.length === 0 || Date.now() - started > timeoutMs) return { census, problems };
    await sleep(20);
  }
}

function tokensInPool(census: Census): number {
  return census.available.length + Object.keys(census.grabbed).length;
}

describe('a cancellation racing a release while Redis is stalled', () => {
  const servers = new PrivateServers();
  // The semaphores' clients (ioredis when REDIS_CLIENT names it), then the semaphores and servers.
  afterEach(() => closeAll().then(() => servers.close()));

  /**
   * One variant: A holds the mutex, B waits blocked; during a ~400 ms stall (DEBUG SLEEP) B's wait is
   * cancelled (`cancel`) and A unlocks, in alternating order 30 ms apart, so that Redis reads the
   * release first in some rounds and the cancellation first in others. Then a third instance must
   * get the token at once, no INBOX key may remain and the pool must hold exactly one token.
   */
  async function race(
    variant: 'abort' | 'close',
    cancel: (waiter: Semaphore, controller: AbortController, reason: Error) => Promise<unknown>,
  ) {
    const { server, admin } = await servers.start(['--enable-debug-command', 'local']);
    const name = uniqueName('cancel-race');
    const keys = semaphoreKeys(name);
    const [redisA, redisB, redisC] = await Promise.all([1, 2, 3].map(() => connectSemaphoreClient(server.url)));
    const holder = servers.semaphore(name, { redis: redisA!, resources: 1 });
    const third = servers.semaphore(name, { redis: redisC!, resources: 1 });
    // The abort variant reuses one waiter (its blocking connection should survive every round).
    let waiter = servers.semaphore(name, { redis: redisB!, resources: 1 });
    const outcomes = { granted: 0, notGranted: 0, notRaced: 0 };
    const waits: number[] = [];
    /** Per round: which call was made first (R release, C cancellation) and whether the claim granted (+) or not (-). */
    const trace: string[] = [];
    // The release and claim scripts are loaded before the race (a NOSCRIPT retry would reorder it).
    expect(await holder.unlock((await holder.lock(0))!)).toBe(1);
    expect(await third.unlock((await third.lock(0))!)).toBe(1);
    /** Ids of the connections the waiter blocked on: an abort keeps its connection, so the same id comes back. */
    const blockedIds = new Set<string>();
    const connectionsBefore = await info(admin, 'total_connections_received');

    for (let round = 0; round < ROUNDS; round++) {
      if (variant === 'close' && round > 0) waiter = servers.semaphore(name, { redis: redisB!, resources: 1 });
      const held = await holder.lock(0);
      expect(held).toBe('0');
      const heldFence = holder.fence('0')!;
      const controller = new AbortController();
      const reason = new Error(`round ${round} went away`);
      let rejectedAt = 0;
      const waiting = waiter.lock(undefined, { signal: controller.signal }).then(
        (token) => ({ token, error: undefined as unknown }),
        (error: unknown) => {
          rejectedAt = Date.now();
          return { token: undefined, error };
        },
      );
      await until(async () => (await blockedClients(admin)) === 1, 5000, 'the waiter to block');
      const list = String(await admin.sendCommand(['CLIENT', 'LIST']));
      for (const line of list.split('\n')) {
        if (/ cmd=blmove /.test(line)) blockedIds.add(/^id=(\d+)/.exec(line)![1]!);
      }

      const stalled = stall(admin, STALL_MS);
      await sleep(LEAD_MS);
      // Even rounds: the release first; odd rounds: the cancellation first (both while Redis sleeps).
      const releaseFirst = round % 2 === 0;
      const actions: Array<() => Promise<unknown>> = [
        () => holder.unlock('0'),
        () => cancel(waiter, controller, reason),
      ];
      if (!releaseFirst) actions.reverse();
      const firstAt = Date.now();
      const first = actions[0]!();
      await sleep(GAP_MS);
      const secondAt = Date.now();
      const second = actions[1]!();
      const span = await stalled;
      const afterStall = performance.now();
      // Did both calls reach Redis while it slept? (A late machine may miss the window: counted apart.)
      const raced = span.from < firstAt && span.to > secondAt + 15;
      if (!raced) outcomes.notRaced++;

      const token = await third.lock(5000);
      const waitMs = performance.now() - afterStall;
      waits.push(Math.round(waitMs));
      expect(token).toBe('0');
      expect(waitMs).toBeLessThan(3000);
      await Promise.all([first, second]);

      const ended = await waiting;
      expect(ended.token).toBeUndefined();
      if (variant === 'abort') {
        expect(ended.error).toBe(reason);
        // The caller heard at once, while Redis was still stalled (its settling ran afterwards).
        if (raced) expect(rejectedAt).toBeLessThan(span.to);
      } else {
        expect(ended.error).toBeInstanceOf(SemaphoreClosedError);
      }

      // Each grant takes the next fence: the third instance's is two above the holder's when the
      // cancelled wait's claim granted the token in between (and the library gave it back).
      const fenceGap = third.fence(token!)! - heldFence;
      expect([1, 2]).toContain(fenceGap);
      if (fenceGap === 2) outcomes.granted++;
      else outcomes.notGranted++;
      trace.push(`${releaseFirst ? 'R' : 'C'}${fenceGap === 2 ? '+' : '-'}${raced ? '' : '?'}`);

      await until(async () => (await inboxKeys(admin, name)).length === 0, 2000, 'no INBOX key').catch(() => undefined);
      expect(await inboxKeys(admin, name)).toEqual([]);
      const { census, problems } = await settledCensus(() => takeCensus(admin, name), 1, {});
      expect(problems).toEqual([]);
      expect(tokensInPool(census)).toBe(1);
      expect(Object.keys(census.grabbed)).toEqual(['0']);

      expect(await third.unlock(token!)).toBe(1);
      await until(async () => (await liveRegistrations(admin, keys.waiting)).length === 0, 3000, 'the wait to settle');
      await until(async () => (await blockedClients(admin)) === 0, 3000, 'no blocked client');
    }

    const idle = await settledCensus(() => takeCensus(admin, name), 1, { idle: true, marksAllowed: true });
    expect(idle.problems).toEqual([]);
    const newConnections = (await info(admin, 'total_connections_received')) - connectionsBefore;
    console.log(
      `${variant} racing a release during a ${STALL_MS} ms stall, ${ROUNDS} rounds: the cancelled wait's claim ` +
        `granted (token given back) ${outcomes.granted}, did not ${outcomes.notGranted}; ` +
        `calls outside the stall ${outcomes.notRaced}; rounds (first call, claim granted) ${trace.join(' ')}; third instance's lock after the stall took ${waits.join(', ')} ms; ` +
        `new connections ${newConnections}; the waiter blocked on ${blockedIds.size} distinct connection(s)`,
    );
    // Both orders happened: the cancelled wait's claim granted (a release read first) and did not.
    expect(outcomes.granted).toBeGreaterThan(0);
    expect(outcomes.notGranted).toBeGreaterThan(0);
    // An abort keeps the blocking connection (a closed one would be replaced every round).
    if (variant === 'abort') expect(blockedIds.size).toBeLessThanOrEqual(2);
    // Most rounds must really have raced inside the stall, in both orders.
    expect(outcomes.notRaced).toBeLessThanOrEqual(ROUNDS / 2);
    expect(outcomes.granted + outcomes.notGranted).toBe(ROUNDS);
  }

  test('an AbortSignal abort', async () => {
    await race('abort', async (_waiter, controller, reason) => controller.abort(reason));
  });

  test('close()', async () => {
    await race('close', (waiter) => waiter.close());
  });
});

describe('connections per cancellation', () => {
  const servers = new PrivateServers();
  afterEach(() => servers.close());

  /**
   * Cancels `count` waits on a held mutex, one at a time, each by AbortSignal.timeout(2..10 ms),
   * after a warm-up that opens the pool's connections; resolves how many were not aborts.
   */
  async function abortMany(waiter: Semaphore, count: number): Promise<number> {
    let failures = 0;
    for (let i = 0; i < count; i++) {
      const signal = AbortSignal.timeout(2 + (i % 9));
      await waiter.lock(undefined, { signal }).then(
        () => failures++,
        (error: unknown) => {
          if (error !== signal.reason) failures++;
        },
      );
    }
    return failures;
  }

  /**
   * How long an aborted blocked wait stays blocked in Redis (ms, from the abort until `readBlocked`
   * reads 0; bounded at 12 s, past a default 10 s slice): CLIENT UNBLOCK should end it at once.
   */
  async function unblockDelays(
    waiter: Semaphore,
    readBlocked: () => Promise<number>,
    times: number,
  ): Promise<number[]> {
    const delays: number[] = [];
    for (let i = 0; i < times; i++) {
      const controller = new AbortController();
      const waiting = waiter.lock(undefined, { signal: controller.signal }).catch((error: unknown) => error);
      await until(async () => (await readBlocked()) === 1, 10_000, 'the waiter to block');
      const aborted = performance.now();
      controller.abort();
      expect(await waiting).toMatchObject({ name: 'AbortError' });
      await until(async () => (await readBlocked()) === 0, 12_000, 'the aborted BLMOVE to end').catch(() => undefined);
      delays.push(Math.round(performance.now() - aborted));
    }
    return delays;
  }

  /**
   * Checks that aborted waits leave Redis at once, one at a time and four at once on four blocking
   * connections (printed), which also opens the connections the measured sequence will reuse.
   */
  async function warmUp(what: string, waiter: Semaphore, readBlocked: () => Promise<number>): Promise<void> {
    const delays = await unblockDelays(waiter, readBlocked, 3);
    const controller = new AbortController();
    const waits = Array.from({ length: 4 }, () =>
      waiter.lock(undefined, { signal: controller.signal }).catch(() => null),
    );
    await until(async () => (await readBlocked()) >= 4, 10_000, 'four warm-up waiters to block');
    const aborted = performance.now();
    controller.abort();
    await Promise.all(waits);
    await until(async () => (await readBlocked()) === 0, 12_000, 'the aborted BLMOVEs to end').catch(() => undefined);
    const together = Math.round(performance.now() - aborted);
    console.log(
      `${what}: an aborted blocked wait ended in Redis ${delays.join(', ')} ms after the abort; ` +
        `four aborted together ended within ${together} ms`,
    );
    for (const delay of [...delays, together]) expect(delay).toBeLessThan(1000);
    expect(await abortMany(waiter, 20)).toBe(0);
  }

  test('a standalone server: 1,000 aborts, no new connection', async () => {
    const { server, admin } = await servers.start();
    const name = uniqueName('cancel-conn');
    const keys = semaphoreKeys(name);
    const holder = servers.semaphore(name, { redis: await servers.connect(server.url) });
    const waiter = servers.semaphore(name, { redis: await servers.connect(server.url) });
    const held = await holder.lock(0);
    expect(held).toBe('0');
    await warmUp('standalone', waiter, () => blockedClients(admin));
    await until(async () => (await blockedClients(admin)) === 0, 5000, 'the warm-up aborts to settle');

    const aborts = 1000;
    const before = await info(admin, 'total_connections_received');
    const started = performance.now();
    expect(await abortMany(waiter, aborts)).toBe(0);
    const elapsed = performance.now() - started;
    const after = await info(admin, 'total_connections_received');
    const perThousand = ((after - before) * 1000) / aborts;
    console.log(
      `standalone: new connections per 1,000 aborts: ${perThousand} (${aborts} aborts in ${Math.round(elapsed)} ms)`,
    );
    expect(perThousand).toBeLessThanOrEqual(5);

    await until(
      async () => (await liveRegistrations(admin, keys.waiting)).length === 0,
      3000,
      'the aborted waits to settle',
    );
    await until(async () => (await inboxKeys(admin, name)).length === 0, 2000, 'no INBOX key').catch(() => undefined);
    expect(await inboxKeys(admin, name)).toEqual([]);
    const heldCensus = await settledCensus(() => takeCensus(admin, name), 1, {});
    expect(heldCensus.problems).toEqual([]);
    expect(Object.keys(heldCensus.census.grabbed)).toEqual(['0']);
    expect(tokensInPool(heldCensus.census)).toBe(1);

    expect(await holder.unlock(held!)).toBe(1);
    const token = await waiter.lock(5000);
    expect(token).toBe('0');
    expect(await waiter.unlock(token!)).toBe(1);
    const idle = await settledCensus(() => takeCensus(admin, name), 1, { idle: true, marksAllowed: true });
    expect(idle.problems).toEqual([]);
  });

  describe('a Redis Cluster of 3 masters', () => {
    let cluster: RedisCluster | undefined;
    const nodes: Client[] = [];
    const clusterClients: Array<ReturnType<typeof createCluster>> = [];
    afterAll(async () => {
      for (const client of clusterClients.splice(0)) {
        const c = client as unknown as { destroy?: () => unknown; disconnect: () => unknown };
        await Promise.resolve((c.destroy ?? c.disconnect).call(c)).catch(() => undefined);
      }
      for (const node of nodes.splice(0)) if (node.isOpen) await node.disconnect().catch(() => undefined);
      await cluster?.stop();
    });

    test('200 aborts: at most 5 new connections per 1,000 over all nodes, and the mutex still grants', async () => {
      cluster = await startRedisCluster({ masters: 3 });
      for (const node of cluster.nodes) {
        const client = createClient({ url: node.url }) as Client;
        client.on('error', () => undefined);
        await client.connect();
        nodes.push(client);
      }
      const client = createCluster({ rootNodes: cluster.rootNodes });
      client.on('error', () => undefined);
      await client.connect();
      clusterClients.push(client);

      const name = uniqueName('cancel-cluster');
      const keys = semaphoreKeys(name, { cluster: true });
      const slot = Number(await nodes[0]!.sendCommand(['CLUSTER', 'KEYSLOT', keys.available]));
      const owner = await cluster.ownerOf(slot);
      const ownerNode = nodes[cluster.nodes.findIndex((node) => node.port === owner.port)]!;
      // takeCensus builds key names from a name: the tagged name maps to the cluster keys.
      const tagged = `{${name}}`;
      const connections = async () =>
        (await Promise.all(nodes.map((node) => info(node, 'total_connections_received')))).reduce((a, b) => a + b, 0);

      const holder = new Semaphore(name, { redis: client as never });
      const waiter = new Semaphore(name, { redis: client as never });
      try {
        const held = await holder.lock(0);
        expect(held).toBe('0');
        await warmUp('cluster', waiter, () => blockedClients(ownerNode));
        await until(async () => (await blockedClients(ownerNode)) === 0, 5000, 'the warm-up aborts to settle');

        const aborts = 200;
        const before = await connections();
        const started = performance.now();
        expect(await abortMany(waiter, aborts)).toBe(0);
        const elapsed = performance.now() - started;
        const after = await connections();
        const perThousand = ((after - before) * 1000) / aborts;
        console.log(
          `cluster: new connections per 1,000 aborts: ${perThousand} (${after - before} over ${aborts} aborts in ${Math.round(elapsed)} ms)`,
        );
        expect(perThousand).toBeLessThanOrEqual(5);

        await until(
          async () => (await liveRegistrations(ownerNode, keys.waiting)).length === 0,
          3000,
          'the aborted waits to settle',
        );
        await until(async () => (await inboxKeys(ownerNode, tagged)).length === 0, 2000, 'no INBOX key').catch(
          () => undefined,
        );
        expect(await inboxKeys(ownerNode, tagged)).toEqual([]);
        const heldCensus = await settledCensus(() => takeCensus(ownerNode, tagged), 1, {});
        expect(heldCensus.problems).toEqual([]);
        expect(Object.keys(heldCensus.census.grabbed)).toEqual(['0']);

        // The mutex still grants: a blocked waiter gets the token the moment it is released.
        const waiting = waiter.lock(5000);
        await until(async () => (await blockedClients(ownerNode)) === 1, 5000, 'the waiter to block');
        const releasedAt = performance.now();
        expect(await holder.unlock(held!)).toBe(1);
        expect(await waiting).toBe('0');
        expect(performance.now() - releasedAt).toBeLessThan(3000);
        expect(await waiter.unlock('0')).toBe(1);
        const idle = await settledCensus(() => takeCensus(ownerNode, tagged), 1, { idle: true, marksAllowed: true });
        expect(idle.problems).toEqual([]);
      } finally {
        await Promise.all([holder.close(), waiter.close()]);
      }
    });
  });
});

describe('an abort before the BLMOVE is blocked in Redis', () => {
  const servers = new PrivateServers();
  afterEach(() => servers.close());

  test('aborted 0–5 ms after lock(), with and without a release racing it: nothing stranded or left registered', async () => {
    const { server, admin } = await servers.start();
    const name = uniqueName('cancel-early');
    const keys = semaphoreKeys(name);
    const holder = servers.semaphore(name, { redis: await servers.connect(server.url) });
    const waiter = servers.semaphore(name, { redis: await servers.connect(server.url) });
    const rounds = 120;
    const endings = { aborted: 0, releasedAround: 0 };
    const settleMs: number[] = [];
    let held = await holder.lock(0);
    expect(held).toBe('0');

    for (let round = 0; round < rounds; round++) {
      // Delays: -1 is an abort in the same tick as lock(); 0..5 ms after it otherwise.
      const delay = (round % 7) - 1;
      // Every other round the holder releases right after the abort: a token reaching the aborted
      // wait (its tryLock, its BLMOVE, its claim) must come back.
      const release = round % 2 === 1;
      const controller = new AbortController();
      const waiting = waiter.lock(undefined, { signal: controller.signal });
      if (delay >= 0) await sleep(delay);
      controller.abort();
      const releasing = release ? holder.unlock(held!) : undefined;
      await expect(waiting).rejects.toMatchObject({ name: 'AbortError' });
      endings.aborted++;
      if (releasing) {
        expect(await releasing).toBe(1);
        endings.releasedAround++;
        // A stranded token would keep this from resolving.
        held = await holder.lock(5000);
        expect(held).toBe('0');
      }
      const started = performance.now();
      await until(
        async () => (await liveRegistrations(admin, keys.waiting)).length === 0,
        3000,
        `round ${round}: WAITING to empty`,
      );
      settleMs.push(performance.now() - started);
      if (round % 10 === 9) {
        const { census, problems } = await settledCensus(() => takeCensus(admin, name), 1, {});
        expect({ round, problems, census: describeCensus(census) }).toMatchObject({ problems: [] });
        expect(Object.keys(census.grabbed)).toEqual(['0']);
      }
    }

    expect(await holder.unlock(held!)).toBe(1);
    await until(async () => (await inboxKeys(admin, name)).length === 0, 2000, 'no INBOX key').catch(() => undefined);
    expect(await inboxKeys(admin, name)).toEqual([]);
    const idle = await settledCensus(() => takeCensus(admin, name), 1, { idle: true, marksAllowed: true });
    expect(idle.problems).toEqual([]);
    expect(await waiter.lock(0)).toBe('0');
    await waiter.unlock('0');
    const marks = (await admin.zRange(keys.waiting, 0, -1)).filter((member) => member.startsWith('~')).length;
    console.log(
      `early aborts: ${endings.aborted} (${endings.releasedAround} with a release right behind), WAITING emptied ` +
        `within ${Math.round(Math.max(...settleMs))} ms at most; abandoned marks left ${marks}`,
    );
  });
});
