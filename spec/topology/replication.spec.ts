import { createClient } from 'redis';
import { ReplicationError, Semaphore } from '../../lib';
import { startRedisServer, type RedisServer } from '../support/redis-server';
import { sleep, uniqueName, until, type Client } from '../support/redis';

// waitReplicas on a real primary and replica (and on a primary with none, for shortfalls).
let primary: RedisServer;
let replica: RedisServer;
let lonely: RedisServer;
const clients: Client[] = [];
async function connect(server: RedisServer): Promise<Client> {
  const client = createClient({ url: server.url }) as Client;
  client.on('error', () => undefined);
  await client.connect();
  clients.push(client);
  return client;
}

beforeAll(async () => {
  primary = await startRedisServer();
  lonely = await startRedisServer();
  replica = await startRedisServer(['--replicaof', '127.0.0.1', String(primary.port)]);
  const check = await connect(replica);
  await until(async () => (await check.info('replication')).includes('master_link_status:up'), 10_000, 'replication');
});
afterAll(async () => {
  await Promise.all(clients.map((client) => (client.isOpen ? client.disconnect().catch(() => undefined) : undefined)));
  await Promise.all([replica, primary, lonely].map((server) => server?.stop()));
});

test('with a replica that keeps up, lock and unlock resolve once the replica has them', async () => {
  const redis = await connect(primary);
  const onReplica = await connect(replica);
  const name = uniqueName('wait');
  const sem = new Semaphore(name, {
    redis: redis as never,
    resources: 2,
    waitReplicas: { replicas: 1, timeoutMs: 2000 },
  });
  try {
    const token = await sem.lock();
    // No sleep: WAIT returned only once the replica had the grant.
    expect(await onReplica.hKeys(`SEMAPHORE:${name}:GRABBED`)).toEqual([token]);
    expect(await sem.unlock(token!)).toBe(2);
    expect(await onReplica.hKeys(`SEMAPHORE:${name}:GRABBED`)).toEqual([]);
    expect((await onReplica.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1)).sort()).toEqual(['0', '1']);

    // The blocking path: the WAIT runs on the waiter's own connection, where its claim wrote.
    const first = await sem.lock();
    const second = await sem.lock();
    const waiting = sem.lock(5000);
    await sleep(200);
    await sem.unlock(first!);
    const handed = await waiting;
    expect(handed).toBe(first);
    expect((await onReplica.hKeys(`SEMAPHORE:${name}:GRABBED`)).sort()).toEqual([first, second].sort());
  } finally {
    await sem.close();
  }
});

test('too few replicas: lock rejects with ReplicationError after timeoutMs and gives the token back', async () => {
  const redis = await connect(lonely);
  const sem = new Semaphore(uniqueName('short'), {
    redis: redis as never,
    resources: 2,
    waitReplicas: { replicas: 1, timeoutMs: 200 },
  });
  try {
    const started = Date.now();
    const error = await sem.lock().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ReplicationError);
    expect(error).toMatchObject({ name: 'ReplicationError', operation: 'lock', replicas: 1, acknowledged: 0 });
    expect(Date.now() - started).toBeGreaterThanOrEqual(150);
    expect(await sem.availableCount()).toBe(2);
    expect(await sem.isLocked()).toBe(false);
    // The callback form does not run its callback.
    const fn = jest.fn();
    await expect(sem.lock(fn)).rejects.toBeInstanceOf(ReplicationError);
    expect(fn).not.toHaveBeenCalled();
  } finally {
    await sem.close();
  }
});

test('too few replicas on the blocking path: the waiter rejects and the token goes back', async () => {
  const redis = await connect(lonely);
  const name = uniqueName('short-blocked');
  const plain = new Semaphore(name, { redis: redis as never });
  const careful = new Semaphore(name, { redis: redis as never, waitReplicas: { replicas: 1, timeoutMs: 200 } });
  try {
    const token = await plain.lock();
    const waiting = careful.lock(5000).catch((e: unknown) => e);
    await sleep(200);
    await plain.unlock(token!);
    expect(await waiting).toMatchObject({ name: 'ReplicationError', operation: 'lock' });
    expect(await plain.availableCount()).toBe(1);
    expect(await plain.lock(0)).toBe(token);
  } finally {
    await Promise.all([plain.close(), careful.close()]);
  }
});

test("onShortfall: 'warn' resolves as usual and emits a ReplicationError warning", async () => {
  const redis = await connect(lonely);
  const emitWarning = jest.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
  const lenient = new Semaphore(uniqueName('warn'), {
    redis: redis as never,
    waitReplicas: { replicas: 1, timeoutMs: 100, onShortfall: 'warn' },
  });
  try {
    expect(await lenient.lock()).toBe('0');
    expect(await lenient.unlock()).toBe(1);
    expect(emitWarning.mock.calls.map(([message, type]) => [String(message).split(' ')[0], type])).toEqual([
      ['lock', 'ReplicationError'],
      ['unlock', 'ReplicationError'],
    ]);
    expect(String(emitWarning.mock.calls[1]![0])).toMatch(/^unlock on semaphore .* reached 0 of 1 replicas/);
  } finally {
    emitWarning.mockRestore();
    await lenient.close();
  }
});

test('an unlock the replica does not acknowledge (replica frozen) rejects, with the token back on the primary', async () => {
  const redis = await connect(primary);
  const strict = new Semaphore(uniqueName('frozen'), {
    redis: redis as never,
    waitReplicas: { replicas: 1, timeoutMs: 300 },
  });
  try {
    const token = await strict.lock();
    expect(token).toBe('0');
    process.kill(replica.pid, 'SIGSTOP');
    await expect(strict.unlock(token!)).rejects.toMatchObject({
      name: 'ReplicationError',
      operation: 'unlock',
      acknowledged: 0,
    });
    expect(await strict.isLocked()).toBe(false);
    expect(await strict.isLocked('0')).toBe(false);
  } finally {
    process.kill(replica.pid, 'SIGCONT');
    await strict.close();
  }
});

test('waitReplicas is validated', () => {
  // The shape of a node-redis client (anything else is refused first): the checks run before any command.
  const redis = { sendCommand: () => Promise.resolve(null), duplicate() {}, connect() {}, on() {} } as never;
  const options = (waitReplicas: unknown) => () => new Semaphore('x', { redis, waitReplicas: waitReplicas as never });
  expect(options({ replicas: 0, timeoutMs: 10 })).toThrow(RangeError);
  expect(options({ replicas: 1, timeoutMs: 0 })).toThrow(RangeError);
  expect(options({ replicas: 1 })).toThrow(TypeError);
  expect(options({ replicas: 1, timeoutMs: 10, onShortfall: 'maybe' })).toThrow(TypeError);
  expect(options('yes')).toThrow(TypeError);
});
