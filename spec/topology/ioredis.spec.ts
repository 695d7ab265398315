import { Cluster as IoCluster5, Redis as IoRedis5 } from 'ioredis';
import { Cluster as IoCluster6, Redis as IoRedis6 } from 'ioredis6';
import { LockTimeoutError, Semaphore, SemaphoreClosedError, type SupportedRedisClient } from '../../lib';
import { semaphoreKeys } from '../../lib/redis/keys';
import { censusProblems, takeCensus } from '../support/census';
import { startRedisCluster, type RedisCluster } from '../support/redis-cluster';
import {
  blockedClients,
  closeAll,
  connectClient,
  connectIoRedis,
  ioredisPackage,
  redisUrl,
  sleep,
  uniqueName,
  until,
  type Client,
} from '../support/redis';

/**
 * What is specific to an ioredis client (REDIS_CLIENT=ioredis: v5, ioredis6: v6; `npm run
 * test:ioredis`): the options refused at construction, and the paths where ioredis' connection
 * handling differs from node-redis' — a blocked wait cancelled, a blocking connection killed, the
 * reply of a command lost with its connection, and a Cluster. The API specs run on ioredis too.
 */
const major = ioredisPackage() === 'ioredis' ? 5 : 6;
// One constructor type for both majors (their option types differ in v6 additions only).
const IoRedis = (major === 5 ? IoRedis5 : IoRedis6) as typeof IoRedis5;
const IoCluster = (major === 5 ? IoCluster5 : IoCluster6) as typeof IoCluster5;

jest.setTimeout(60_000);

let admin: Client;
const opened: Semaphore[] = [];
beforeAll(async () => {
  admin = await connectClient();
});
afterEach(async () => {
  await Promise.all(opened.splice(0).map((sem) => sem.close()));
});
afterAll(closeAll);

function open(redis: SupportedRedisClient, name = uniqueName('ioredis'), resources = 1): Semaphore {
  const sem = new Semaphore(name, { redis, resources });
  opened.push(sem);
  return sem;
}

/** No token lost, duplicated or stranded, nobody holding or waiting (an abandoned mark may stay). */
async function expectClean(name: string, resources = 1): Promise<void> {
  let problems: string[] = [];
  await until(
    async () =>
      (problems = censusProblems(await takeCensus(admin, name), resources, { idle: true, marksAllowed: true }))
        .length === 0,
    10_000,
    'a clean census',
  ).catch(() => expect(problems).toEqual([]));
}

/** The id of the connection blocked in BLMOVE (CLIENT LIST): each test blocks one at a time. */
async function blockedConnection(): Promise<string | undefined> {
  const list = String(await admin.sendCommand(['CLIENT', 'LIST']));
  return /^id=(\d+) .*cmd=blmove/m.exec(list)?.[1];
}

