import { freePort } from '../support/redis-server';
import { closeAll, connectClient, redisUrl } from '../support/redis';
import { field, hasRedisServer, isRunning, spawnExample, type Outcome } from '../support/examples';

/** The showcase, examples/crawler-demo.js, run as a real process against the built library (dist/). */
function runDemo(
  args: readonly string[],
  env: Record<string, string | undefined>,
  timeoutMs = 15_000,
): Promise<Outcome> {
  // SIGINT lets the demo stop its workers and redis-server; the test then fails on the exit code.
  return spawnExample('crawler-demo.js', args, { env: { NO_COLOR: '1', ...env }, timeoutMs, stopSignal: 'SIGINT' });
}

afterAll(closeAll);

describe('examples/crawler-demo.js', () => {
  test('4 worker processes share 3 permits: never more than 3 fetches at once, every token back, no keys left', async () => {
    const { code, stdout, stderr } = await runDemo(['--workers', '4', '--fetches', '3'], { REDIS_URL: redisUrl() });
    const output = `${stdout}\n${stderr}`;
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });

    const [, max, permits] = field(stdout, /^ {2}max concurrency +(\d+) of (\d+) permits/m);
    expect(Number(permits)).toBe(3);
    expect(Number(max)).toBeGreaterThanOrEqual(1);
    expect(Number(max)).toBeLessThanOrEqual(3);
    expect(stdout).toMatch(/^ {2}fetches +12 of 12 \(4 workers × 3\)/m);
    expect(stdout).toMatch(/^ {2}tokens at the end +3 of 3 available, allTokens\(\) = \[0, 1, 2\]/m);
    expect(stdout).toMatch(/^OK: never more than 3 fetches at once/m);
    // One line per event: every fetch is seen waiting, acquiring and releasing.
    expect(stdout.match(/ acquired token \d/g)).toHaveLength(12);
    expect(stdout.match(/ released token \d/g)).toHaveLength(12);

    // It used the run's Redis and cleaned up after itself.
    expect(output).toContain('(REDIS_URL)');
    const [, name] = field(stdout, /^Semaphore "([^"]+)"/m);
    const redis = await connectClient();
    expect(await redis.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
  });

  (hasRedisServer ? test : test.skip)('without REDIS_URL it starts a throwaway redis-server and stops it', async () => {
    const { code, stdout, stderr } = await runDemo(['--workers', '2', '--fetches', '2', '--permits', '1'], {
      REDIS_URL: undefined,
    });
    expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
    const [, port, pid] = field(
      stdout,
      /^Redis \S+ at redis:\/\/127\.0\.0\.1:(\d+)\/? \(a throwaway redis-server, pid (\d+)\)/m,
    );
    expect(Number(port)).toBeGreaterThan(0);
    expect(isRunning(Number(pid))).toBe(false);
    expect(stdout).toMatch(/^ {2}max concurrency +1 of 1 permits/m);
  });

  test('when Redis cannot be reached it says how to get one and exits with 1', async () => {
    const port = await freePort(); // nothing listens there
    const started = Date.now();
    const { code, stderr } = await runDemo([], { REDIS_URL: `redis://127.0.0.1:${port}` });
    expect(code).toBe(1);
    expect(stderr).toContain(`Cannot connect to Redis at redis://127.0.0.1:${port}`);
    expect(stderr).toContain('docker compose up -d');
    expect(Date.now() - started).toBeLessThan(5000);
  });

  test('rejects a bad flag with a message naming it', async () => {
    const { code, stderr } = await runDemo(['--workers', 'many'], {});
    expect(code).toBe(2);
    expect(stderr).toContain('Expected --workers to be a whole number from 1 to 64, got "many"');
  });
});
