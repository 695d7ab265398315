import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Cluster as IoCluster5, Redis as IoRedis5 } from 'ioredis';
import { Cluster as IoCluster6, Redis as IoRedis6 } from 'ioredis6';
import { LockTimeoutError, Semaphore, SemaphoreClosedError, type SupportedRedisClient } from '../../lib';
import { semaphoreKeys } from '../../lib/redis/keys';
import { censusProblems, takeCensus } from '../support/census';
import { FaultProxy, type Filter } from '../support/proxy';
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

    test('an ioredis keyPrefix with a brace, glob character or space is refused: the keys could not be scanned or tagged', () => {
      for (const keyPrefix of ['{app}:', 'app*:', 'my app:']) {
        const client = new IoRedis(redisUrl(), { lazyConnect: true, keyPrefix });
        expect(() => new Semaphore('x', { redis: client })).toThrow(TypeError);
        expect(() => new Semaphore('x', { redis: client })).toThrow(/ioredis client's `keyPrefix`/);
        client.disconnect();
      }
    });

    test('a default Cluster (retryDelayOnFailover left at 100) and one with a keyPrefix are accepted', () => {
      const resending = new IoCluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true });
      const prefixed = new IoCluster([{ host: '127.0.0.1', port: 1 }], { lazyConnect: true, keyPrefix: 'p:' });
      for (const cluster of [resending, prefixed]) {
        expect(() => new Semaphore('x', { redis: cluster })).not.toThrow();
        cluster.disconnect();
      }
    });
  });

  describe('clients as applications make them', () => {
    /** The ids of the connections named `name` (CLIENT LIST), and which of them block in BLMOVE. */
    async function connectionsNamed(name: string): Promise<Array<{ id: string; blocked: boolean }>> {
      const list = String(await admin.sendCommand(['CLIENT', 'LIST']));
      return [...list.matchAll(/^id=(\d+) .*? name=(\S*) .*? cmd=(\S+)/gm)]
        .filter((match) => match[2] === name)
        .map((match) => ({ id: match[1]!, blocked: match[3] === 'blmove' }));
    }

    /** A client made as `new Redis(url, options)` with ioredis' defaults (autoResendUnfulfilledCommands on), closed after the test. */
    function defaultClient(connectionName: string, options: { keyPrefix?: string } = {}) {
      const client = new IoRedis(redisUrl(), { connectionName, ...options });
      client.on('error', () => undefined);
      made.push(client);
      return client;
    }
    const made: Array<InstanceType<typeof IoRedis>> = [];
    afterEach(() => {
      for (const client of made.splice(0)) client.disconnect();
    });

    test('a default client (autoResendUnfulfilledCommands on): every semaphore of it shares one connection the library makes, closed with the client', async () => {
      const connectionName = uniqueName('default').replace(/:/g, '-');
      const client = defaultClient(connectionName);
      await until(() => client.status === 'ready', 5000, 'the client to connect');
      const name = uniqueName('ioredis');
      const semaphores = [open(client, name, 2), open(client, name, 2), open(client, uniqueName('ioredis'))];
      // No connection before the first call.
      expect((await connectionsNamed(connectionName)).length).toBe(1);
      const tokens = (await Promise.all(semaphores.map((sem) => sem.lock(0)))) as string[];
      expect([...tokens].sort()).toEqual(['0', '0', '1']);
      // The caller's and one more, for all three semaphores.
      expect((await connectionsNamed(connectionName)).length).toBe(2);
      // A wait on a connection of its own, served by an unlock.
      const served = semaphores[1]!.lock(10_000);
      await until(async () => (await connectionsNamed(connectionName)).some((c) => c.blocked), 5000, 'a waiter');
      expect(await semaphores[0]!.unlock(tokens[0]!)).not.toBe(false);
      expect(await served).toBe(tokens[0]);
      for (const [index, token] of [tokens[0], tokens[1], tokens[2]].entries()) {
        expect(await semaphores[Math.max(1, index)]!.unlock(token!)).not.toBe(false);
      }
      await expectClean(name, 2);
      await Promise.all(opened.splice(0).map((sem) => sem.close()));
      await client.quit();
      await until(async () => (await connectionsNamed(connectionName)).length === 0, 5000, 'every connection to close');
    });

    test('a default client: a script that ran but whose reply was lost with its connection is not sent again (signal would push its job twice)', async () => {
      const proxy = await FaultProxy.start(Number(new URL(redisUrl()).port));
      try {
        const client = new IoRedis(proxy.url);
        client.on('error', () => undefined);
        made.push(client);
        const name = uniqueName('ioredis');
        const sem = open(client, name);
        await sem.signal('warm'); // the semaphore exists, signal's script is loaded
        const library: Filter = (connection) => /\$(7\r\nEVALSHA|5\r\nFCALL)\r\n/i.test(connection.sent);
        expect(proxy.dropReplies(library)).toBe(1);
        const signalled = sem.signal('job').then(
          () => 'resolved',
          (error: unknown) => error,
        );
        const available = () => admin.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1);
        await until(async () => (await available()).includes('job'), 5000, 'signal to run');
        expect(proxy.cut(library)).toBe(1);
        expect(await signalled).toBeInstanceOf(Error); // its outcome is unknown to the caller: it ran
        // Reconnected (a call goes through), the client sent nothing again: the job is there once.
        expect(await sem.isLocked()).toBe(false);
        await sleep(300);
        expect((await available()).filter((token) => token === 'job')).toEqual(['job']);
      } finally {
        await Promise.all(opened.splice(0).map((sem) => sem.close()));
        await proxy.close();
      }
    });

    test('an application with ioredis and no node-redis installed loads the package and uses it (both are optional peers)', async () => {
      const root = join(__dirname, '..', '..');
      expect(existsSync(join(root, 'dist', 'index.js'))).toBe(true); // npm run build
      const app = mkdtempSync(join(tmpdir(), 'rts-ioredis-only-'));
      try {
        // The package as installed (a copy: a link would find node-redis beside the checkout), ioredis and nanoid beside it.
        const installed = join(app, 'node_modules', 'redis-token-semaphore');
        mkdirSync(installed, { recursive: true });
        cpSync(join(root, 'dist'), join(installed, 'dist'), { recursive: true });
        cpSync(join(root, 'package.json'), join(installed, 'package.json'));
        const beside: Array<[string, string]> = [
          ['ioredis', ioredisPackage()!],
          ['nanoid', 'nanoid'],
        ];
        for (const [as, name] of beside)
          symlinkSync(join(root, 'node_modules', name), join(app, 'node_modules', as), 'dir');
        writeFileSync(
          join(app, 'main.js'),
          `const { Redis } = require('ioredis');
const { Semaphore } = require('redis-token-semaphore');
(async () => {
  let missing = 'redis installed';
  try { require.resolve('redis'); } catch { missing = 'no redis'; }
  const redis = new Redis(process.argv[2]);
  const sem = new Semaphore(process.argv[3], { redis });
  const token = await sem.lock(0);
  await sem.unlock(token);
  await sem.close();
  await redis.quit();
  console.log(missing, token);
})();`,
        );
        const { stdout } = await promisify(execFile)(process.execPath, ['main.js', redisUrl(), uniqueName('ioredis')], {
          cwd: app,
        });
        expect(stdout.trim()).toBe('no redis 0');
      } finally {
        rmSync(app, { recursive: true, force: true });
      }
    });

    test("an ioredis keyPrefix is honoured: every key carries it, the scripts' and the raw ones alike, and a semaphore with it as part of `keyPrefix` is the same one", async () => {
      const client = defaultClient(uniqueName('prefix').replace(/:/g, '-'), { keyPrefix: 'app:' });
      const plain = await connectIoRedis();
      const name = uniqueName('ioredis');
      const prefixed = open(client, name);
      // What the Ruby gem under redis-namespace 'app' and the CLI's --prefix app:SEMAPHORE: name.
      const same = open(plain, name);
      const sameByPrefix = new Semaphore(name, { redis: plain, keyPrefix: 'app:SEMAPHORE:' });
      opened.push(sameByPrefix);

      const token = await prefixed.lock(0);
      expect(token).toBe('0');
      expect(await admin.hExists(`app:SEMAPHORE:${name}:GRABBED`, '0')).toBeTruthy();
      expect(await admin.exists(`SEMAPHORE:${name}:GRABBED`)).toBe(0);
      expect(await sameByPrefix.isLocked('0')).toBe(true);
      expect(await same.lock(0)).toBe('0'); // another semaphore: unprefixed keys

      // Waits block on the prefixed list (a raw BLMOVE), on either client, and are served by unlocks through the other.
      const served = sameByPrefix.lock(10_000);
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block');
      expect(await prefixed.unlock('0')).not.toBe(false);
      expect(await served).toBe('0');
      const servedBack = prefixed.lock(10_000);
      await until(async () => (await blockedClients(admin)) >= 1, 5000, 'the waiter to block');
      expect(await sameByPrefix.unlock('0')).not.toBe(false);
      expect(await servedBack).toBe('0');
      expect(await prefixed.unlock('0')).not.toBe(false);
      await same.unlock('0');
      await until(
        async () =>
          censusProblems(await takeCensus(admin, name, { keyPrefix: 'app:SEMAPHORE:' }), 1, { idle: true }).length ===
          0,
        10_000,
        'a clean census under the prefix',
      );
      expect(await prefixed.delete()).toBeUndefined();
      expect(await admin.keys(`app:SEMAPHORE:${name}:*`)).toEqual([]);
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

    async function connectCluster(options: { retryDelayOnFailover?: number; keyPrefix?: string }) {
      const client = new IoCluster(
        cluster!.nodes.map((node) => ({ host: '127.0.0.1', port: node.port })),
        { ...options, lazyConnect: true },
      );
      client.on('error', () => undefined);
      await client.connect();
      clients.push(client);
      return client;
    }

    test.each<[string, { retryDelayOnFailover?: number; keyPrefix?: string }]>([
      ['retryDelayOnFailover: 0', { retryDelayOnFailover: 0 }],
      ["ioredis' defaults", {}],
      ['a keyPrefix', { keyPrefix: 'app:' }],
    ])('lock, a wait on the slot owner served by unlock, an aborted wait, the census (%s)', async (_, options) => {
      const client = await connectCluster(options);
      const name = uniqueName('io-cluster');
      const holder = open(client, name);
      const waiter = open(client, name);
      const keyPrefix = `${options.keyPrefix ?? ''}SEMAPHORE:`;
      const keys = semaphoreKeys(name, { cluster: true, keyPrefix });
      const slot = Number(await client.call('CLUSTER', 'KEYSLOT', keys.available)); // a key argument: unprefixed
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
        async () =>
          censusProblems(await takeCensus(ownerNode, `{${name}}`, { keyPrefix }), 1, { idle: true }).length === 0,
        10_000,
        'a clean census',
      );
    });
  });
});
