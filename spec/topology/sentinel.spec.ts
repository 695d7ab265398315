import * as redis from 'redis';
import { createSentinel as createSentinel5 } from 'redis5';
import { createSentinel as createSentinel6 } from 'redis6';
import { Semaphore } from '../../lib';
import { takeCensus } from '../support/census';
import { startSentinelSetup, type SentinelSetup } from '../support/redis-sentinel';
import { redisClientPackage, sleep, uniqueName, until, type Client } from '../support/redis';
import {
  checkAfterFailover,
  describeLoad,
  loadGoesOnThenStop,
  loadStarted,
  startLoad,
  stopLoads,
} from '../support/topology-load';

jest.setTimeout(120_000);

// node-redis v4 has no Sentinel client (docs/DEPLOYMENT.md gives the alternative); v5 and v6 do. The
// client is made by the package REDIS_CLIENT names (the one `redis` maps to), typed as that
// package's, and handed to the semaphores with no cast: its type must be one the `redis` option takes.
const describeSentinel = redisClientPackage() === 'redis' ? describe.skip : describe;

const opened: Array<{ destroy(): unknown }> = [];
async function connectSentinel(setup: SentinelSetup) {
  // v5 waiters borrow primary connections from this pool (v6 duplicates the client instead).
  const options = { name: setup.masterName, sentinelRootNodes: setup.sentinelRootNodes, masterPoolSize: 16 };
  const client = redisClientPackage() === 'redis5' ? createSentinel5(options) : createSentinel6(options);
  client.on('error', () => undefined);
  await client.connect();
  opened.push(client);
  return client;
}

const direct: Client[] = [];
/** A client on one node; without `reconnect`, a connection to a node that is gone fails instead of waiting. */
async function connectNode(port: number, { reconnect = false } = {}): Promise<Client> {
  const socket = reconnect ? {} : { reconnectStrategy: false as const };
  const client = redis.createClient({ url: `redis://127.0.0.1:${port}`, socket }) as Client;
  client.on('error', () => undefined);
  await client.connect();
  direct.push(client);
  return client;
}

async function closeClients(): Promise<void> {
  // Destroy, not close: closing waits for commands queued for a primary that is gone.
  for (const client of opened.splice(0)) await Promise.resolve(client.destroy()).catch(() => undefined);
  for (const client of direct.splice(0)) if (client.isOpen) await client.disconnect().catch(() => undefined);
}

afterEach(stopLoads);

describeSentinel('Sentinel: a primary, a replica and three Sentinels', () => {
  let setup: SentinelSetup;
  let client: Awaited<ReturnType<typeof connectSentinel>>;

  beforeAll(async () => {
    setup = await startSentinelSetup({ replicas: 1 });
    client = await connectSentinel(setup);
  });
  afterAll(async () => {
    await closeClients();
    await setup?.stop();
  });

  test('the core contract through a Sentinel client', async () => {
    const name = uniqueName('sentinel');
    const a = new Semaphore(name, { redis: client, waitSlice: 1000 });
    const b = new Semaphore(name, { redis: client, waitSlice: 1000 });
    try {
      expect(await a.lock(0)).toBe('0');
      expect(await b.lock(0)).toBeNull();
      const waiting = b.lock(10_000);
      await sleep(300);
      await a.unlock();
      expect(await waiting).toBe('0');
      expect(await b.unlock()).toBe(1);
      const primary = await connectNode(await setup.primaryPort());
      expect(await primary.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1)).toEqual(['0']);
    } finally {
      await Promise.all([a.close(), b.close()]);
    }
  });

  test('waitReplicas through the Sentinel client: a lock resolves once the replica has the grant', async () => {
    const name = uniqueName('sentinel-wait');
    const sem = new Semaphore(name, { redis: client, waitReplicas: { replicas: 1, timeoutMs: 2000 } });
    try {
      const token = await sem.lock();
      const primaryPort = await setup.primaryPort();
      const replica = await connectNode(setup.servers.find((server) => server.port !== primaryPort)!.port);
      expect(await replica.hKeys(`SEMAPHORE:${name}:GRABBED`)).toEqual([token]);
      expect(await sem.unlock()).toBe(1);
      expect(await replica.hKeys(`SEMAPHORE:${name}:GRABBED`)).toEqual([]);
    } finally {
      await sem.close();
    }
  });

  /**
   * A failover under load: `fault` happens while 6 workers contend for 2 tokens and tells the new
   * primary's port and what happened; then the load must go on and every check after a failover hold.
   */
  async function failoverUnderLoad(
    prefix: string,
    fault: () => Promise<{ primary: number; what: string }>,
  ): Promise<void> {
    const name = uniqueName(prefix);
    const resources = 2;
    const staleClientTimeout = 2000;
    const load = startLoad(client, name, { workers: 6, resources, holdMs: 20, staleClientTimeout });
    await loadStarted(load);
    const { primary, what } = await fault();
    await loadGoesOnThenStop(load, 60_000, 'failover');
    const census = async () => takeCensus(await connectNode(primary), name);
    const report = await checkAfterFailover(client, name, load, { resources, staleClientTimeout, census });
    console.log(`${what} under load: ${describeLoad(report, load, resources)}`);
  }

  test('SENTINEL FAILOVER under load, with a waiter blocked on the old primary: the load goes on, no token lost', async () => {
    await failoverUnderLoad('sentinel-failover', async () => {
      const { from, to, ms } = await setup.failover();
      return { primary: to, what: `SENTINEL FAILOVER ${from} → ${to} in ${ms} ms` };
    });
  });

  test('a waiter blocked on the primary when it is demoted gets the token on the new primary', async () => {
    const name = uniqueName('sentinel-blocked');
    const options = { redis: client, staleClientTimeout: 3000, waitSlice: 1000 };
    const holder = new Semaphore(name, options);
    const waiter = new Semaphore(name, options);
    try {
      const token = await holder.lock();
      const waiting = waiter.lock(40_000);
      const primary = await connectNode(await setup.primaryPort());
      await until(async () => /blocked_clients:[1-9]/.test(await primary.info('clients')), 5000, 'the waiter to block');
      await setup.failover();
      // The unlock may reach the old primary in the instant before Sentinel demotes it, and be
      // lost with it (asynchronous failover); then the stale timeout returns the token.
      const released = await holder.unlock(token);
      const started = Date.now();
      expect(await waiting).toBe(token);
      console.log(
        `holder's unlock after the failover resolved ${released}; the waiter got the token ${Date.now() - started} ms later`,
      );
    } finally {
      await Promise.all([holder.close(), waiter.close()]);
    }
  });

  test('killing the primary under load: a replica is promoted, the load goes on, no token lost', async () => {
    await failoverUnderLoad('sentinel-kill', async () => {
      const port = await setup.primaryPort();
      const victim = setup.servers.find((server) => server.port === port)!;
      const killedAt = Date.now();
      await victim.kill('SIGKILL');
      const promoted = await setup.waitForNewPrimary(port, 60_000);
      return {
        primary: promoted,
        what: `primary ${port} killed, ${promoted} promoted after ${Date.now() - killedAt} ms`,
      };
    });
  });
});

