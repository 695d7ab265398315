import { freePort } from '../support/redis-server';
import { closeAll, connectClient, redisUrl } from '../support/redis';
import { field, hasRedisServer, isRunning, spawnExample, type Outcome } from '../support/examples';

/**
 * The examples in examples/ (other than the crawler demo, which demo.spec.ts covers), each run as a
 * real process against the built library (dist/) and the run's Redis, as a user would run them.
 * Their output is checked line by line, independently of the OK line each prints, and Redis is
 * checked for leftovers.
 */
function runExample(
  file: string,
  args: readonly string[],
  env: Record<string, string | undefined> = {},
  timeoutMs = 45_000,
): Promise<Outcome> {
  // Each example bounds itself; this is the backstop. SIGTERM reaches only the example's own process.
  return spawnExample(file, args, { env: { REDIS_URL: redisUrl(), ...env }, timeoutMs, stopSignal: 'SIGTERM' });
}

async function keysMatching(pattern: string): Promise<string[]> {
  const redis = await connectClient();
  return redis.keys(pattern);
}

afterAll(closeAll);

describe('examples/job-queue.js', () => {
  test('3 consumer processes handle 30 jobs, every job exactly once, and nothing is left in Redis', async () => {
    const { code, stdout, stderr } = await runExample('job-queue.js', ['--jobs', '30', '--consumers', '3']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });

    const handled = [...stdout.matchAll(/^consumer (\d) handled job (\d+)$/gm)].map(([, consumer, job]) => ({
      consumer: Number(consumer),
      job: Number(job),
    }));
    expect(handled.map(({ job }) => job).sort((a, b) => a - b)).toEqual(Array.from({ length: 30 }, (_, i) => i + 1));
    expect(new Set(handled.map(({ consumer }) => consumer)).size).toBeGreaterThanOrEqual(2); // shared out, not one consumer doing it all
    for (const { consumer } of handled) expect([1, 2, 3]).toContain(consumer);
    // The initial token "0" was seen by exactly one consumer, and skipped.
    expect(stdout.match(/skipped token "0"/g)).toHaveLength(1);
    expect(stdout).toMatch(/^OK: 30 jobs, each handled exactly once by 3 consumer processes$/m);

    const [, name] = field(stdout, /^Job queue "([^"]+)"/m);
    expect(await keysMatching(`SEMAPHORE:${name}:*`)).toEqual([]);
  }, 60_000);
});

describe('examples/http-limit.js', () => {
  test("one user's 3rd concurrent request gets 429, another user's gets 200, and the first user's next one 200", async () => {
    const { code, stdout, stderr } = await runExample('http-limit.js', []);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const status = (label: string) =>
      Number(field(stdout, new RegExp(`^${label.replace(/[()#]/g, '\\$&')} +→ (\\d{3}) `, 'm'))[1]);
    expect(status('alice #3 (while #1 and #2 run)')).toBe(429);
    expect(status('bob #1 (while alice has 2)')).toBe(200);
    expect(status('alice #1 (600 ms)')).toBe(200);
    expect(status('alice #2 (600 ms)')).toBe(200);
    expect(status('alice #4 (after #1 and #2 finished)')).toBe(200);
    expect(stdout).toContain('(alice has 2 requests running)');
    expect(stdout).toMatch(/^OK: /m);

    const [, prefix] = field(stdout, /\("([^"]+):<user>"\)/);
    expect(await keysMatching(`SEMAPHORE:${prefix}:*`)).toEqual([]);
  }, 60_000);

  (hasRedisServer ? test : test.skip)(
    'without REDIS_URL it starts a throwaway redis-server and stops it',
    async () => {
      const { code, stdout, stderr } = await runExample('http-limit.js', [], { REDIS_URL: undefined });
      expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
      const [, pid] = field(stdout, /\(a throwaway redis-server, pid (\d+)\)/);
      expect(isRunning(Number(pid))).toBe(false);
    },
    60_000,
  );
});

describe('examples/cron-once.js', () => {
  test('of 4 instances firing on the same schedule, exactly one runs the job at each of 3 ticks', async () => {
    const { code, stdout, stderr } = await runExample('cron-once.js', ['--instances', '4', '--ticks', '3']);
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });

    const events = [
      ...stdout.matchAll(
        /^(\d\d:\d\d:\d\d) {2}instance (\d)(?: \(clock 500 ms late\))?: (ran the job|skipped: another instance holds the mutex|skipped: this tick already ran)/gm,
      ),
    ];
    const ticks = new Map<string, { ran: number[]; skipped: number[] }>();
    for (const [, tick, instance, what] of events) {
      const entry = ticks.get(tick!) ?? { ran: [], skipped: [] };
      (what === 'ran the job' ? entry.ran : entry.skipped).push(Number(instance));
      ticks.set(tick!, entry);
    }
    expect(ticks.size).toBe(3);
    for (const { ran, skipped } of ticks.values()) {
      expect(ran).toHaveLength(1);
      expect([...ran, ...skipped].sort()).toEqual([1, 2, 3, 4]);
    }
    expect(stdout).toMatch(/^OK: each of the 3 ticks ran exactly once across 4 instances$/m);

    const [, job] = field(stdout, /^Job "([^"]+)"/m);
    expect(await keysMatching(`*cron:${job}*`)).toEqual([]);
  }, 60_000);
});

describe.each(['job-queue.js', 'http-limit.js', 'cron-once.js'])('examples/%s', (file) => {
  test('when Redis cannot be reached it says how to get one and exits with 1', async () => {
    const port = await freePort(); // nothing listens there
    const { code, stdout, stderr } = await runExample(file, [], { REDIS_URL: `redis://127.0.0.1:${port}` });
    expect({ code, stdout }).toEqual({ code: 1, stdout: '' });
    expect(stderr).toContain(`Cannot connect to Redis at redis://127.0.0.1:${port}`);
    expect(stderr).toContain('docker compose up -d');
  }, 30_000);
});

test.each([
  ['job-queue.js', ['--jobs', 'many'], 'Usage: node examples/job-queue.js'],
  ['cron-once.js', ['--instances', '0'], 'Usage: node examples/cron-once.js'],
])('examples/%s rejects a bad flag with its usage and exit code 2', async (file, args, usage) => {
  const { code, stderr } = await runExample(file, args);
  expect(code).toBe(2);
  expect(stderr).toContain(usage);
});
