import { createClient } from 'redis';
import { Semaphore } from '../../lib';
import { snapshot } from '../support/fixture';
import { startRedisServer, type RedisServer } from '../support/redis-server';
import { blockedClients, sleep, uniqueName, until, type Client } from '../support/redis';

/** Faults injected for real on a private redis-server: connections killed, the server restarted. */
let server: RedisServer;
let admin: Client;
const semaphores: Semaphore[] = [];

function newSemaphore(name: string, options: ConstructorParameters<typeof Semaphore>[1] = {}): Semaphore {
  const sem = new Semaphore(name, { url: server.url, ...options });
  semaphores.push(sem);
  return sem;
}

async function connectAdmin(): Promise<Client> {
  const client = createClient({ url: server.url });
  client.on('error', () => undefined);
  await client.connect();
  return client;
}

beforeAll(async () => {
  server = await startRedisServer();
  admin = await connectAdmin();
});
afterEach(async () => {
  await Promise.all(semaphores.splice(0).map((sem) => sem.close()));
});
afterAll(async () => {
  await admin.quit().catch(() => undefined);
  await server.stop();
});

/** Client ids of connections currently blocked in BLMOVE. */
async function blockedWaiterIds(): Promise<string[]> {
  const list = await admin.clientList();
  return list.filter((client) => client.cmd === 'blmove').map((client) => String(client.id));
}

/** A mutex held by one semaphore, and another semaphore's `lock` blocked in Redis behind it. */
async function waiterBlockedBehindHolder() {
  const name = uniqueName('fault');
  const holder = newSemaphore(name);
  const waiter = newSemaphore(name, { waitSlice: 2000 });
  await holder.lock();
  const waiting = waiter.lock(15_000);
  await until(async () => (await blockedWaiterIds()).length === 1, 5000, 'the waiter to block');
  return { name, holder, waiter, waiting };
}

test('CLIENT KILL of a blocked waiter: it retries on a new connection and still gets the token', async () => {
  const { name, holder, waiting } = await waiterBlockedBehindHolder();
  const [killed] = await blockedWaiterIds();
  await admin.sendCommand(['CLIENT', 'KILL', 'ID', killed!]);
  await until(
    async () => {
      const ids = await blockedWaiterIds();
      return ids.length === 1 && ids[0] !== killed;
    },
    5000,
    'the waiter to block again on a new connection',
  );
  expect(await holder.unlock()).toBe(1);
  expect(await waiting).toBe('0');
  const state = await snapshot(admin, name);
  expect(state.available).toEqual([]);
  expect(Object.keys(state.grabbed)).toEqual(['0']);
  expect(state.inboxes).toEqual({});
});

test('CLIENT KILL racing the hand-off: whichever lands first, the waiter ends up holding the token', async () => {
  const { name, holder, waiter, waiting } = await waiterBlockedBehindHolder();
  const [id] = await blockedWaiterIds();
  // The release (on the holder's connection) and the kill (on ours) race: either the token is moved
  // and claimed and only the reply is lost (recover adopts the grant), or the waiter dies first and
  // blocks again on a new connection.
  const release = holder.unlock();
  await admin.sendCommand(['CLIENT', 'KILL', 'ID', id!]);
  await release;
  expect(await waiting).toBe('0');
  expect(await waiter.isLocked()).toBe(true);
  const state = await snapshot(admin, name);
  expect(Object.keys(state.grabbed)).toEqual(['0']);
  expect(state.available).toEqual([]);
  expect(state.inboxes).toEqual({});
});

test('Redis restarted without persistence: waiters reconnect and go on; old holders unlock false; exactly N tokens', async () => {
  const name = uniqueName('fault');
  const holder = newSemaphore(name, { resources: 2 });
  const waiter = newSemaphore(name, { resources: 2, waitSlice: 500 });
  const held = [await holder.lock(), await holder.lock()];
  const waiting = waiter.lock(20_000);
  await until(async () => (await blockedClients(admin)) === 1, 5000, 'the waiter to block');

  await server.kill('SIGKILL');
  await sleep(300);
  await server.restart();
  await admin.disconnect().catch(() => undefined);
  admin = await connectAdmin();

  expect(await waiting).not.toBeNull(); // re-created with 2 tokens: the waiter gets one
  await until(
    async () => {
      try {
        return (await holder.unlock(held[0]!)) === false && (await holder.unlock(held[1]!)) === false;
      } catch {
        return false; // the holder's own client is still reconnecting
      }
    },
    10_000,
    'the old holder to reconnect',
  );
  await waiter.unlock();
  const state = await snapshot(admin, name);
  expect([...state.available].sort()).toEqual(['0', '1']);
  expect(state.grabbed).toEqual({});
});

test('idle blocking connections that died (server timeout, restart) are replaced, not failed on', async () => {
  const name = uniqueName('fault');
  const holder = newSemaphore(name);
  const sem = newSemaphore(name, { waitSlice: 2000 });
  await holder.lock();
  expect(await Promise.all([sem.lock(200), sem.lock(200), sem.lock(200)])).toEqual([null, null, null]);
  // Kill every connection but ours: the three idle blocking connections, and the main clients.
  await admin.sendCommand(['CLIENT', 'KILL', 'TYPE', 'normal', 'SKIPME', 'yes']);
  await sleep(300); // the main clients reconnect; the idle blocking connections stay dead
  const waiting = sem.lock(10_000);
  await until(async () => (await blockedWaiterIds()).length === 1, 5000, 'the waiter to block');
  expect(await holder.unlock()).toBe(1);
  expect(await waiting).toBe('0');
});

test('a user whose ACL forbids SCRIPT can still wait (the claim falls back to recover)', async () => {
  await admin.sendCommand(['SCRIPT', 'FLUSH']); // earlier tests cached the claim; this user cannot
  const user = `rts-${uniqueName('acl').replace(/\W/g, '')}`;
  await admin.sendCommand(['ACL', 'SETUSER', user, 'on', '>secret', '~*', '&*', '+@all', '-script']);
  try {
    const url = server.url.replace('redis://', `redis://${user}:secret@`);
    const name = uniqueName('fault');
    const holder = newSemaphore(name, { url });
    const waiter = newSemaphore(name, { url });
    await holder.lock();
    const waiting = waiter.lock(10_000);
    await until(async () => (await blockedWaiterIds()).length === 1, 5000, 'the waiter to block');
    expect(await holder.unlock()).toBe(1);
    expect(await waiting).toBe('0');
    const stats = await admin.info('errorstats');
    expect(stats).toMatch(/errorstat_NOSCRIPT:count=[1-9]/); // the pipelined claim did fail…
    expect(stats).toMatch(/errorstat_NOPERM:count=[1-9]/); // …because its SCRIPT LOAD was refused
  } finally {
    await Promise.all(semaphores.splice(0).map((sem) => sem.close()));
    await admin.sendCommand(['ACL', 'DELUSER', user]);
  }
});
