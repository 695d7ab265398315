import { useFixture, snapshot } from '../support/fixture';
import { blockedClients, until } from '../support/redis';

const fixture = useFixture();

describe('wait and signal hand jobs from producers to consumers', () => {
  test('a consumer blocked in wait() gets a job signalled later, and consume() finishes it', async () => {
    const consumer = fixture.semaphore();
    const producer = fixture.semaphore({}, consumer.name);
    await consumer.lock(); // take the initial token "0" so only jobs remain
    const job = consumer.wait(5000);
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the consumer to block');
    expect(await producer.signal('job-1')).toBeGreaterThanOrEqual(0);
    expect(await job).toBe('job-1');
    expect(await consumer.isLocked('job-1')).toBe(true);
    expect(await consumer.consume('job-1')).toBe(true);
    expect(await consumer.isLocked('job-1')).toBe(false);
    const state = await snapshot(fixture.redis, consumer.name);
    expect(state.available).toEqual([]);
    expect(Object.keys(state.grabbed)).toEqual(['0']);
  });

  test('a signal before the semaphore exists is not wiped by its creation', async () => {
    const producer = fixture.semaphore();
    const consumer = fixture.semaphore({}, producer.name);
    expect(await producer.signal('early-job')).toBe(2); // creation pushed "0", then the job went behind it
    expect(await consumer.wait(0)).toBe('0');
    expect(await consumer.wait(0)).toBe('early-job');
    expect(await consumer.wait(0)).toBeNull();
  });

  test('nothing is lost whichever side starts first', async () => {
    const producer = fixture.semaphore();
    const consumer = fixture.semaphore({}, producer.name);
    await consumer.lock(0); // hold the initial token
    const jobs = Array.from({ length: 20 }, (_, i) => `job-${i}`);
    const received: string[] = [];
    const consuming = (async () => {
      while (received.length < jobs.length) {
        const job = await consumer.wait(5000);
        if (job === null) throw new Error('a job went missing');
        received.push(job);
        await consumer.consume(job);
      }
    })();
    for (const [i, job] of jobs.entries()) {
      await producer.signal(job);
      if (i % 5 === 0) await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await consuming;
    expect([...received].sort()).toEqual([...jobs].sort());
    expect(await consumer.availableCount()).toBe(0);
  });

  test('signal() with no token mints a new unique token', async () => {
    const sem = fixture.semaphore();
    await sem.signal();
    await sem.signal();
    const tokens = await sem.allTokens();
    expect(tokens).toHaveLength(3);
    expect(new Set(tokens).size).toBe(3);
    expect(tokens).toContain('0');
  });

  test('signal of a held token puts it back, and its holder can no longer unlock it', async () => {
    const holder = fixture.semaphore();
    const other = fixture.semaphore({}, holder.name);
    const token = await holder.lock();
    expect(await other.signal(token)).toBe(1);
    expect(await holder.unlock(token)).toBe(false);
    expect(await holder.availableCount()).toBe(1);
    expect(await holder.allTokens()).toEqual(['0']);
  });

  test('jobs are served in the order they were signalled, behind the initial tokens', async () => {
    const producer = fixture.semaphore();
    const consumer = fixture.semaphore({}, producer.name);
    for (const job of ['a', 'b', 'c']) await producer.signal(job);
    const taken = [];
    for (let i = 0; i < 5; i++) taken.push(await consumer.wait(0));
    expect(taken).toEqual(['0', 'a', 'b', 'c', null]);
  });

  test('blocked consumers get the jobs in signal order, one each', async () => {
    const producer = fixture.semaphore({ resources: 0 });
    const consumers = [1, 2, 3].map(() => fixture.semaphore({ resources: 0 }, producer.name));
    const waits: Array<Promise<string | null>> = [];
    for (const consumer of consumers) {
      waits.push(consumer.wait(5000));
      const blocked = waits.length;
      await until(async () => (await blockedClients(fixture.redis)) >= blocked, 5000, 'the consumer to block');
    }
    for (const job of ['a', 'b', 'c']) await producer.signal(job);
    expect(await Promise.all(waits)).toEqual(['a', 'b', 'c']);
  });
});

describe('a queue that starts empty (resources: 0)', () => {
  test('has no token until a signal: wait() waits, then gets the jobs first signalled first', async () => {
    const producer = fixture.semaphore({ resources: 0 });
    const consumer = fixture.semaphore({ resources: 0 }, producer.name);
    expect(await consumer.wait(0)).toBeNull();
    expect(await consumer.wait(100)).toBeNull();
    expect(await consumer.exists()).toBe(true); // created, with no token
    expect(await consumer.availableCount()).toBe(0);
    expect(await consumer.allTokens()).toEqual([]);
    const first = consumer.wait(5000);
    await until(async () => (await blockedClients(fixture.redis)) >= 1, 5000, 'the consumer to block');
    for (const job of ['a', 'b', 'c']) await producer.signal(job);
    expect(await first).toBe('a');
    expect(await consumer.wait(0)).toBe('b');
    expect(await consumer.wait(0)).toBe('c');
    expect(await consumer.wait(0)).toBeNull();
    for (const job of ['a', 'b', 'c']) expect(await consumer.consume(job)).toBe(true);
    expect((await snapshot(fixture.redis, consumer.name)).available).toEqual([]);
  });

  test('a job put back with unlock() is served next, before later jobs; consumed ones are gone', async () => {
    const producer = fixture.semaphore({ resources: 0 });
    const consumer = fixture.semaphore({ resources: 0 }, producer.name);
    await producer.signal('j1');
    await producer.signal('j2');
    expect(await consumer.wait(0)).toBe('j1');
    await producer.signal('j3');
    expect(await consumer.unlock('j1')).toBe(3); // put back, at the front
    expect(await producer.signal('j4')).toBe(4);
    const taken = [];
    for (let i = 0; i < 4; i++) taken.push(await consumer.wait(0));
    expect(taken).toEqual(['j1', 'j2', 'j3', 'j4']);
    expect(await consumer.consume('j2')).toBe(true);
    expect(await consumer.unlock('j3')).toBe(1);
    await producer.signal('j5');
    expect(await consumer.wait(0)).toBe('j3');
    expect(await consumer.wait(0)).toBe('j5');
  });

  test('resources must be an integer from 0, with errors that say so', () => {
    expect(() => fixture.semaphore({ resources: -1 })).toThrow(RangeError);
    expect(() => fixture.semaphore({ resources: -1 })).toThrow(/`resources` to be an integer from 0/);
    expect(() => fixture.semaphore({ resources: 0.5 })).toThrow(RangeError);
    expect(() => fixture.semaphore({ resources: '0' as unknown as number })).toThrow(TypeError);
    expect(() => fixture.semaphore({ resources: '0' as unknown as number })).toThrow(/`resources` to be a number/);
  });
});
