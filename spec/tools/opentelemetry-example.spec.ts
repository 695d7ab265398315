import { freePort } from '../support/redis-server';
import { closeAll, connectClient, redisUrl } from '../support/redis';
import { field, spawnExample, type Outcome } from '../support/examples';

/**
 * examples/opentelemetry.js run as a program against the built library (dist/) and the run's Redis,
 * as examples.spec.ts runs the others. Its subscriber itself is tested in spec/api/tracing.spec.ts.
 */
function runExample(env: Record<string, string | undefined> = {}): Promise<Outcome> {
  return spawnExample('opentelemetry.js', [], {
    env: { REDIS_URL: redisUrl(), ...env },
    timeoutMs: 30_000,
    stopSignal: 'SIGTERM',
  });
}

afterAll(closeAll);

test('prints one span per call: the contended one covers its wait and its hold, the timeout and the abort are errors', async () => {
  const { code, stdout, stderr } = await runExample();
  expect({ code, stderr }).toEqual({ code: 0, stderr: '' });
  const rows = [
    ...stdout.matchAll(
      /^(\w): .+?\s{2,}(semaphore\.\w+)\s+(\d+) ms\s+(\d+) ms\s+(\w+)\s+(\d+) ms\s+(?:(\d+) ms)?\s+(.+)$/gm,
    ),
  ].map(([, call, span, , lasts, outcome, waited, held, status]) => ({
    call,
    span,
    lasts: Number(lasts),
    outcome,
    waited: Number(waited),
    held,
    status,
  }));
  expect(rows.map(({ call, span, outcome, status }) => [call, span, outcome, status])).toEqual([
    ['A', 'semaphore.lock', 'granted', 'unset'],
    ['B', 'semaphore.lock', 'granted', 'unset'],
    ['C', 'semaphore.lock', 'timeout', 'ERROR (timeout)'],
    ['D', 'semaphore.lock', 'aborted', 'ERROR (aborted)'],
    ['E', 'semaphore.acquire', 'granted', 'unset'],
  ]);
  // B waited for A's 400 ms hold (less the 50 ms it started later), then held 100 ms: its span covers both.
  const b = rows[1]!;
  expect(b.waited).toBeGreaterThanOrEqual(300);
  expect(Number(b.held)).toBeGreaterThanOrEqual(95);
  expect(b.lasts).toBeGreaterThanOrEqual(b.waited + 95);
  expect(rows[4]!.held).toBeUndefined(); // a lease's span ends at the grant
  expect(stdout).toMatch(/^OK: 5 spans/m);

  const [, name] = field(stdout, /^Mutex "([^"]+)"/m);
  const redis = await connectClient();
  expect(await redis.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
}, 45_000);

test('an unreachable Redis: how to get one, and exit code 1', async () => {
  const port = await freePort(); // nothing listens there
  const { code, stdout, stderr } = await runExample({ REDIS_URL: `redis://127.0.0.1:${port}` });
  expect({ code, stdout }).toEqual({ code: 1, stdout: '' });
  expect(stderr).toContain(`Cannot connect to Redis at redis://127.0.0.1:${port}`);
}, 30_000);