describe(`ioredis v${major}`, () => {
  describe('construction', () => {
    test('anything that is neither a node-redis nor an ioredis client is a TypeError naming both', () => {
      for (const redis of [{}, { sendCommand: () => null }, { call: () => null }, new Map(), () => null, 'redis://x']) {
        expect(() => new Semaphore('x', { redis: redis as never })).toThrow(TypeError);
        expect(() => new Semaphore('x', { redis: redis as never })).toThrow(
          /node-redis client .* or an ioredis client/,
        );
      }
    });

    test('a keyPrefix is refused: the scripts build key names it would not reach', () => {
      const client = new IoRedis(redisUrl(), {
        lazyConnect: true,
        keyPrefix: 'app:',
        autoResendUnfulfilledCommands: false,
      });
      expect(() => new Semaphore('x', { redis: client })).toThrow(TypeError);
      expect(() => new Semaphore('x', { redis: client })).toThrow(/keyPrefix "app:"/);
      client.disconnect();
    });

    test("ioredis' resend of unanswered commands is refused: a script could run twice", () => {
      const client = new IoRedis(redisUrl(), { lazyConnect: true });
      expect(() => new Semaphore('x', { redis: client })).toThrow(/autoResendUnfulfilledCommands: false/);
      client.disconnect();
    });

    test('a Cluster must not resend a command whose connection closed (retryDelayOnFailover: 0)', () => {
      const prefixed = new IoCluster([{ host: '127.0.0.1', port: 1 }], {
        lazyConnect: true,
        retryDelayOnFailover: 0,
        keyPrefix: 'p:',
      });
      expect(() => new Semaphore('x', { redis: prefixed })).toThrow(/keyPrefix/);
      const resending = new IoCluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
      expect(() => new Semaphore('x', { redis: resending })).toThrow(/retryDelayOnFailover: 0/);
      const fine = new IoCluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, retryDelayOnFailover: 0 });
      expect(() => new Semaphore('x', { redis: fine })).not.toThrow();
      for (const cluster of [prefixed, resending, fine]) cluster.disconnect();
    });
  });

  describe('standalone', () => {
    test('a blocked waiter is served when the holder unlocks, and one cancelled by abort leaves Redis at once', async () => {
      const client = await connectIoRedis();
      const holder = open(client);
      const waiter = open(client, holder.name);
      const token = await holder.lock(0);
      expect(token).toBe('0');

      const controller = new AbortController();
      const aborted = waiter.lock(undefined, { signal: controller.signal });
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block');
      const started = performance.now();
      controller.abort();
      await expect(aborted).rejects.toThrow();
      await until(async () => (await blockedClients(admin)) === 0, 2000, 'the aborted BLMOVE to end');
      expect(performance.now() - started).toBeLessThan(2000);

      const served = waiter.lock(10_000);
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block again');
      expect(await holder.unlock(token!)).toBe(1);
      const next = await served;
      expect(next).toBe('0');
      await waiter.unlock(next!);
      await expectClean(holder.name);
    });

    test('close() while a lock waits rejects it with SemaphoreClosedError and ends its BLMOVE', async () => {
      const client = await connectIoRedis();
      const holder = open(client);
      const waiter = new Semaphore(holder.name, { redis: client });
      await holder.lock(0);
      const waiting = waiter.lock();
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block');
      await waiter.close();
      await expect(waiting).rejects.toBeInstanceOf(SemaphoreClosedError);
      await until(async () => (await blockedClients(admin)) === 0, 2000, 'the BLMOVE to end');
      expect(client.status).toBe('ready'); // the caller's client stays open
    });

    test('a blocking connection killed under a waiter (CLIENT KILL): the waiter recovers on a new one and is served', async () => {
      const client = await connectIoRedis();
      const holder = open(client);
      const waiter = open(client, holder.name);
      const token = await holder.lock(0);
      const served = waiter.lock(20_000);
      await until(async () => (await blockedConnection()) !== undefined, 5000, 'the waiter to block');
      await admin.sendCommand(['CLIENT', 'KILL', 'ID', (await blockedConnection())!]);
      // It blocks again, on a new connection.
      await until(async () => (await blockedClients(admin)) >= 1, 10_000, 'the waiter to block again');
      await holder.unlock(token!);
      expect(await served).toBe('0');
      await waiter.unlock('0');
      await expectClean(holder.name);
    });

    test('the main connection killed while a command waits for its reply: the call settles (ioredis would never settle it) and nothing is lost', async () => {
      const client = await connectIoRedis();
      const sem = open(client, uniqueName('ioredis'), 2);
      const token = await sem.lock(0);
      const id = String(await client.call('CLIENT', 'ID'));
      // Writes wait while paused; the connection dies with the unlock unanswered (it never ran).
      await admin.sendCommand(['CLIENT', 'PAUSE', '2000', 'WRITE']);
      try {
        const unlocked = sem.unlock(token!).then(
          (count) => ({ count }),
          (error: unknown) => ({ error }),
        );
        await sleep(100);
        await admin.sendCommand(['CLIENT', 'KILL', 'ID', id]);
        await admin.sendCommand(['CLIENT', 'UNPAUSE']);
        let timer: NodeJS.Timeout | undefined;
        const outcome = await Promise.race([
          unlocked,
          new Promise((resolve) => (timer = setTimeout(resolve, 8000, 'unsettled'))),
        ]);
        clearTimeout(timer);
        expect(outcome).not.toBe('unsettled');
      } finally {
        await admin.sendCommand(['CLIENT', 'UNPAUSE']);
      }
      await until(() => client.status === 'ready', 5000, 'ioredis to reconnect');
      // Whatever the unlock reported, the token comes back (its retry, or its lease) and no other is touched.
      await until(async () => !(await sem.isLocked(token!)), 40_000, 'the token to come back');
      await expectClean(sem.name, 2);
    });
  });

  describe('Cluster (3 masters on loopback)', () => {
    let cluster: RedisCluster | undefined;
    const clients: Array<{ disconnect(): void }> = [];
    /** Closed before the nodes stop: a client left reconnecting to a stopped node would wait forever to quit. */
    const nodeClients: Client[] = [];
    beforeAll(async () => {
      cluster = await startRedisCluster({ masters: 3 });
    }, 60_000);
    afterAll(async () => {
      for (const client of clients) client.disconnect();
      for (const client of nodeClients) await client.disconnect().catch(() => undefined);
      await cluster?.stop();
    });

    async function connectCluster() {
      const client = new IoCluster(
        cluster!.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
        { retryDelayOnFailover: 0, lazyConnect: true },
      );
      client.on('error', () => undefined);
      await client.connect();
      clients.push(client);
      return client;
    }

    test('lock, a wait on the slot owner served by unlock, an aborted wait, the census', async () => {
      const client = await connectCluster();
      const name = uniqueName('io-cluster');
      const holder = open(client, name);
      const waiter = open(client, name);
      const keys = semaphoreKeys(name, { cluster: true });
      const slot = Number(await client.call('CLUSTER', 'KEYSLOT', keys.available));
      const owner = await cluster!.ownerOf(slot);
      const ownerNode = await connectClient(`redis://127.0.0.1:${owner.port}`);
      nodeClients.push(ownerNode);

      const token = await holder.lock(0);
      expect(token).toBe('0');
      await expect(waiter.lock(0, () => 'never')).rejects.toBeInstanceOf(LockTimeoutError);

      const controller = new AbortController();
      const aborted = waiter.lock(undefined, { signal: controller.signal });
      await until(async () => (await blockedClients(ownerNode)) >= 1, 5000, 'the waiter to block on the slot owner');
      controller.abort();
      await expect(aborted).rejects.toThrow();
      await until(async () => (await blockedClients(ownerNode)) === 0, 2000, 'the aborted BLMOVE to end');

      const served = waiter.lock(10_000);
      await until(async () => (await blockedClients(ownerNode)) >= 1, 5000, 'the waiter to block again');
      await holder.unlock(token!);
      expect(await served).toBe('0');
      await waiter.unlock('0');
      // takeCensus builds key names from a name: the tagged name maps to the cluster keys.
      await until(
        async () => censusProblems(await takeCensus(ownerNode, `{${name}}`), 1, { idle: true }).length === 0,
        10_000,
        'a clean census',
      );
    });
  });
});
