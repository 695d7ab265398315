/**
 * Security and configuration: the whole API as an ACL user restricted to exactly the minimal ACL the
 * README documents; the whole API over TLS (rediss://) with a throwaway CA made by openssl; and names
 * and payloads that must not corrupt other semaphores' keys.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createClient } from 'redis';
import { Mutex, Semaphore, type SemaphoreOptions } from '../../lib';
import { documentedAcl } from '../support/acl';
import { snapshot, useFixture } from '../support/fixture';
import { freePort, startRedisServer, type RedisServer } from '../support/redis-server';
import { sleep, uniqueName, until, type Client } from '../support/redis';
import { replyField } from '../support/script-calls';

const ROOT = join(__dirname, '..', '..');

/**
 * Runs every public method once against `options` (a client or a url), including a contended wait
 * (BLMOVE on a connection of its own), a timeout, the callback form, expiration and a reclaim.
 */
async function exerciseTheWholeApi(options: SemaphoreOptions, inspect: Client): Promise<void> {
  const name = uniqueName('api');
  const sem = new Semaphore(name, { ...options, resources: 2, staleClientTimeout: 60_000, waitSlice: 200 });
  const other = new Semaphore(name, { ...options, resources: 2, staleClientTimeout: 60_000, waitSlice: 200 });
  const mutex = new Mutex(uniqueName('api'), { ...options, expiration: 60_000 });
  try {
    expect(await sem.exists()).toBe(false);
    expect(await sem.availableCount()).toBe(2);
    await sem.existsOrCreate();
    expect(await sem.exists()).toBe(true);
    expect(await sem.lock()).toBe('0');
    expect(await sem.lock(0)).toBe('1');
    expect(await other.lock(0)).toBeNull();
    expect(await other.lock(50)).toBeNull(); // blocks a slice, times out
    const waiting = other.lock(5000); // blocks in BLMOVE
    await sleep(100);
    expect(await sem.refresh('0')).toBe(true);
    expect(await sem.isLocked()).toBe(true);
    expect(await sem.isLocked('1')).toBe(true);
    expect(await sem.unlock('1')).toBe(1);
    expect(await waiting).toBe('1');
    expect((await sem.allTokens()).sort()).toEqual(['0', '1']);
    expect(await other.consume('1')).toBe(true);
    expect(await sem.signal('1')).toBe(1);
    expect(await other.wait(0)).toBe('1');
    // A holder that looks dead is reclaimed, by a call and by the watchdog.
    await inspect.hSet(`SEMAPHORE:${name}:GRABBED`, '1', '1000.000000');
    expect(await sem.releaseStaleLocks()).toBe(1);
    await inspect.hSet(`SEMAPHORE:${name}:GRABBED`, '0', '1000.000000');
    const watchdog = sem.startWatchdog(50, { onError: (error) => void expect(error).toBeUndefined() });
    await until(async () => (await sem.availableCount()) === 2, 3000, 'the watchdog');
    await watchdog.stop();
    expect(await sem.unlock('0')).toBe(false); // reclaimed: told, nothing pushed
    expect(await mutex.lock(1000, async (token) => `ran with ${token}`)).toBe('ran with 0');
    expect(await inspect.pTTL(`SEMAPHORE:${mutex.name}:AVAILABLE`)).toBeGreaterThan(0);
    const fresh = await sem.signal();
    expect(typeof fresh).toBe('number');
    await sem.delete();
    await mutex.delete();
    expect(await sem.exists()).toBe(false);
    expect(await inspect.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
  } finally {
    await Promise.all([sem.close(), other.close(), mutex.close()]);
  }
}

describe('the minimal ACL', () => {
  test('the whole API runs as a user restricted to exactly the README ACL, with nothing denied', async () => {
    const server = await startRedisServer();
    const admin = createClient({ url: server.url });
    admin.on('error', () => undefined);
    await admin.connect();
    try {
      const rules = documentedAcl({ password: 's3cret' });
      await admin.sendCommand(['ACL', 'SETUSER', 'semaphore', 'reset', ...rules]);
      const url = server.url.replace('redis://', 'redis://semaphore:s3cret@');
      // With the semaphore's own client, and with a client the caller made; `functions: false`, as
      // OPERATIONS.md says for this ACL, which leaves out FUNCTION LOAD.
      await exerciseTheWholeApi({ url, functions: false }, admin);
      const client = createClient({ url });
      client.on('error', () => undefined);
      await client.connect();
      await exerciseTheWholeApi({ redis: client, functions: false }, admin);
      await client.quit();
      expect(await admin.sendCommand(['ACL', 'LOG'])).toEqual([]);
      expect(await admin.info('errorstats')).not.toMatch(/NOPERM/);
      // With the default, the same user works too: its only refused command is one FUNCTION LOAD
      // per client (at first use), after which it calls by EVALSHA.
      await exerciseTheWholeApi({ url }, admin);
      const log = (await admin.sendCommand(['ACL', 'LOG'])) as unknown[];
      expect(log.length).toBeGreaterThan(0);
      expect(log.map((entry) => replyField(entry, 'object'))).toEqual(log.map(() => 'function|load'));
      expect(Number(/^cmdstat_fcall:calls=(\d+)/m.exec(await admin.info('commandstats'))?.[1] ?? 0)).toBe(0);
      // And the ACL really restricts: other keys and other commands are refused.
      const probe = createClient({ url });
      probe.on('error', () => undefined);
      await probe.connect();
      expect(String(await probe.get('other:key').catch((error: unknown) => error))).toMatch(/NOPERM/);
      expect(String(await probe.sendCommand(['FLUSHALL']).catch((error: unknown) => error))).toMatch(/NOPERM/);
      await probe.disconnect();
    } finally {
      await admin.quit().catch(() => undefined);
      await server.stop();
    }
  });

  test('the ACL grants exactly the commands the library sends: none missing, none extra', () => {
    const granted = documentedAcl()
      .filter((rule) => rule.startsWith('+') && !rule.startsWith('+@'))
      .map((rule) => rule.slice(1).toUpperCase());
    const lua = readdirSync(join(ROOT, 'lib', 'redis', 'scripts'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.lua'))
      .map((file) => readFileSync(join(ROOT, 'lib', 'redis', 'scripts', file), 'utf8'))
      .join('\n');
    // The library's TypeScript, not the operators' tools (lib/admin, lib/cli, lib/dashboard).
    const ts = readdirSync(join(ROOT, 'lib'), { recursive: true, encoding: 'utf8' })
      .filter((file) => file.endsWith('.ts') && !/^(admin|cli|dashboard)\//.test(file))
      .map((file) => readFileSync(join(ROOT, 'lib', file), 'utf8'))
      .join('\n');
    const fromScripts = [...lua.matchAll(/redis\.call\('([A-Z]+)'/g)].map((match) => match[1] ?? '');
    // Commands sent directly: sendCommand(['X', …]), command('…', ['X', …]), runScript (EVALSHA, EVAL).
    const direct = [...ts.matchAll(/\[\s*'([A-Z]+)'(?:,\s*'([A-Z]+)')?/g)].map((match) =>
      ['SCRIPT', 'CLIENT', 'FUNCTION'].includes(match[1] ?? '') ? `${match[1]}|${match[2]}` : (match[1] ?? ''),
    );
    const used = new Set([...fromScripts, ...direct, 'EVAL']);
    // The function library's commands (the `functions` option) are the documented optional grant.
    const optional = /^ACL SETUSER \w+ .*<the commands above> (.+)$/m.exec(
      readFileSync(join(ROOT, 'docs', 'OPERATIONS.md'), 'utf8'),
    )?.[1];
    expect(
      optional
        ?.split(' ')
        .map((rule) => rule.slice(1).toUpperCase())
        .sort(),
    ).toEqual(['FCALL', 'FUNCTION|LOAD']);
    for (const command of ['FCALL', 'FUNCTION|LOAD']) {
      expect(used.has(command)).toBe(true);
      used.delete(command);
    }
    expect([...granted].sort()).toEqual([...used].filter((command) => /^[A-Z|]+$/.test(command)).sort());
  });
});

describe('TLS (rediss://)', () => {
  let dir = '';
  let server: RedisServer | undefined;
  let port = 0;
  let ca = '';

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rts-tls-'));
    const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
    // A throwaway CA, and a server certificate for 127.0.0.1 signed by it.
    run([
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'ca.key',
      '-out',
      'ca.crt',
      '-days',
      '1',
      '-subj',
      '/CN=rts-test-ca',
    ]);
    run([
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-keyout',
      'server.key',
      '-out',
      'server.csr',
      '-subj',
      '/CN=127.0.0.1',
    ]);
    writeFileSync(join(dir, 'san.ext'), 'subjectAltName=IP:127.0.0.1\n');
    run([
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.crt',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-out',
      'server.crt',
      '-days',
      '1',
      '-extfile',
      'san.ext',
    ]);
    ca = readFileSync(join(dir, 'ca.crt'), 'utf8');
    port = await freePort();
    // The test fixture's server, with a TLS port besides the plaintext one its readiness check uses.
    server = await startRedisServer([
      '--tls-port',
      String(port),
      '--tls-cert-file',
      join(dir, 'server.crt'),
      '--tls-key-file',
      join(dir, 'server.key'),
      '--tls-ca-cert-file',
      join(dir, 'ca.crt'),
      '--tls-auth-clients',
      'no',
    ]);
  });
  afterAll(async () => {
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the whole API over TLS, blocking connections included (they inherit the socket options)', async () => {
    const client = createClient({ url: `rediss://127.0.0.1:${port}`, socket: { tls: true, ca } });
    client.on('error', () => undefined);
    await client.connect();
    try {
      await exerciseTheWholeApi({ redis: client }, client);
    } finally {
      await client.quit();
    }
  });

  test('a client that does not trust the CA is refused: a typed error, not a plaintext fallback', async () => {
    const sem = new Semaphore(uniqueName('tls'), { url: `rediss://127.0.0.1:${port}` });
    try {
      await expect(sem.lock(0)).rejects.toMatchObject({ name: 'SemaphoreRedisError', semaphore: sem.name });
    } finally {
      await sem.close();
    }
  });
});

describe('names and payloads', () => {
  const fixture = useFixture();
  const tag = uniqueName('names');
  const NAMES = [
    `${tag}`,
    `${tag}:AVAILABLE`, // another semaphore's key name as a name
    `${tag}:INBOX`,
    `${tag}:INBOX:x`,
    `${tag} with spaces`,
    `${tag}:🚦 sémaphore 信号量`,
    `{${tag}}:tagged`,
    `${tag}}{`,
    `${tag}*?[glob]\\`,
    `${tag}\r\n\0`,
    `${tag}${'x'.repeat(10_000)}`,
  ];
  const PAYLOADS = ['', ' ', 'job:1', '{"url":"https://example.com/?a=1&b=2"}', '🚦\u0000\r\n', 'x'.repeat(100_000)];

  test('any string name: each semaphore touches only its own keys, and payloads come back intact', async () => {
    const redis = fixture.redis;
    const sems = NAMES.map((name) => fixture.semaphore({ resources: 2, waitSlice: 100 }, name));
    // Interleaved: every semaphore locks, signals every payload, and a waiter takes one over BLMOVE.
    for (const sem of sems) expect(await sem.lock(0)).toBe('0');
    for (const sem of sems) for (const payload of PAYLOADS) await sem.signal(payload);
    for (const sem of sems) {
      const waiter = fixture.semaphore({ resources: 2, waitSlice: 100 }, sem.name);
      // The initial "1" first, then the payloads in signal order (signal pushes at the tail).
      expect(await waiter.lock(0)).toBe('1');
      for (const payload of PAYLOADS) expect(await waiter.lock(0)).toBe(payload);
      const waiting = waiter.lock(5000);
      await sleep(50);
      expect(await sem.unlock('0')).toBe(1);
      expect(await waiting).toBe('0');
      for (const token of ['0', '1', ...PAYLOADS]) await waiter.unlock(token);
    }
    // Every key of the run is one of the expected four of one semaphore (names that extend another
    // name, such as "<tag>:AVAILABLE", make keys that extend its keys, never equal ones). No LEASES:
    // with at most 16 tokens held and none refreshed, no grant was indexed (includes/grant.lua).
    const expected = NAMES.flatMap((name) =>
      ['AVAILABLE', 'EXISTS', 'VERSION', 'FENCE'].map((suffix) => `SEMAPHORE:${name}:${suffix}`),
    );
    expect((await redis.keys(`*${tag}*`)).sort()).toEqual([...expected].sort());
    expect(new Set(expected).size).toBe(NAMES.length * 4);
    for (const sem of sems) {
      const state = await snapshot(redis, sem.name);
      expect(state.grabbed).toEqual({});
      expect([...state.available].sort()).toEqual(['0', '1', ...PAYLOADS].sort());
      expect(state.owners).toEqual({});
      expect(state.waiting).toEqual([]);
      await sem.delete();
    }
    // Deleting each removed exactly its own keys: nothing of any of them is left.
    for (const name of NAMES) expect(await redis.exists(`SEMAPHORE:${name}:AVAILABLE`)).toBe(0);
  });

  test('names that would break the key scheme are rejected with a clear error', () => {
    expect(() => new Semaphore('')).toThrow(
      new TypeError('Expected the semaphore name to be a non-empty string, got ""'),
    );
    // A lone surrogate has no UTF-8 encoding: it would be sent as U+FFFD, so two different names
    // ("\uD800" and "\uDC00") would share every key.
    expect(() => new Semaphore('bad\uD800')).toThrow(TypeError);
    expect(() => new Semaphore('bad\uD800')).toThrow(/well-formed/);
    expect(() => new Semaphore(42 as unknown as string)).toThrow(TypeError);
  });
});
