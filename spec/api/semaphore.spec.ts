import { useFixture } from '../support/fixture';
import { sleep, uniqueName, type Client } from '../support/redis';

const fixture = useFixture();
const semaphore = fixture.semaphore.bind(fixture);
let redis: Client;
beforeAll(() => {
  redis = fixture.redis;
});

describe('lock and unlock', () => {
  test('lock resolves a token and unlock resolves the new available count', async () => {
    const sem = semaphore({ resources: 2 });
    const token = await sem.lock();
    expect(['0', '1']).toContain(token);
    expect(await sem.availableCount()).toBe(1);
    expect(await sem.unlock()).toBe(2);
    expect(await sem.availableCount()).toBe(2);
  });

  test('writes the gem key layout', async () => {
    const name = uniqueName();
    const sem = semaphore({ resources: 3 }, name);
    const token = await sem.lock();
    expect(await redis.get(`SEMAPHORE:${name}:EXISTS`)).toBe('1');
    expect(await redis.get(`SEMAPHORE:${name}:VERSION`)).toBe('1');
    expect(await redis.lRange(`SEMAPHORE:${name}:AVAILABLE`, 0, -1)).toEqual(['1', '2']);
    expect(token).toBe('0');
    const stamp = await redis.hGet(`SEMAPHORE:${name}:GRABBED`, '0');
    // The gem's float stamp first (Ruby's to_f reads it), then the grant id, fence and lease.
    // The grant record: the gem's stamp first, then grant id, fence, lease, acquired stamp (the same at the grant) and owner label.
    expect(stamp).toMatch(/^(\d{10}\.\d{6}) [\w-]{12}\.[0-9a-z]+ \d+ 30000 \1 .*$/);
    expect(Math.abs(parseFloat(stamp!) - Date.now() / 1000)).toBeLessThan(5);
  });

  test('one instance serves many concurrent callers, each with its own token', async () => {
    const sem = semaphore({ resources: 3 });
    const tokens = await Promise.all([sem.lock(), sem.lock(), sem.lock()]);
    expect(new Set(tokens)).toEqual(new Set(['0', '1', '2']));
    const fourth = sem.lock(2000);
    await sleep(100);
    await sem.unlock('1');
    expect(await fourth).toBe('1');
  });

  test('wait is lock', async () => {
    const sem = semaphore();
    expect(sem.wait).toBe(sem.lock);
    expect(await sem.wait(0)).toBe('0');
  });
});

// The one-holder contract (lock(0), timeouts, hand-over, the callback form), for Mutex and a
// Semaphore of one: spec/api/behaviour.spec.ts.
