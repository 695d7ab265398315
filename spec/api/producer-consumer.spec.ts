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
    expect(await producer.signal('early-job')).toBe(2); // creation pushed "0", then the job went in front
    expect(await consumer.wait(0)).toBe('early-job');
    expect(await consumer.wait(0)).toBe('0');
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
});
