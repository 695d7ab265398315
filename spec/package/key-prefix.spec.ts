/**
 * The `keyPrefix` option: two applications on one Redis, each with its own prefix and an ACL user
 * confined to it (the README's minimal ACL with `~<prefix>*`), each working in full while neither can
 * read, take or release the other's tokens; and the operators' tools (listing, status, release, the
 * dashboard) seeing only the semaphores under their prefix.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createClient } from 'redis';
import { createDashboard, Mutex, Semaphore, type RedisClientLike } from '../../lib';
import { listSemaphores, readStatus, releaseToken } from '../../lib/admin/operations';
import { semaphoreKeys } from '../../lib/redis/keys';
import { documentedAcl } from '../support/acl';
import { censusProblems, takeCensus } from '../support/census';
import { startRedisServer, type RedisServer } from '../support/redis-server';
import { sleep, uniqueName, until, type Client } from '../support/redis';

jest.setTimeout(60_000);

interface App {
  readonly user: string;
  readonly keyPrefix: string;
  /** The app's Redis URL, as its ACL user. */
  readonly url: string;
  /** A client connected as the app's ACL user. */
  readonly client: Client;
}

let server: RedisServer;
let admin: Client;
const clients: Client[] = [];

async function connect(url: string): Promise<Client> {
  const client = createClient({ url });
  client.on('error', () => undefined);
  await client.connect();
  clients.push(client);
  return client;
}

/** An ACL user confined to `keyPrefix` by the README's recipe (plus `+scan`, which `list` and the dashboard need). */
async function app(user: string, keyPrefix: string): Promise<App> {
  await admin.sendCommand([
    'ACL',
    'SETUSER',
    user,
    'reset',
    ...documentedAcl({ password: `${user}-pw`, keyPrefix }),
    '+scan',
  ]);
  const url = server.url.replace('redis://', `redis://${user}:${user}-pw@`);
  return { user, keyPrefix, url, client: await connect(url) };
}

beforeAll(async () => {
  server = await startRedisServer();
  admin = await connect(server.url);
});
afterAll(async () => {
  await Promise.all(clients.map((client) => client.quit().catch(() => client.disconnect())));
  await server?.stop();
});

/**
 * Every public method once, as the app's user under its prefix: contended waits (BLMOVE on
 * connections of their own), signal and wait, refresh, a reclaim, expiration, delete.
 */
async function exercise({ url, client, keyPrefix }: App, name: string): Promise<void> {
  // `functions: false`, as OPERATIONS.md says for this ACL (no FUNCTION LOAD).
  const options = { keyPrefix, resources: 2, staleClientTimeout: 60_000, waitSlice: 200, functions: false };
  // One semaphore on the app's own client, one on a client it made from the URL.
  const sem = new Semaphore(name, { ...options, redis: client });
  const other = new Semaphore(name, { ...options, url });
  const mutex = new Mutex(`${name}:mutex`, { redis: client, keyPrefix, expiration: 60_000, functions: false });
  try {
    expect(await sem.exists()).toBe(false);
    expect(await sem.lock()).toBe('0');
    expect(await sem.lock(0)).toBe('1');
    expect(await other.lock(0)).toBeNull();
    expect(await other.lock(50)).toBeNull();
    const waiting = other.lock(5000);
    await sleep(100);
    expect(await sem.refresh('0')).toBe(true);
    expect(await sem.unlock('1')).toBe(1);
    expect(await waiting).toBe('1');
    expect(await other.consume('1')).toBe(true);
    expect(await sem.signal('1')).toBe(1);
    expect(await other.wait(0)).toBe('1');
    expect(await other.unlock('1')).toBe(1);
    expect((await sem.allTokens()).sort()).toEqual(['0', '1']);
    await admin.hSet(`${keyPrefix}${name}:GRABBED`, '0', '1000.000000'); // looks dead
    expect(await sem.releaseStaleLocks()).toBe(1);
    expect(await sem.unlock('0')).toBe(false);
    expect(await mutex.lock(1000, async (token) => `ran with ${token}`)).toBe('ran with 0');
    expect(await admin.pTTL(`${keyPrefix}${name}:mutex:AVAILABLE`)).toBeGreaterThan(0);
    expect(await sem.lock(0)).toBe('0'); // held while the other app runs
  } finally {
    await Promise.all([sem.close(), other.close(), mutex.close()]);
  }
}

