import { freePort } from '../support/redis-server';
import { closeAll, connectClient, redisUrl } from '../support/redis';
import { field, spawnExample, type Outcome } from '../support/examples';

/**
 * examples/hand-over.js, run as a real process against the built library (dist/) and the run's
 * Redis, as examples.spec.ts runs the others: its output is checked line by line, and Redis for leftovers.
 */
function runExample(args: readonly string[], env: Record<string, string | undefined> = {}): Promise<Outcome> {
  return spawnExample('hand-over.js', args, {
    env: { REDIS_URL: redisUrl(), ...env },
    timeoutMs: 45_000,
    stopSignal: 'SIGTERM',
  });
}

afterAll(closeAll);

test('a scheduler hands 4 grants over to 2 worker processes, which keep them alive past their leases and release them', async () => {
  const { code, stdout, stderr } = await runExample(['--jobs', '4', '--workers', '2']);
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });

  const handed = [
    ...stdout.matchAll(
      /^scheduler: job (\d) → token "(\d)" \(fence (\d+), waited (\d+) ms\), handed to worker (\d)$/gm,
    ),
  ].map(([, job, token, fence, waited, worker]) => ({
    job: Number(job),
    token,
    fence: Number(fence),
    waited: Number(waited),
    worker: Number(worker),
  }));
  expect(handed.map(({ job }) => job)).toEqual([1, 2, 3, 4]);
  expect(handed.map(({ worker }) => worker)).toEqual([1, 2, 1, 2]);
  for (const { token } of handed) expect(['0', '1']).toContain(token);
  expect(handed.map(({ fence }) => fence)).toEqual([...handed.map(({ fence }) => fence)].sort((a, b) => a - b));
  // Job 3 could only start once a worker released a grant: jobs take 1,500 ms.
  expect(handed[2]!.waited).toBeGreaterThanOrEqual(1000);

  const done = [
    ...stdout.matchAll(
      /^worker (\d): job (\d) done after 1500 ms \((\d+) refreshes\); release → (\w+), again → (\w+)$/gm,
    ),
  ];
  expect(done.map(([, , job]) => Number(job)).sort()).toEqual([1, 2, 3, 4]);
  for (const [, worker, job, refreshes, released, again] of done) {
    expect(Number(worker)).toBe(handed[Number(job) - 1]!.worker);
    expect(Number(refreshes)).toBeGreaterThanOrEqual(3); // every third of the 1,000 ms lease, for 1,500 ms
    expect({ released, again }).toEqual({ released: 'true', again: 'false' });
  }
  expect(stdout).toMatch(/^OK: 4 jobs, each grant kept alive and released by the worker it was handed to/m);

  const [, name] = field(stdout, /^Semaphore "([^"]+)"/m);
  const redis = await connectClient();
  expect(await redis.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
}, 60_000);

test('a bad flag gets its usage and exit code 2; an unreachable Redis, how to get one and exit code 1', async () => {
  const usage = await runExample(['--workers', '0']);
  expect(usage.code).toBe(2);
  expect(usage.stderr).toContain('Usage: node examples/hand-over.js');

  const port = await freePort(); // nothing listens there
  const { code, stdout, stderr } = await runExample([], { REDIS_URL: `redis://127.0.0.1:${port}` });
  expect({ code, stdout }).toEqual({ code: 1, stdout: '' });
  expect(stderr).toContain(`Cannot connect to Redis at redis://127.0.0.1:${port}`);
  expect(stderr).toContain('docker compose up -d');
}, 30_000);