// The alternative without a Sentinel client (node-redis v4, or by choice): a standalone client on the
// primary. After a failover it reaches a replica: calls fail with READONLY, and none is ever taken
// for a grant. Runs with every major.
describe('a standalone client on the primary (no Sentinel client) through a failover', () => {
  let setup: SentinelSetup;

  beforeAll(async () => {
    setup = await startSentinelSetup({ replicas: 1 });
  });
  afterAll(async () => {
    await closeClients();
    await setup?.stop();
  });

  test('calls fail with READONLY once the primary is demoted; a client on the new primary goes on', async () => {
    const name = uniqueName('standalone-demoted');
    const before = await setup.primaryPort();
    // Reconnecting, as an application's client would: Sentinel closes its connection when it
    // converts the old primary, and it comes back to the same address.
    const old = await connectNode(before, { reconnect: true });
    const sem = new Semaphore(name, { redis: old, resources: 2 });
    try {
      const token = await sem.lock(0);
      expect(token).toBe('0');
      const { to } = await setup.failover();
      // Until Sentinel converts the old primary into a replica (it waits several seconds after the
      // failover before it does), the client keeps writing there, and those writes are lost with it.
      // Then it refuses the writes: a failed call, not a grant.
      // Sentinel also kills the old primary's client connections as it converts it, so a call in
      // flight at that moment fails with a reset; the client reconnects and the next call is refused.
      let error: unknown;
      const resets: string[] = [];
      const started = Date.now();
      while (error === undefined && Date.now() - started < 40_000) {
        error = await sem.lock(0).then(
          () => undefined,
          (e: unknown) => e,
        );
        const cause = String((error as { cause?: unknown } | undefined)?.cause ?? '');
        if (error !== undefined && /ECONNRESET|closed|EPIPE/i.test(cause) && !/READONLY/.test(cause)) {
          resets.push(cause);
          error = undefined;
          await sleep(100);
        } else if (error === undefined) {
          await sem.unlock().catch(() => undefined);
          await sleep(100);
        }
      }
      expect(resets.length).toBeLessThanOrEqual(3);
      console.log(`the old primary refused writes ${Date.now() - started} ms after the failover completed`);
      expect(error).toMatchObject({ name: 'SemaphoreRedisError' });
      expect(String((error as { cause?: unknown }).cause)).toMatch(/READONLY/);
      // Recreated on the new primary (SENTINEL GET-MASTER-ADDR-BY-NAME), it works.
      const fresh = new Semaphore(name, {
        redis: await connectNode(to),
        resources: 2,
        staleClientTimeout: 1000,
      });
      await sleep(1100);
      expect(await fresh.releaseStaleLocks()).toBeGreaterThanOrEqual(0);
      expect(await fresh.lock(0)).not.toBeNull();
      await fresh.close();
    } finally {
      await sem.close();
    }
  });
});
