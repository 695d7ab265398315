import * as redis from 'redis';
import { Semaphore } from '../lib';
import { censusProblems, describeCensus, takeCensus } from './support/census';
import { checkHistory, type HistoryEvent } from './support/history';
import { startSentinelSetup, type SentinelSetup } from './support/redis-sentinel';
import { redisClientPackage, sleep, uniqueName, until, type Client } from './support/redis';

jest.setTimeout(120_000);

// node-redis v4 has no Sentinel client (the README gives the alternative); v5 and v6 do.
const createSentinel = (redis as unknown as { createSentinel?: (options: object) => SentinelClient }).createSentinel;
const describeSentinel = redisClientPackage() === 'redis' || !createSentinel ? describe.skip : describe;

interface SentinelClient {
  connect(): Promise<unknown>;
  close(): Promise<unknown>;
  destroy(): Promise<unknown>;
  on(event: string, listener: (...args: unknown[]) => void): unknown;
  sendCommand(isReadonly: boolean | undefined, args: string[]): Promise<unknown>;
}

const opened: SentinelClient[] = [];
async function connectSentinel(setup: SentinelSetup): Promise<SentinelClient> {
  // v5 waiters borrow primary connections from this pool (v6 duplicates the client instead).
  const client = createSentinel!({ name: setup.masterName, sentinelRootNodes: setup.sentinelRootNodes, masterPoolSize: 16 });
  client.on('error', () => undefined);
  await client.connect();
  opened.push(client);
  return client;
}

const direct: Client[] = [];
async function connectNode(port: number): Promise<Client> {
  const client = redis.createClient({ url: `redis://127.0.0.1:${port}` }) as Client;
  client.on('error', () => undefined);
  await client.connect();
  direct.push(client);
  return client;
}

async function closeClients(): Promise<void> {
  for (const client of opened.splice(0)) await client.close().catch(() => client.destroy().catch(() => undefined));
  for (const client of direct.splice(0)) if (client.isOpen) await client.disconnect().catch(() => undefined);
}

interface Load {
  readonly events: HistoryEvent[];
  readonly errors: string[];
  readonly lost: number;
  stop(): Promise<void>;
}

/** Like the cluster spec's load: `workers` lock → hold → unlock loops, errors recorded and retried. */
function startLoad(client: SentinelClient, name: string, options: { workers: number; resources: number; holdMs: number; staleClientTimeout: number }): Load {
  const events: HistoryEvent[] = [];
  const errors: string[] = [];
  let lost = 0;
  let running = true;
  const deadline = Date.now() + 100_000;
  const loops = Array.from({ length: options.workers }, async (_, w) => {
    const holder = `w${w}`;
    const sem = new Semaphore(name, {
      redis: client as never,
      resources: options.resources,
      waitSlice: 500,
      staleClientTimeout: options.staleClientTimeout,
    });
    try {
      while (running && Date.now() < deadline) {
        try {
          const token = await sem.lock(2000);
          if (token === null) continue;
          events.push({ holder, kind: 'acquired', token, at: Date.now() });
          await sleep(options.holdMs);
          events.push({ holder, kind: 'released', token, at: Date.now() });
          if ((await sem.unlock(token)) === false) lost++;
        } catch (error) {
          errors.push(String((error as { cause?: unknown }).cause ?? error));
          await sleep(100);
        }
      }
    } finally {
      await sem.close();
    }
  });
  return {
    events,
    errors,
    get lost() {
      return lost;
    },
    async stop() {
      running = false;
      await Promise.all(loops);
    },
  };
}