/** An ACL LOG entry's fields: a flat array of names and values (RESP2), or a map (RESP3, node-redis v6's default). */
function fieldsOf(entry: unknown): Record<string, unknown> {
  if (entry instanceof Map) return Object.fromEntries(entry);
  if (!Array.isArray(entry)) return entry as Record<string, unknown>;
  return Object.fromEntries(
    Array.from({ length: entry.length / 2 }, (_, i) => [String(entry[2 * i]), entry[2 * i + 1]]),
  );
}

test('two applications with their own prefixes, each an ACL user confined to it: each works in full, neither can touch the other', async () => {
  const [app1, app2] = await Promise.all([app('app1', 'APP1:'), app('app2', 'APP2:')]);
  const name = uniqueName('shared'); // the same name in both applications
  await admin.sendCommand(['ACL', 'LOG', 'RESET']);
  await Promise.all([exercise(app1, name), exercise(app2, name)]);
  // Nothing either application did was denied.
  expect(await admin.sendCommand(['ACL', 'LOG'])).toEqual([]);

  // Two semaphores, each under its own prefix and only there, each with token "0" held.
  const keys = (await admin.keys(`*${name}*`)).sort();
  expect(keys.filter((key) => !key.startsWith('APP1:') && !key.startsWith('APP2:'))).toEqual([]);
  expect(keys).toEqual(
    expect.arrayContaining([
      `APP1:${name}:AVAILABLE`,
      `APP1:${name}:GRABBED`,
      `APP2:${name}:AVAILABLE`,
      `APP2:${name}:GRABBED`,
    ]),
  );
  const census = async (keyPrefix: string) => takeCensus(admin, name, { keyPrefix });
  const before = await census('APP2:');
  expect(Object.keys(before.grabbed)).toEqual(['0']);
  expect(censusProblems(before, 2)).toEqual([]);

  // app1 reaching for app2's semaphore, by the library, by the operators' tools, by raw commands:
  // every attempt is refused by Redis (NOPERM), and app2's state is untouched.
  const intruder = new Semaphore(name, { redis: app1.client, keyPrefix: 'APP2:', resources: 2, functions: false });
  const gemDefault = new Semaphore(name, { redis: app1.client, resources: 2, functions: false });
  try {
    await expect(intruder.lock(0)).rejects.toMatchObject({
      name: 'SemaphoreRedisError',
      message: expect.stringMatching(/NOPERM/),
    });
    await expect(intruder.signal('0')).rejects.toThrow(/NOPERM/);
    await expect(intruder.releaseStaleLocks()).rejects.toThrow(/NOPERM/);
    await expect(intruder.delete()).rejects.toThrow(/NOPERM/);
    await expect(gemDefault.lock(0)).rejects.toThrow(/NOPERM/); // nor the default prefix
  } finally {
    await Promise.all([intruder.close(), gemDefault.close()]);
  }
  await expect(releaseToken({ redis: app1.client, keyPrefix: 'APP2:' }, name, '0')).rejects.toThrow(/NOPERM/);
  await expect(readStatus({ redis: app1.client, keyPrefix: 'APP2:' }, name)).rejects.toThrow(/NOPERM/);
  const theirs = semaphoreKeys(name, { keyPrefix: 'APP2:' });
  for (const command of [
    ['LPUSH', theirs.available, '0'],
    ['HDEL', theirs.grabbed, '0'],
    ['LRANGE', theirs.available, '0', '-1'],
    ['DEL', theirs.exists],
  ]) {
    expect(String(await app1.client.sendCommand(command).catch((error: unknown) => error))).toMatch(/NOPERM/);
  }
  expect(await takeCensus(admin, name, { keyPrefix: 'APP2:' })).toEqual(before);
  // Each denial is logged against app1 and app2's keys (or the gem's default prefix), and no other.
  const log = (await admin.sendCommand(['ACL', 'LOG', '128'])) as unknown as unknown[];
  expect(log.length).toBeGreaterThan(0);
  for (const entry of log) {
    const fields = fieldsOf(entry);
    expect(fields['username']).toBe('app1');
    expect(String(fields['object'])).toMatch(/^(APP2|SEMAPHORE):/);
  }

  // Each application's operators see their own semaphore, by SCAN of their prefix, and may release
  // its token; app2's holder is still recorded.
  expect(
    (await listSemaphores({ redis: app1.client as unknown as RedisClientLike, keyPrefix: 'APP1:' })).names,
  ).toEqual([name, `${name}:mutex`]);
  expect(
    (await listSemaphores({ redis: app2.client as unknown as RedisClientLike, keyPrefix: 'APP2:' })).names,
  ).toEqual([name, `${name}:mutex`]);
  await expect(releaseToken({ redis: app1.client, keyPrefix: 'APP1:' }, name, '0')).resolves.toEqual({
    status: 'released',
    available: 2,
  });
  expect((await readStatus({ redis: app2.client, keyPrefix: 'APP2:' }, name)).holders).toHaveLength(1);
});

