import { Semaphore, SemaphoreError, SemaphoreRedisError, UnsupportedServerError } from '../../lib';
import { isOlder, MINIMUM_REDIS_VERSION } from '../../lib/redis/server-checks';
import { spawnExample } from '../support/examples';
import { FakeRedis } from '../support/fake-redis';
import { closeAll, connectClient, connectSemaphoreClient, redisUrl, uniqueName } from '../support/redis';

/**
 * The server check at first use: a Redis older than 6.2 (no BLMOVE) is refused with a typed error
 * before any script runs, instead of failing on `BLMOVE` at the first contended wait. The old server
 * is a fake (spec/support/fake-redis.ts): it connects like Redis 6.0.16 and knows no other command.
 */

const opened: Semaphore[] = [];
const fakes: FakeRedis[] = [];
function semaphore(name: string, options: ConstructorParameters<typeof Semaphore>[1]): Semaphore {
  const sem = new Semaphore(name, options);
  opened.push(sem);
  return sem;
}

afterEach(async () => {
  // Semaphores, then clients, then the fakes (a client whose server went away would queue its QUIT).
  await Promise.all(opened.splice(0).map((sem) => sem.close().catch(() => undefined)));
  await closeAll();
  await Promise.all(fakes.splice(0).map((fake) => fake.close()));
});

/** What the semaphores sent, handshakes left out: the commands after `from`. */
const sentSince = (fake: FakeRedis, from: number) => fake.names().slice(from);

describe('a server older than 6.2', () => {
  let fake: FakeRedis;
  beforeEach(async () => {
    fake = await FakeRedis.start({ version: '6.0.16' });
    fakes.push(fake);
  });

  test('lock() rejects with UnsupportedServerError naming the semaphore, the version and the minimum; so does every later call', async () => {
    const client = await connectSemaphoreClient(fake.url);
    const before = fake.commands.length;
    const name = uniqueName('old');
    const sem = semaphore(name, { redis: client });

    const error = await sem.lock(0).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(UnsupportedServerError);
    expect(error).toBeInstanceOf(SemaphoreError);
    expect(error).toMatchObject({
      name: 'UnsupportedServerError',
      semaphore: name,
      version: '6.0.16',
      minimum: '6.2.0',
    });
    expect((error as Error).message).toBe(
      `Semaphore "${name}" needs Redis 6.2.0 or later (for BLMOVE), but the server runs Redis 6.0.16`,
    );

    // Later calls, any of them, reject the same way; the callback never runs.
    const fn = jest.fn();
    await expect(sem.lock(fn)).rejects.toBeInstanceOf(UnsupportedServerError);
    await expect(sem.lock(100)).rejects.toThrow(/server runs Redis 6\.0\.16/);
    await expect(sem.signal()).rejects.toBeInstanceOf(UnsupportedServerError);
    expect(fn).not.toHaveBeenCalled();

    // Another semaphore on the same client: its own name in the error, and no second INFO.
    const other = uniqueName('old');
    await expect(semaphore(other, { redis: client }).lock()).rejects.toMatchObject({
      semaphore: other,
      version: '6.0.16',
    });

    // One INFO for the client, and nothing else: no script was loaded or run, no key written.
    expect(sentSince(fake, before)).toEqual(['INFO']);
  });

  test('a semaphore that makes its own client (url) rejects the same way', async () => {
    const name = uniqueName('old');
    const sem = semaphore(name, { url: fake.url });
    await expect(sem.lock(async () => 'ran')).rejects.toMatchObject({
      name: 'UnsupportedServerError',
      semaphore: name,
    });
    expect(fake.names()).not.toContain('EVALSHA');
    expect(fake.names()).not.toContain('EVAL');
  });
});

test('a server that refuses INFO (an ACL without +info) is not checked: the call goes on to its script', async () => {
  const fake = await FakeRedis.start({ version: '6.0.16', info: 'denied' });
  fakes.push(fake);
  const client = await connectSemaphoreClient(fake.url);
  const sem = semaphore(uniqueName('noinfo'), { redis: client });
  // The fake knows no script command: the call fails there, not on the version it could not read.
  const error = await sem.lock(0).catch((caught: unknown) => caught);
  expect(error).toBeInstanceOf(SemaphoreRedisError);
  expect(error).not.toBeInstanceOf(UnsupportedServerError);
  expect(fake.names()).toContain('INFO');
  expect(fake.names().some((name) => name === 'EVALSHA' || name === 'EVAL' || name === 'SCRIPT')).toBe(true);
});

test('a real server (6.2 or later) passes: lock and unlock as usual', async () => {
  const admin = await connectClient();
  const version = /^redis_version:(\S+)/m.exec(await admin.info('server'))?.[1];
  expect(version).toBeDefined();
  expect(isOlder(version!, MINIMUM_REDIS_VERSION)).toBe(false);
  const sem = semaphore(uniqueName('new'), { redis: await connectSemaphoreClient(redisUrl()), resources: 2 });
  expect(await sem.lock(0)).toBe('0');
  expect(await sem.lock(100)).toBe('1');
  expect(await sem.unlock('0')).toBe(1);
  expect(await sem.unlock('1')).toBe(2);
});

// The demo runs on the built package and the installed node-redis v4, whichever REDIS_CLIENT: once is enough.
const firstPass = (process.env['REDIS_CLIENT'] || 'redis') === 'redis';
(firstPass ? test : test.skip)('the demo (npm run demo) names an old server before it starts anything', async () => {
  const fake = await FakeRedis.start({ version: '6.0.16' });
  fakes.push(fake);
  const { code, stdout, stderr } = await spawnExample('crawler-demo.js', [], {
    env: { REDIS_URL: fake.url, NO_COLOR: '1' },
    timeoutMs: 15_000,
    stopSignal: 'SIGINT',
  });
  expect(code).toBe(1);
  expect(stderr).toContain(
    `Redis at ${fake.url} is too old: it runs Redis 6.0.16, and the library needs 6.2.0 or later (for BLMOVE).`,
  );
  expect(stderr).toContain('The examples need Redis 6.2 or later');
  expect(stdout).not.toContain('Semaphore "'); // no semaphore made, no worker started
  expect(fake.names()).not.toContain('EVALSHA');
});

test('isOlder compares major.minor.patch, and does not refuse what it cannot read', () => {
  expect(MINIMUM_REDIS_VERSION).toBe('6.2.0');
  expect(isOlder('6.0.16', '6.2.0')).toBe(true);
  expect(isOlder('5.0.14', '6.2.0')).toBe(true);
  expect(isOlder('6.1.240', '6.2.0')).toBe(true);
  expect(isOlder('6.2.0', '6.2.0')).toBe(false);
  expect(isOlder('6.2', '6.2.0')).toBe(false);
  expect(isOlder('7.2.4', '6.2.0')).toBe(false); // Valkey 8 reports redis_version:7.2.4
  expect(isOlder('10.0.1', '6.2.0')).toBe(false);
  expect(isOlder('255.255.255', '6.2.0')).toBe(false); // an unstable build
  expect(isOlder('unknown', '6.2.0')).toBe(false);
});