describeSentinel('Sentinel: a primary, a replica and three Sentinels', () => {
  let setup: SentinelSetup;
  let client: SentinelClient;

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
    const a = new Semaphore(name, { redis: client as never, waitSlice: 1000 });
    const b = new Semaphore(name, { redis: client as never, waitSlice: 1000 });
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
    const sem = new Semaphore(name, { redis: client as never, waitReplicas: { replicas: 1, timeoutMs: 2000 } });
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

  test('SENTINEL FAILOVER under load, with a waiter blocked on the old primary: the load goes on, no token lost', async () => {
    const name = uniqueName('sentinel-failover');
    const resources = 2;
    const staleClientTimeout = 2000;
    const load = startLoad(client, name, { workers: 6, resources, holdMs: 20, staleClientTimeout });
    await until(() => load.events.length > 40, 20_000, 'load to start');
    const { from, to, ms } = await setup.failover();
    const after = load.events.length;
    await until(() => load.events.length > after + 40, 60_000, 'load to go on after the failover');
    await load.stop();

    const sem = new Semaphore(name, { redis: client as never, resources, staleClientTimeout });
    await sleep(staleClientTimeout + 200);
    await sem.releaseStaleLocks();
    await sem.close();

    const report = checkHistory(load.events, Date.now());
    expect(report.anomalies).toEqual([]);
    const census = await takeCensus(await connectNode(to), name);
    expect({ problems: censusProblems(census, resources), census: describeCensus(census) }).toEqual({
      problems: [],
      census: expect.any(String),
    });
    expect(census.available.sort()).toEqual(['0', '1']);
    // A grant the old primary had not replicated can be forgotten: each overlap needs one, and its
    // holder's unlock resolved false.
    expect(report.tokenOverlaps.length).toBeLessThanOrEqual(load.lost);
    // eslint-disable-next-line no-console
    console.log(
      `SENTINEL FAILOVER ${from} → ${to} in ${ms} ms under load: ${report.acquisitions} acquisitions, max ${report.maxConcurrent} ` +
        `holders (resources ${resources}), ${report.tokenOverlaps.length} token overlaps, ${load.lost} unlocks found their grant gone, ` +
        `${load.errors.length} calls failed: ${[...new Set(load.errors)].slice(0, 3).join(' | ')}`,
    );
  });

  test('a waiter blocked on the primary when it is demoted gets the token on the new primary', async () => {
    const name = uniqueName('sentinel-blocked');
    const options = { redis: client as never, staleClientTimeout: 3000, waitSlice: 1000 };
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
      // eslint-disable-next-line no-console
      console.log(`holder's unlock after the failover resolved ${released}; the waiter got the token ${Date.now() - started} ms later`);
    } finally {
      await Promise.all([holder.close(), waiter.close()]);
    }
  });

  test('killing the primary under load: a replica is promoted, the load goes on, no token lost', async () => {
    const name = uniqueName('sentinel-kill');
    const resources = 2;
    const staleClientTimeout = 2000;
    const load = startLoad(client, name, { workers: 6, resources, holdMs: 20, staleClientTimeout });
    await until(() => load.events.length > 40, 20_000, 'load to start');
    const port = await setup.primaryPort();
    const victim = setup.servers.find((server) => server.port === port)!;
    const killedAt = Date.now();
    await victim.kill('SIGKILL');
    const promoted = await setup.waitForNewPrimary(port, 60_000);
    const promotedAfter = Date.now() - killedAt;
    const after = load.events.length;
    await until(() => load.events.length > after + 40, 60_000, 'load to go on after the failover');
    await load.stop();

    const sem = new Semaphore(name, { redis: client as never, resources, staleClientTimeout });
    await sleep(staleClientTimeout + 200);
    await sem.releaseStaleLocks();
    await sem.close();

    const report = checkHistory(load.events, Date.now());
    expect(report.anomalies).toEqual([]);
    const census = await takeCensus(await connectNode(promoted), name);
    expect({ problems: censusProblems(census, resources), census: describeCensus(census) }).toEqual({
      problems: [],
      census: expect.any(String),
    });
    expect(census.available.sort()).toEqual(['0', '1']);
    expect(report.tokenOverlaps.length).toBeLessThanOrEqual(load.lost);
    // eslint-disable-next-line no-console
    console.log(
      `primary ${port} killed, ${promoted} promoted after ${promotedAfter} ms: ${report.acquisitions} acquisitions, max ` +
        `${report.maxConcurrent} holders (resources ${resources}), ${report.tokenOverlaps.length} token overlaps, ${load.lost} ` +
        `unlocks found their grant gone, ${load.errors.length} calls failed: ${[...new Set(load.errors)].slice(0, 3).join(' | ')}`,
    );
  });
});
