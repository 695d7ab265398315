import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir, userInfo } from 'node:os';
import { join } from 'node:path';
import { appendAudit, AUDIT_LENGTH } from '../../lib/admin/audit';
import { semaphoreKeys } from '../../lib/redis/keys';
import { useFixture } from '../support/fixture';
import { CLI, runCli, runMain, startDashboard, type CliResult } from '../support/cli';
import { blockedClients, connectClient, redisUrl, uniqueName, until, type Client } from '../support/redis';
import { freePort, startRedisServer, type RedisServer } from '../support/redis-server';

// The operator's side of the CLI and the dashboard (issue 18): --version, the guard on changes
// (--dry-run, a prompt on a terminal, --yes), release --owner, the audit log, /healthz and /metrics,
// and TLS with an ACL user. --version and the guard's refusals run the real binary (runCli, or on a
// pseudo-terminal); the other commands run its main() in this process (runMain, spec/support/cli.ts).

jest.setTimeout(60_000);

const fx = useFixture();
const ME = `${userInfo().username}@${hostname()}`;

/** Runs the CLI on a pseudo-terminal (util-linux `script`), answering `answer` to its [y/N] prompt. */
function runOnTerminal(args: readonly string[], answer: string): Promise<CliResult> {
  const quote = (word: string) => `'${word.replace(/'/g, `'\\''`)}'`;
  const child = spawn('script', ['-qec', [process.execPath, CLI, ...args].map(quote).join(' '), '/dev/null'], {
    env: { ...process.env, REDIS_URL: redisUrl() },
    stdio: ['pipe', 'pipe', 'pipe'],
  });
  let stdout = '';
  let answered = false;
  child.stdout.on('data', (chunk: Buffer) => {
    stdout += chunk.toString();
    if (!answered && stdout.includes('[y/N]')) {
      answered = true;
      child.stdin.write(`${answer}\n`);
    }
  });
  return new Promise((resolve) => child.once('exit', (code) => resolve({ code: code ?? -1, stdout, stderr: '' })));
}

/** A semaphore with grants of two owners: `pod-a:1` holds two tokens, `pod-b:2` one. */
async function held(resources = 4, name = uniqueName('ops')) {
  const a = fx.semaphore({ resources, owner: 'pod-a:1' }, name);
  const b = fx.semaphore({ resources, owner: 'pod-b:2' }, name);
  const tokens = { a: [(await a.lock(0)) as string, (await a.lock(0)) as string], b: (await b.lock(0)) as string };
  return { name, a, b, tokens };
}

const auditOf = async (name: string) =>
  JSON.parse((await runMain(['status', name, '--json'])).stdout).audit as Array<Record<string, string>>;

test('--version prints the package version', async () => {
  const { version } = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as {
    version: string;
  };
  expect(await runCli(['--version'])).toEqual({ code: 0, stdout: `${version}\n`, stderr: '' });
  expect(JSON.parse((await runCli(['-V', '--json'])).stdout)).toEqual({ version });
});

test('a change without --yes is refused when stdin is not a terminal (exit 2); --dry-run shows it and changes nothing', async () => {
  const { name, a, tokens } = await held();
  for (const args of [
    ['delete', name],
    ['release', name, '0'],
    ['release-stale', name],
    ['release', '--owner', 'pod-a:1', name],
  ]) {
    const refused = await runCli(args);
    expect({ args, code: refused.code }).toEqual({ args, code: 2 });
    expect(refused.stderr).toContain('stdin is not a terminal to ask on: add --yes to go ahead, or --dry-run');
  }
  const dry = await runCli(['release', '--owner', 'pod-a:*', name, '--dry-run', '--json']);
  expect(dry.code).toBe(0);
  expect(JSON.parse(dry.stdout)).toEqual({
    owner: 'pod-a:*',
    dryRun: true,
    semaphores: [
      { name, release: tokens.a.map((token) => expect.objectContaining({ token, owner: 'pod-a:1' })), released: [] },
    ],
  });
  const text = await runCli(['delete', name, '--dry-run']);
  expect(text.stdout).toContain(
    `Would delete semaphore "${name}": 4 tokens (3 held, 1 free), 0 waiting (dry run: nothing changed).`,
  );
  expect(text.stdout).toContain(semaphoreKeys(name).exists);
  expect((await runCli(['release', name, tokens.b, '--dry-run'])).stdout).toMatch(
    /Would release token "\d" .*\n.*\n\s+\d\s.*pod-b:2/,
  );
  expect((await runCli(['release-stale', name, '--dry-run'])).stdout).toContain(
    'Would release 0 tokens of "' + name + '" whose holder\'s lease has expired',
  );
  // Nothing changed, nothing logged.
  await expect(a.exists()).resolves.toBe(true);
  expect((await a.holders()).map((h) => h.token).sort()).toEqual([...tokens.a, tokens.b].sort());
  expect(await fx.redis.exists(semaphoreKeys(name).audit)).toBe(0);
});

test('on a terminal it asks: anything but y changes nothing (exit 1), y goes ahead', async () => {
  const { name, a, tokens } = await held();
  const no = await runOnTerminal(['release', name, tokens.b], 'n');
  expect(no.code).toBe(1);
  expect(no.stdout).toContain(`Release token "${tokens.b}" of "${name}"?`);
  expect(no.stdout).toContain('not confirmed; nothing changed');
  await expect(a.isLocked(tokens.b)).resolves.toBe(true);
  const yes = await runOnTerminal(['delete', name], 'y');
  expect(yes.code).toBe(0);
  expect(yes.stdout).toContain(`Delete semaphore "${name}": 4 tokens (3 held, 1 free), 0 waiting? [y/N]`);
  await expect(a.exists()).resolves.toBe(false);
});

test('release --owner frees only that owner’s grants, in every semaphore named; each release is logged with who and why', async () => {
  const first = await held(3);
  const second = await held(4);
  // A waiter on the first semaphore gets a freed token at once.
  const waiter = fx.semaphore({ resources: 3, owner: 'waiter' }, first.name);
  const before = await blockedClients(fx.redis);
  const waiting = waiter.lock(20_000);
  await until(async () => (await blockedClients(fx.redis)) > before, 10_000, 'the waiter to block');
  const result = await runMain([
    'release',
    '--owner',
    'pod-a:*',
    first.name,
    second.name,
    '--yes',
    '--reason',
    'pod-a died',
    '--json',
  ]);
  expect(result.code).toBe(0);
  const { semaphores } = JSON.parse(result.stdout);
  expect(semaphores.map((s: { released: Array<{ status: string }> }) => s.released.map((r) => r.status))).toEqual([
    ['released', 'released'],
    ['released', 'released'],
  ]);
  expect(first.tokens.a).toContain(await waiting);
  for (const { a, b, tokens } of [first, second]) {
    await expect(b.isLocked(tokens.b)).resolves.toBe(true);
    for (const token of tokens.a) await expect(a.unlock(token)).resolves.toBe(false);
  }
  const audit = await auditOf(second.name);
  expect(audit).toEqual(
    [...second.tokens.a].reverse().map((token) =>
      expect.objectContaining({
        action: 'release-owner',
        token,
        grantId: expect.stringMatching(/\S/),
        owner: 'pod-a:1',
        by: ME,
        reason: 'pod-a died',
        command: `redis-token-semaphore release --owner pod-a:* ${first.name} ${second.name}`,
        at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
      }),
    ),
  );
  const status = await runMain(['status', second.name]);
  expect(status.stdout).toMatch(
    /released {2}by operators, latest 2\n\s+AT \(UTC\)\s+ACTION\s+TOKEN\s+OWNER\s+BY\s+REASON\n.*release-owner\s+\d\s+pod-a:1\s+\S+\s+pod-a died/,
  );
  // An owner with no grant: nothing to do, exit 0; an exact label matches only itself.
  expect((await runMain(['release', '--owner', 'pod-a:', second.name, '--yes'])).stdout).toContain(
    'Nothing to release: 0 grants',
  );
  // A missing semaphore fails the whole command before anything is released.
  const missing = await runMain(['release', '--owner', 'pod-b:2', second.name, uniqueName('nope'), '--yes']);
  expect(missing.code).toBe(3);
  await expect(second.b.isLocked(second.tokens.b)).resolves.toBe(true);
});

test('release and release-stale are logged too; the log is capped near 1000 entries; delete removes it', async () => {
  const name = uniqueName('ops-log');
  const live = fx.semaphore({ resources: 3, owner: 'live' }, name);
  const lapsed = fx.semaphore({ resources: 3, owner: 'lapsed', staleClientTimeout: 300, autoRefresh: false }, name);
  const token = (await live.lock(0)) as string;
  const stale = (await lapsed.lock(0)) as string;
  await new Promise((resolve) => setTimeout(resolve, 600));
  expect((await runMain(['release-stale', name, '--ruby-older-than', '10s', '--yes', '--json'])).stdout).toContain(
    '"released":1',
  );
  const released = await runMain(['release', name, token, '--yes', '--json']);
  expect(JSON.parse(released.stdout)).toMatchObject({ released: true, token, owner: 'live' });
  expect(await auditOf(name)).toEqual([
    expect.objectContaining({ action: 'release', token, owner: 'live', by: ME, reason: '' }),
    expect.objectContaining({
      action: 'release-stale',
      token: stale,
      owner: 'lapsed',
      command: `redis-token-semaphore release-stale --ruby-older-than 10s ${name}`,
    }),
  ]);
  const scope = { redis: fx.redis, keyPrefix: 'SEMAPHORE:' };
  const entry = { action: 'release', token: '0', grantId: 'g', owner: 'o', by: 'spec', command: 'spec', reason: '' };
  for (let i = 0; i < 11; i++) await appendAudit(scope, name, Array(100).fill(entry));
  const length = await fx.redis.xLen(semaphoreKeys(name).audit);
  expect(length).toBeGreaterThanOrEqual(AUDIT_LENGTH);
  expect(length).toBeLessThan(1102);
  expect((await runMain(['delete', name, '--yes'])).code).toBe(0);
  expect(await fx.redis.keys(`SEMAPHORE:${name}:*`)).toEqual([]);
});

describe('a private Redis with TLS and an ACL user; the dashboard’s /healthz and /metrics', () => {
  let server: RedisServer;
  let dir: string;
  let tlsPort: number;
  const ca = () => join(dir, 'ca.pem');
  /** Clients on the private server, quit before it stops. */
  const clients: Client[] = [];
  const connect = async () => {
    const client = await connectClient(server.url);
    clients.push(client);
    return client;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'rts-tls-'));
    const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
    ssl(
      'req',
      '-x509',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-days',
      '2',
      '-subj',
      '/CN=spec CA',
      '-keyout',
      'ca.key',
      '-out',
      'ca.pem',
    );
    ssl(
      'req',
      '-newkey',
      'rsa:2048',
      '-nodes',
      '-subj',
      '/CN=127.0.0.1',
      '-keyout',
      'server.key',
      '-out',
      'server.csr',
    );
    writeFileSync(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
    ssl(
      'x509',
      '-req',
      '-in',
      'server.csr',
      '-CA',
      'ca.pem',
      '-CAkey',
      'ca.key',
      '-CAcreateserial',
      '-days',
      '2',
      '-extfile',
      'ext.cnf',
      '-out',
      'server.pem',
    );
    tlsPort = await freePort();
    server = await startRedisServer([
      '--tls-port',
      String(tlsPort),
      '--tls-cert-file',
      join(dir, 'server.pem'),
      '--tls-key-file',
      join(dir, 'server.key'),
      '--tls-ca-cert-file',
      ca(),
      '--tls-auth-clients',
      'no',
    ]);
    const admin = await connect();
    await admin.sendCommand(['ACL', 'SETUSER', 'ops', 'on', '>ops-secret', '~*', '+@all']);
    await admin.sendCommand(['ACL', 'SETUSER', 'no-log', 'on', '>no-log-secret', '~*', '+@all', '-xadd', '-xrevrange']);
  });
  afterAll(async () => {
    await Promise.all(clients.map((client) => client.quit()));
    await server?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  test('the CLI connects with --tls-ca, --user and --password (or $REDIS_PASSWORD); a wrong password is exit 1, never printed', async () => {
    const plain = await connect();
    const name = uniqueName('ops-tls');
    const sem = fx.semaphore({ redis: plain, owner: 'tls-holder' }, name);
    await sem.lock(0);
    const url = `rediss://127.0.0.1:${tlsPort}`;
    const status = await runMain([
      'status',
      name,
      '--url',
      url,
      '--tls-ca',
      ca(),
      '--user',
      'ops',
      '--password',
      'ops-secret',
      '--json',
    ]);
    expect(status.code).toBe(0);
    expect(JSON.parse(status.stdout).holders[0].owner).toBe('tls-holder');
    const fromEnv = await runMain(['release', name, '0', '--url', url, '--tls-ca', ca(), '--user', 'ops', '--yes'], {
      env: { REDIS_PASSWORD: 'ops-secret' },
    });
    expect(fromEnv.code).toBe(0);
    await expect(sem.isLocked('0')).resolves.toBe(false);
    const wrong = await runMain([
      'status',
      name,
      '--url',
      url,
      '--tls-ca',
      ca(),
      '--user',
      'ops',
      '--password',
      'not-it',
    ]);
    expect(wrong.code).toBe(1);
    expect(wrong.stderr).toContain(`cannot connect to ${url}`);
    expect(wrong.stderr).not.toContain('not-it');
    const untrusted = await runMain(['status', name, '--url', url, '--user', 'ops', '--password', 'ops-secret']);
    expect(untrusted.code).toBe(1);
    expect((await runMain(['status', name, '--tls-ca', join(dir, 'nope.pem')])).code).toBe(2);
  });

  test('a user that may not write or read the audit log still releases (with a warning) and sees the status', async () => {
    const plain = await connect();
    const name = uniqueName('ops-acl');
    const sem = fx.semaphore({ redis: plain }, name);
    await sem.lock(0);
    const url = server.url.replace('redis://', 'redis://no-log:no-log-secret@');
    const release = await runMain(['release', name, '0', '--url', url, '--yes']);
    expect(release.code).toBe(0);
    expect(release.stderr).toMatch(
      /^redis-token-semaphore: warning: released, but not recorded in the audit log: NOPERM/,
    );
    await expect(sem.isLocked('0')).resolves.toBe(false);
    const status = await runMain(['status', name, '--url', url]);
    expect(status.code).toBe(0);
    expect(status.stdout).toContain('released  (the audit log cannot be read: NOPERM');
  });

  test('/healthz answers 200 while Redis answers PING, 503 when not; /metrics has gauges for the --watch semaphores only', async () => {
    const plain = await connect();
    const watched = uniqueName('ops-metrics');
    const other = uniqueName('ops-other');
    const sem = fx.semaphore({ redis: plain, resources: 3 }, watched);
    await sem.lock(0);
    await fx.semaphore({ redis: plain }, other).existsOrCreate();
    const dashboard = await startDashboard(`rediss://127.0.0.1:${tlsPort}`, [
      '--tls-ca',
      ca(),
      '--user',
      'ops',
      '--password',
      'ops-secret',
      '--read-only',
      '--watch',
      watched,
      '--watch',
      'never-made',
    ]);
    try {
      const health = await fetch(`${dashboard.url}healthz`);
      expect([health.status, await health.text()]).toEqual([200, 'ok\n']);
      const metrics = await fetch(`${dashboard.url}metrics`);
      expect(metrics.headers.get('content-type')).toBe('text/plain; version=0.0.4; charset=utf-8');
      const text = await metrics.text();
      const series = text.split('\n').filter((line) => line !== '' && !line.startsWith('#'));
      expect(series).toContain('redis_token_semaphore_up 1');
      expect(series).toContain(`redis_token_semaphore_available{semaphore="${watched}"} 2`);
      expect(series).toContain(`redis_token_semaphore_held{semaphore="${watched}"} 1`);
      expect(series).toContain(`redis_token_semaphore_waiting{semaphore="${watched}"} 0`);
      expect(series).toContain('redis_token_semaphore_exists{semaphore="never-made"} 0');
      expect(
        series.find((line) => line.startsWith(`redis_token_semaphore_oldest_hold_age_seconds{semaphore="${watched}"}`)),
      ).toMatch(/ \d+(\.\d+)?$/);
      expect(text).not.toContain(other);
      expect(text).toContain('# TYPE redis_token_semaphore_held gauge');
      process.kill(server.pid, 'SIGSTOP'); // Redis stops answering
      try {
        const down = await fetch(`${dashboard.url}healthz`);
        expect(down.status).toBe(503);
        expect(await down.text()).toBe('Redis: no answer within 2000 ms\n');
        expect(await (await fetch(`${dashboard.url}metrics`)).text()).toContain('redis_token_semaphore_up 0');
      } finally {
        process.kill(server.pid, 'SIGCONT');
      }
      await until(async () => (await fetch(`${dashboard.url}healthz`)).status === 200, 10_000, 'healthz to recover');
    } finally {
      await dashboard.stop();
    }
  });
});