describe('the dashboard under a prefix', () => {
  let http: Server | undefined;
  afterEach(async () => {
    await new Promise((resolve) => (http ? http.close(resolve) : resolve(undefined)));
    http = undefined;
  });

  test('lists, shows and releases only the semaphores under its prefix, as an ACL user confined to it', async () => {
    const app3 = await app('app3', 'APP3:');
    const mine = new Semaphore(uniqueName('dash'), {
      redis: app3.client,
      keyPrefix: 'APP3:',
      resources: 2,
      functions: false,
    });
    const gem = new Semaphore(uniqueName('dash'), { redis: admin, resources: 1 }); // SEMAPHORE:…, not app3's
    try {
      const token = (await mine.lock(0)) as string;
      await gem.existsOrCreate();
      const handler = createDashboard({
        redis: app3.client as unknown as RedisClientLike,
        keyPrefix: 'APP3:',
        token: 'dashboard-token',
      });
      http = createServer(handler);
      await new Promise<void>((resolve) => http?.listen(0, '127.0.0.1', resolve));
      const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;
      const list = (await (await fetch(`${base}/api/semaphores`)).json()) as { semaphores: Array<{ name: string }> };
      expect(list.semaphores.map((s) => s.name)).toEqual([mine.name]);
      expect((await fetch(`${base}/api/semaphores/${encodeURIComponent(mine.name)}`)).status).toBe(200);
      // The default prefix's semaphore is not this dashboard's: it looks under APP3: and finds nothing.
      expect((await fetch(`${base}/api/semaphores/${encodeURIComponent(gem.name)}`)).status).toBe(404);
      const notFound = await fetch(`${base}/semaphores/${encodeURIComponent(uniqueName('missing'))}`);
      expect(notFound.status).toBe(404);
      expect(await notFound.text()).toContain('APP3:');
      const release = await fetch(`${base}/api/semaphores/${encodeURIComponent(mine.name)}/release`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: 'Bearer dashboard-token' },
        body: JSON.stringify({ token }),
      });
      expect(release.status).toBe(200);
      await until(async () => (await mine.availableCount()) === 2, 5000, 'the released token');
    } finally {
      await Promise.all([mine.close(), gem.delete().then(() => gem.close())]);
    }
  });
});
