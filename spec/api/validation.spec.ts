import { createLocks, Mutex, Semaphore } from '../../lib';
import { useFixture } from '../support/fixture';

const fixture = useFixture();

describe('bad input is rejected before anything touches Redis', () => {
  test.each([
    ['an empty name', '', {}],
    ['a number as name', 42, {}],
    ['an undefined name', undefined, {}],
  ])('%s throws TypeError', (_, name, options) => {
    expect(() => new Semaphore(name as string, options)).toThrow(TypeError);
    expect(() => new Semaphore(name as string, options)).toThrow(/semaphore name/);
  });

  test.each([
    ['resources: -1', { resources: -1 }, RangeError, /resources/],
    ['resources: 1.5', { resources: 1.5 }, RangeError, /resources/],
    ['resources: 2**53', { resources: 2 ** 53 }, RangeError, /resources/],
    ['resources: "3"', { resources: '3' }, TypeError, /resources/],
    ['resources beyond the maximum', { resources: 1_000_001 }, RangeError, /resources.*1000000/],
    [
      'an unknown option (a typo)',
      { resource: 3 },
      TypeError,
      /Unknown option `resource`; the options are .*`resources`/,
    ],
    [
      'two unknown options',
      { staleClientTimout: 5000, expire: 1 },
      TypeError,
      /Unknown options `staleClientTimout`, `expire`/,
    ],
    ['expiration below 1 ms', { expiration: 0.4 }, RangeError, /expiration/],
    ['waitReplicas.timeoutMs below 1 ms', { waitReplicas: { replicas: 1, timeoutMs: 0.4 } }, RangeError, /timeoutMs/],
    ['staleClientTimeout: -5', { staleClientTimeout: -5 }, RangeError, /staleClientTimeout/],
    ['staleClientTimeout: NaN', { staleClientTimeout: NaN }, TypeError, /staleClientTimeout/],
    ['staleClientTimeout: 0', { staleClientTimeout: 0 }, RangeError, /staleClientTimeout/],
    ['staleClientTimeout below 1 ms', { staleClientTimeout: 0.4 }, RangeError, /staleClientTimeout/],
    ['staleClientTimeout beyond a timer', { staleClientTimeout: 2 ** 31 }, RangeError, /staleClientTimeout/],
    [
      'staleClientTimeout in seconds (30, as the Ruby gem takes it)',
      { staleClientTimeout: 30 },
      RangeError,
      /^Expected `staleClientTimeout` to be at least 100 milliseconds \(30 seconds is 30000\), got 30$/,
    ],
    [
      'staleClientTimeout just below the shortest lease',
      { staleClientTimeout: 99.9 },
      RangeError,
      /at least 100 milli/,
    ],
    ['expiration: Infinity', { expiration: Infinity }, RangeError, /expiration/],
    ['expiration: -1', { expiration: -1 }, RangeError, /expiration/],
    ['useLocalTime: "yes"', { useLocalTime: 'yes' }, TypeError, /useLocalTime/],
    ['functions: 1', { functions: 1 }, TypeError, /`functions` to be a boolean/],
    ['waitSlice: 5', { waitSlice: 5 }, RangeError, /waitSlice/],
    ['waitSlice: 5e9', { waitSlice: 5e9 }, RangeError, /waitSlice/],
    ['maxBlockingConnections: 0', { maxBlockingConnections: 0 }, RangeError, /maxBlockingConnections/],
    ['redis: {}', { redis: {} }, TypeError, /redis/],
    ['url: ""', { url: '' }, TypeError, /url/],
    ['keyPrefix: ""', { keyPrefix: '' }, TypeError, /`keyPrefix` to end with ':'/],
    ['keyPrefix: ":"', { keyPrefix: ':' }, TypeError, /`keyPrefix` to end with ':' after at least one character/],
    ['keyPrefix without the trailing ":"', { keyPrefix: 'APP1' }, TypeError, /`keyPrefix` to end with ':'.*got "APP1"/],
    ['keyPrefix: 42', { keyPrefix: 42 }, TypeError, /`keyPrefix` to be a string/],
    [
      'keyPrefix with a brace (a cluster hash tag)',
      { keyPrefix: '{APP1}:' },
      TypeError,
      /`keyPrefix` to have no `\{` or `\}`/,
    ],
    ['keyPrefix with a glob character', { keyPrefix: 'APP*:' }, TypeError, /`keyPrefix` to have no glob character/],
    ['keyPrefix with a space', { keyPrefix: 'APP 1:' }, TypeError, /`keyPrefix` to have no whitespace/],
    [
      'keyPrefix with a control character',
      { keyPrefix: 'APP\n:' },
      TypeError,
      /`keyPrefix` to have no whitespace, control/,
    ],
    [
      'keyPrefix beyond 256 characters',
      { keyPrefix: `${'A'.repeat(256)}:` },
      RangeError,
      /`keyPrefix` to be at most 256/,
    ],
  ])('%s', (_, options, type, message) => {
    const create = () => new Semaphore('valid', options as never);
    expect(create).toThrow(type);
    expect(create).toThrow(message);
  });

  test('a well-formed keyPrefix is accepted, and the Mutex takes it too', () => {
    for (const keyPrefix of ['APP1:', 'app1:SEMAPHORE:', 'team.a/b-c_d:', 'APP:EU:', 'приложение:']) {
      expect(new Semaphore('valid', { keyPrefix }).name).toBe('valid');
      expect(new Mutex('valid', { keyPrefix }).name).toBe('valid');
    }
    expect(() => new Mutex('valid', { keyPrefix: 'APP1' })).toThrow(TypeError);
  });

  test('the shortest lease is 100 ms, for a Semaphore, a Mutex and a lock manager alike', () => {
    expect(new Semaphore('valid', { staleClientTimeout: 100 }).name).toBe('valid');
    expect(new Semaphore('valid', { staleClientTimeout: null }).name).toBe('valid');
    expect(() => new Mutex('valid', { staleClientTimeout: 60 })).toThrow(/at least 100 milliseconds/);
    expect(() => createLocks({ redis: fixture.redis, staleClientTimeout: 5 })).toThrow(/at least 100 milliseconds/);
  });

  test('options must be an object', () => {
    expect(() => new Semaphore('valid', null as never)).toThrow(TypeError);
  });

  test('lock rejects negative, NaN and non-number timeouts, and a non-function callback', async () => {
    const sem = fixture.semaphore();
    await expect(sem.lock(-1)).rejects.toThrow(RangeError);
    await expect(sem.lock(NaN)).rejects.toThrow(TypeError);
    await expect(sem.lock('10' as never)).rejects.toThrow(TypeError);
    await expect(sem.lock(10, 'not a function' as never)).rejects.toThrow(/second argument of lock to be a function/);
    expect(await fixture.redis.exists(`SEMAPHORE:${sem.name}:EXISTS`)).toBe(0);
  });

  test('token arguments must be strings', async () => {
    const sem = fixture.semaphore();
    await expect(sem.unlock(7 as never)).rejects.toThrow(TypeError);
    await expect(sem.signal(7 as never)).rejects.toThrow(/signal to be a string/);
    await expect(sem.refresh({} as never)).rejects.toThrow(TypeError);
    await expect(sem.isLocked(null as never)).rejects.toThrow(TypeError);
    await expect(sem.consume([] as never)).rejects.toThrow(TypeError);
    expect(await fixture.redis.exists(`SEMAPHORE:${sem.name}:EXISTS`)).toBe(0);
  });

  test('the watchdog interval must be positive; releaseStaleLocks works without a lease of its own', async () => {
    // Holders' leases travel with their grants, so an instance that opted out can still reclaim.
    const sem = fixture.semaphore({ staleClientTimeout: null });
    await expect(sem.releaseStaleLocks()).resolves.toBe(0);
    await sem.startWatchdog(50).stop();
    expect(() => sem.startWatchdog(0)).toThrow(RangeError);
  });
});
