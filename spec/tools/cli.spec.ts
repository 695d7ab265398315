import { spawn } from 'node:child_process';
import { semaphoreKeys } from '../../lib/redis/keys';
import { useFixture } from '../support/fixture';
import { CLI, runCli, runMain, startDashboard, type CliResult } from '../support/cli';
import { blockedClients, redisUrl, uniqueName, until } from '../support/redis';
import { freePort } from '../support/redis-server';

const fx = useFixture();

// The real binary (runCli) is checked for its output and exit codes in the status, missing-semaphore
// and usage tests, and for Ctrl-C; the other tests run what it runs, main() of the built CLI, in this
// process (runMain): a Node process per command cost most of this spec's time. On a loaded machine
// one run of the binary takes a second or two.
jest.setTimeout(90_000);

/** A semaphore with `holders` tokens held by real holders (labelled) and `waiters` blocked waiters. */
async function busy(resources: number, holders: number, waiters: number, name = uniqueName('cli'), waitMs = 20_000) {
  const holderSem = fx.semaphore({ resources, owner: 'holder@host-a' }, name);
  const waiterSem = fx.semaphore({ resources, owner: 'waiter@host-b' }, name);
  const tokens: string[] = [];
  for (let i = 0; i < holders; i++) tokens.push((await holderSem.lock(0)) as string);
  const blockedBefore = await blockedClients(fx.redis);
  const waiting = Array.from({ length: waiters }, () => waiterSem.lock(waitMs));
  await until(async () => (await blockedClients(fx.redis)) >= blockedBefore + waiters, 10_000, 'waiters to block');
  return { name, holderSem, waiterSem, tokens, waiting };
}

describe('status', () => {
  test('shows tokens, holders with age, fence and owner, and waiters; --json the same as data', async () => {
    const { name, tokens, waiting, holderSem } = await busy(2, 2, 1);
    const text = await runCli(['status', name]);
    expect(text).toMatchObject({ code: 0, stderr: '' });
    expect(text.stdout).toContain(`semaphore  ${name}`);
    expect(text.stdout).toContain('tokens     2 (2 held, 0 free)');
    expect(text.stdout).toContain('waiting    1');
    expect(text.stdout).toMatch(/TOKEN\s+LEASE\s+HELD FOR\s+REFRESHED AGO\s+SINCE \(UTC\)\s+FENCE\s+OWNER/);
    expect(text.stdout.match(/holder@host-a/g)).toHaveLength(2);
    // Each holder's lease, live ones ending in about 30 s; nothing marked.
    expect(text.stdout.match(/ ends in (2\d|30)\.\ds /g)).toHaveLength(2);
    expect(text.stdout).toMatch(/^holders {4}2$/m);
    expect(text.stdout).not.toMatch(/EXPIRED|OVERDUE/);

    const json = await runCli(['status', name, '--json']);
    expect(json.code).toBe(0);
    const status = JSON.parse(json.stdout);
    expect(status).toMatchObject({
      name,
      exists: true,
      tokens: 2,
      held: 2,
      available: 0,
      collected: 0,
      collector: null,
      waiting: 1,
      expired: 0,
      overdue: 0,
    });
    expect(status.holders.map((h: { token: string }) => h.token).sort()).toEqual([...tokens].sort());
    for (const holder of status.holders) {
      expect(holder).toMatchObject({
        owner: 'holder@host-a',
        fence: expect.any(Number),
        grantId: expect.any(String),
        leaseMs: 30_000,
        expired: false,
        overdue: false,
      });
      expect(Date.parse(holder.leaseEndsAt)).toBe(Date.parse(holder.refreshedAt) + 30_000);
      expect(holder.leaseLeftMs).toBe(Date.parse(holder.leaseEndsAt) - Date.parse(status.now));
      expect(holder.leaseLeftMs).toBeGreaterThan(20_000);
      expect(holder.refreshedMs).toBeLessThanOrEqual(holder.heldMs);
      expect(Date.parse(holder.refreshedAt)).toBeGreaterThanOrEqual(Date.parse(holder.since));
      expect(holder.heldMs).toBeGreaterThanOrEqual(0);
      expect(Date.parse(holder.since)).toBeLessThanOrEqual(Date.parse(status.now));
    }
    await holderSem.unlock(tokens[0]);
    await expect(waiting[0]).resolves.toBe(tokens[0]);
  });

  test('a semaphore that does not exist: exit 3, a clear message; --json puts the error on stdout', async () => {
    const name = uniqueName('cli-missing');
    expect(await runCli(['status', name])).toEqual({
      code: 3,
      stdout: '',
      stderr: `redis-token-semaphore: semaphore "${name}" does not exist (no SEMAPHORE:${name}:EXISTS key)\n`,
    });
    const json = await runCli(['status', name, '--json']);
    expect(json.code).toBe(3);
    expect(JSON.parse(json.stdout)).toEqual({ error: { code: 'not_found', message: expect.stringContaining(name) } });
  });

  test('control characters in names and owner labels are shown escaped, never sent to the terminal', async () => {
    const name = uniqueName('cli-\x1b[2J');
    const sem = fx.semaphore({ owner: 'evil\x1b]0;title\x07label' }, name);
    await sem.lock(0);
    const { code, stdout } = await runMain(['status', name]);
    expect(code).toBe(0);
    // eslint-disable-next-line no-control-regex -- what is checked is that no control character is printed
    expect(stdout).not.toMatch(/[\x00-\x09\x0b-\x1f]/);
    expect(stdout).toContain('cli-\\x1b[2J');
    expect(stdout).toContain('evil\\x1b]0;title\\x07label');
  });

  test('a holder whose renewals are overdue is flagged before its lease ends; an expired one is marked and counted', async () => {
    const name = uniqueName('cli-overdue');
    const sem = fx.semaphore({ resources: 3 }, name);
    await sem.existsOrCreate();
    const keys = semaphoreKeys(name);
    const [seconds] = (await fx.redis.sendCommand(['TIME'])) as [string, string];
    const now = Number(seconds);
    // Grant records as this library writes them: a 600 s lease last renewed 500 s ago (overdue: more
    // than two thirds unrenewed), and a 60 s lease last renewed 100 s ago (expired 40 s ago).
    await fx.redis.lRem(keys.available, 0, '0');
    await fx.redis.lRem(keys.available, 0, '1');
    await fx.redis.hSet(keys.grabbed, '0', `${now - 500}.000000 spec0.1 7 600000 ${now - 900}.000000 hung@host`);
    await fx.redis.hSet(keys.grabbed, '1', `${now - 100}.000000 spec0.2 8 60000 ${now - 100}.000000 dead@host`);
    const text = await runMain(['status', name]);
    expect(text.stdout).toMatch(
      /^holders {4}2 \(1 lease EXPIRED: holder dead or cut off, release-stale frees it; 1 renewal OVERDUE\)$/m,
    );
    expect(text.stdout).toMatch(/^ {2}1 {6}EXPIRED (\d\d\.\ds|1m \d\ds) ago +1m \d\ds +1m \d\ds .* dead@host$/m);
    expect(text.stdout).toMatch(
      /^ {2}0 {6}ends in (1m \d\ds|\d\d\.\ds), RENEWAL OVERDUE +15m \d\ds +8m \d\ds .* hung@host$/m,
    );
    const json = JSON.parse((await runMain(['status', name, '--json'])).stdout);
    expect(json).toMatchObject({ expired: 1, overdue: 1 });
    const list = JSON.parse((await runMain(['list', name, '--json'])).stdout);
    expect(list.semaphores).toEqual([expect.objectContaining({ name, held: 2, expired: 1, overdue: 1 })]);
    expect(list.semaphores[0].leaseLeftMs).toBeLessThan(-39_000);
  });

  test('C1 controls (U+009B: CSI), DEL and bidi controls (U+202E) are escaped in every output form, --json too', async () => {
    const name = uniqueName('cli-c1-\u009b2J-\u202egnp.exe-\u007f');
    const owner = 'pod\u009b31m\u2066x\u2069\u200f';
    await fx.semaphore({ owner }, name).lock(0);
    // Every character a terminal could act on: C0, DEL, C1, line separators, bidi controls.
    // eslint-disable-next-line no-control-regex -- these are what must never be printed raw
    const ACTIVE = /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]/;
    const outputs = [
      await runMain(['status', name]),
      await runMain(['status', name, '--json']),
      await runMain(['list', name]),
      await runMain(['list', name, '--json']),
      await runMain(['watch', name, '--count', '1']),
      await runMain(['watch', name, '--count', '1', '--json']),
      await runMain(['release', name, '0', '--dry-run']),
      await runMain(['release', name, '0', '--dry-run', '--json']),
      await runMain(['release', '--owner', owner, name, '--dry-run', '--json']),
      await runMain(['status', `${name}-missing`, '--json']),
      await runMain(['status', `${name}-missing`]),
    ];
    for (const { stdout, stderr } of outputs) {
      expect(stdout + stderr).not.toMatch(ACTIVE);
    }
    const [text, json, list, listJson] = outputs as [CliResult, CliResult, CliResult, CliResult];
    expect(text.stdout).toContain('cli-c1-\\x9b2J-\\u202egnp.exe-\\x7f');
    expect(text.stdout).toContain('pod\\x9b31m\\u2066x\\u2069\\u200f');
    expect(list.stdout).toContain('cli-c1-\\x9b2J-\\u202egnp.exe-\\x7f');
    // The JSON escapes them as \uNNNN, so it parses back to the very same strings.
    expect(json.stdout).toContain('\\u009b');
    expect(JSON.parse(json.stdout)).toMatchObject({ name, holders: [{ owner }] });
    expect(JSON.parse(listJson.stdout).semaphores).toEqual([expect.objectContaining({ name })]);
  });
});

test('list: every semaphore with its counts and leases, by SCAN', async () => {
  const { name } = await busy(3, 2, 0);
  const other = fx.semaphore({ resources: 1 });
  await other.existsOrCreate();
  // A semaphore whose keys Redis refuses to read is reported, and does not hide the others.
  const broken = uniqueName('cli-broken');
  await fx.redis.set(semaphoreKeys(broken).exists, '1');
  await fx.redis.set(semaphoreKeys(broken).available, 'not a list');
  const json = await runMain(['list', '--json']);
  expect(json.code).toBe(0);
  const { semaphores, truncated } = JSON.parse(json.stdout);
  expect(truncated).toBe(false);
  expect(semaphores).toContainEqual({
    name,
    tokens: 3,
    held: 2,
    available: 1,
    collected: 0,
    waiting: 0,
    expired: 0,
    overdue: 0,
    longestHeldMs: expect.any(Number),
    leaseLeftMs: expect.any(Number),
    longestWaitMs: null,
  });
  expect(semaphores).toContainEqual({
    name: other.name,
    tokens: 1,
    held: 0,
    available: 1,
    collected: 0,
    waiting: 0,
    expired: 0,
    overdue: 0,
    longestHeldMs: null,
    leaseLeftMs: null,
    longestWaitMs: null,
  });
  expect(semaphores).toContainEqual({ name: broken, error: expect.stringMatching(/^WRONGTYPE/) });
  const text = await runMain(['list']);
  expect(text.stdout).toMatch(/^NAME\s+TOKENS\s+HELD\s+FREE\s+WAITING\s+EXPIRED\s+LONGEST HELD\s+FIRST LEASE END$/m);
  expect(text.stdout).toMatch(new RegExp(`^${name}\\s+3\\s+2\\s+1\\s+0\\s+0\\s+\\S+\\s+ends in \\S+$`, 'm'));
  expect(text.stdout).toMatch(
    new RegExp(`^${broken}\\s+\\?\\s+\\?\\s+\\?\\s+\\?\\s+\\?\\s+\\?\\s+unreadable: WRONGTYPE`, 'm'),
  );
  expect((await runMain(['status', broken])).stderr).toContain('WRONGTYPE');
});

test('list [pattern] --held/--waiting/--expired --sort: many names filtered, numbers in natural order, trouble first', async () => {
  const base = uniqueName('cli-many').replace(/[^\w-]/g, '');
  const names = ['user:10', 'user:2', 'user:1', 'order:7'].map((n) => `${base}:${n}`);
  for (const name of names) await fx.semaphore({ resources: 2 }, name).existsOrCreate();
  await fx.semaphore({ resources: 2 }, `${base}:user:10`).lock(0);
  const { waiting, holderSem, tokens } = await busy(1, 1, 1, `${base}:order:30`, 120_000);
  // A dead holder: its lease (300 ms) is over and nobody refreshes it.
  const dead = `${base}:gpu`;
  await fx.semaphore({ resources: 2, staleClientTimeout: 300, autoRefresh: false, owner: 'gone@host' }, dead).lock(0);
  await new Promise((resolve) => setTimeout(resolve, 500));
  const namesOf = async (...args: string[]) => {
    const result = await runMain(['list', `${base}:*`, ...args, '--json']);
    expect(result.code).toBe(0);
    return JSON.parse(result.stdout).semaphores.map((s: { name: string }) => s.name.slice(base.length + 1));
  };
  await expect(namesOf()).resolves.toEqual(['gpu', 'order:7', 'order:30', 'user:1', 'user:2', 'user:10']);
  await expect(runMain(['list', `${base}:user:*`, '--json'])).resolves.toMatchObject({ code: 0 });
  expect(
    JSON.parse((await runMain(['list', `${base}:user:*`, '--json'])).stdout).semaphores.map(
      (s: { name: string }) => s.name,
    ),
  ).toEqual([`${base}:user:1`, `${base}:user:2`, `${base}:user:10`]);
  await expect(namesOf('--held')).resolves.toEqual(['gpu', 'order:30', 'user:10']);
  await expect(namesOf('--waiting')).resolves.toEqual(['order:30']);
  await expect(namesOf('--expired')).resolves.toEqual(['gpu']);
  await expect(namesOf('--sort', 'trouble')).resolves.toEqual([
    'gpu',
    'order:30',
    'user:10',
    'order:7',
    'user:1',
    'user:2',
  ]);
  const text = await runMain(['list', `${base}:*`, '--expired']);
  expect(text.stdout).toMatch(new RegExp(`^${base}:gpu\\s+2\\s+1\\s+1\\s+0\\s+1\\s+\\S+\\s+EXPIRED \\S+ ago$`, 'm'));
  const none = await runMain(['list', `${base}:nothing*`]);
  expect(none.stdout).toMatch(/^No semaphore matches/);
  expect((await runMain(['list', '--sort', 'size'])).code).toBe(2);
  expect((await runMain(['list', '--held', '--waiting'])).code).toBe(2);
  expect((await runMain(['list', 'a', 'b'])).code).toBe(2);
  const backwards = await runMain(['list', 'user:[z-a]']);
  expect(backwards.code).toBe(2);
  expect(backwards.stderr).toContain('Not a usable glob pattern');
  await holderSem.unlock(tokens[0] as string);
  await expect(waiting[0]).resolves.toBe(tokens[0]);
});

describe('release', () => {
  test('frees a held token: the blocked waiter gets it, and the old holder’s unlock puts nothing back', async () => {
    const { name, holderSem, tokens, waiting } = await busy(1, 1, 1);
    const token = tokens[0] as string;
    const result = await runMain(['release', name, token, '--json', '--yes']);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toMatchObject({ name, token, released: true });
    await expect(waiting[0]).resolves.toBe(token);
    await expect(holderSem.unlock(token)).resolves.toBe(false);
    const status = JSON.parse((await runMain(['status', name, '--json'])).stdout);
    expect(status).toMatchObject({ tokens: 1, held: 1, available: 0 });
    expect(status.holders[0].owner).toBe('waiter@host-b');
  });

  test('a token that is not held is refused with exit 3, and no token is added', async () => {
    const { name } = await busy(2, 1, 0);
    const result = await runMain(['release', name, '1', '--yes']);
    expect(result.code).toBe(3);
    expect(result.stderr).toContain('token "1" of semaphore');
    expect(result.stderr).toContain('is not held');
    expect(JSON.parse((await runMain(['status', name, '--json'])).stdout)).toMatchObject({ tokens: 2, available: 1 });
    expect((await runMain(['release', uniqueName('cli-missing'), '0', '--yes'])).code).toBe(3);
  });
});

test('release-stale with no option frees the expired-lease holder and nothing else; --ruby-older-than adds Ruby holders', async () => {
  const name = uniqueName('cli-stale');
  const sem = fx.semaphore({ resources: 5 }, name);
  const expired = fx.semaphore({ staleClientTimeout: 500, autoRefresh: false }, name);
  const live = (await sem.lock(0)) as string; // a 30 s lease, refreshed
  const unleased = (await fx.semaphore({ staleClientTimeout: null }, name).lock(0)) as string; // no lease at all
  const lapsed = (await expired.lock(0)) as string;
  // A Ruby gem holder: a plain stamp, 2 s old.
  const [seconds] = (await fx.redis.sendCommand(['TIME'])) as [string, string];
  const ruby = (await fx.redis.lPop(semaphoreKeys(name).available)) as string;
  await fx.redis.hSet(semaphoreKeys(name).grabbed, ruby, `${Number(seconds) - 2}.000000`);
  await new Promise((resolve) => setTimeout(resolve, 1500));
  const dry = await runMain(['release-stale', name, '--dry-run', '--json']);
  expect(JSON.parse(dry.stdout)).toMatchObject({
    name,
    rubyOlderThanMs: null,
    dryRun: true,
    release: [{ token: lapsed, expired: true }],
  });
  const result = await runMain(['release-stale', name, '--json', '--yes']);
  expect(result.code).toBe(0);
  expect(JSON.parse(result.stdout)).toEqual({ name, rubyOlderThanMs: null, released: 1 });
  await expect(sem.isLocked(lapsed)).resolves.toBe(false);
  for (const token of [live, unleased, ruby]) await expect(sem.isLocked(token)).resolves.toBe(true);
  // The Ruby age rule, asked for by name.
  const aged = await runMain(['release-stale', name, '--ruby-older-than', '1s', '--json', '--yes']);
  expect(JSON.parse(aged.stdout)).toEqual({ name, rubyOlderThanMs: 1000, released: 1 });
  await expect(sem.isLocked(ruby)).resolves.toBe(false);
  for (const token of [live, unleased]) await expect(sem.isLocked(token)).resolves.toBe(true);
  const renamed = await runMain(['release-stale', name, '--older-than', '1s', '--yes']);
  expect(renamed.code).toBe(2);
  expect(renamed.stderr).toContain('--ruby-older-than');
  expect((await runMain(['release-stale', name, '--ruby-older-than', '30', '--yes'])).code).toBe(2);
  expect((await runMain(['release-stale', name, '--ruby-older-than', '50ms', '--yes'])).stderr).toContain(
    'at least 100ms',
  );
});

describe('resize', () => {
  test('growing adds new tokens, which blocked waiters get at once', async () => {
    const { name, waiting } = await busy(2, 2, 2);
    const result = await runMain(['resize', name, '4', '--json']);
    expect(result.code).toBe(0);
    expect(JSON.parse(result.stdout)).toEqual({ name, before: 2, after: 4, held: 2 });
    expect((await Promise.all(waiting)).sort()).toEqual(['2', '3']);
  });

  test('shrinking retires free tokens only, the highest first, and never below the held ones', async () => {
    const { name, tokens, holderSem } = await busy(5, 2, 0);
    const refused = await runMain(['resize', name, '1']);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('2 tokens are held (nothing changed');
    expect((await runMain(['resize', name, '3'])).stdout).toContain('from 5 to 3 tokens');
    expect((await holderSem.allTokens()).sort()).toEqual(['0', '1', '2']);
    expect(tokens.sort()).toEqual(['0', '1']);
    expect((await runMain(['resize', name, '2'])).code).toBe(0);
    await expect(holderSem.availableCount()).resolves.toBe(0);
    expect((await runMain(['resize', uniqueName('cli-missing'), '2'])).code).toBe(3);
  });
});

test('delete removes the semaphore; a second delete is exit 3', async () => {
  const { name, holderSem, tokens } = await busy(2, 1, 0);
  expect(await runMain(['delete', name, '--yes'])).toMatchObject({ code: 0, stdout: `Deleted semaphore "${name}".\n` });
  await expect(holderSem.exists()).resolves.toBe(false);
  await expect(holderSem.unlock(tokens[0])).resolves.toBe(false);
  expect((await runMain(['delete', name, '--yes'])).code).toBe(3);
});

test('watch refreshes --count times, then exits 0', async () => {
  const { name } = await busy(2, 1, 0);
  const json = await runMain(['watch', name, '--count', '3', '--interval', '100ms', '--json']);
  expect(json.code).toBe(0);
  const frames = json.stdout
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));
  expect(frames).toHaveLength(3);
  expect(frames.every((f) => f.name === name && f.held === 1)).toBe(true);
  expect(new Set(frames.map((f) => f.now)).size).toBe(3);
  const text = await runMain(['watch', name, '--count', '2', '--interval', '100ms']);
  expect(text.stdout.match(/^--- .* UTC, every 100ms$/gm)).toHaveLength(2);
  expect((await runMain(['watch', uniqueName('cli-missing'), '--count', '1'])).code).toBe(3);
});

test('watch stops on Ctrl-C (SIGINT) with exit 0', async () => {
  const { name } = await busy(1, 1, 0);
  const child = spawn(process.execPath, [CLI, 'watch', name, '--interval', '5s'], {
    env: { ...process.env, REDIS_URL: redisUrl() },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  child.stdout.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
  await until(() => stdout.includes('holders'), 15_000, 'the first frame');
  const sent = Date.now();
  child.kill('SIGINT');
  await expect(exited).resolves.toBe(0);
  expect(Date.now() - sent).toBeLessThan(4000); // it does not sit out the 5 s interval
});

test('--prefix: every command and the dashboard address the semaphores under that key prefix, and only them', async () => {
  const keyPrefix = `${uniqueName('CLI').replace(/[^A-Za-z0-9]/g, '')}:`;
  const name = uniqueName('cli-prefixed');
  const holder = fx.semaphore({ resources: 2, owner: 'prefixed@host', keyPrefix }, name);
  const token = (await holder.lock(0)) as string;
  const list = await runMain(['list', '--prefix', keyPrefix, '--json']);
  expect(list.code).toBe(0);
  expect(JSON.parse(list.stdout).semaphores).toEqual([
    expect.objectContaining({ name, tokens: 2, held: 1, available: 1, waiting: 0, expired: 0 }),
  ]);
  expect(
    JSON.parse((await runMain(['list', '--json'])).stdout).semaphores.map((s: { name: string }) => s.name),
  ).not.toContain(name);
  expect(JSON.parse((await runMain(['status', name, '--prefix', keyPrefix, '--json'])).stdout).holders[0].owner).toBe(
    'prefixed@host',
  );
  // Without the prefix it is not there, and the message names the key looked for.
  const missing = await runMain(['status', name]);
  expect(missing.code).toBe(3);
  expect(missing.stderr).toContain(`no SEMAPHORE:${name}:EXISTS key`);
  expect((await runMain(['status', uniqueName('nope'), '--prefix', keyPrefix])).stderr).toContain(`no ${keyPrefix}`);
  expect((await runMain(['release', name, token, '--prefix', keyPrefix, '--yes'])).code).toBe(0);
  await expect(holder.isLocked(token)).resolves.toBe(false);
  expect((await runMain(['resize', name, '3', '--prefix', keyPrefix])).code).toBe(0);
  await expect(holder.availableCount()).resolves.toBe(3);
  expect((await runMain(['watch', name, '--prefix', keyPrefix, '--count', '1', '--json'])).code).toBe(0);
  expect((await runMain(['release-stale', name, '--prefix', keyPrefix, '--yes'])).code).toBe(0);
  // A bad prefix is a usage error, before anything is sent.
  for (const bad of ['APP1', '{APP1}:', 'APP*:', '']) {
    const result = await runMain(['list', '--prefix', bad]);
    expect({ bad, code: result.code }).toEqual({ bad, code: 2 });
    expect(result.stderr).toContain('--prefix');
  }
  const dashboard = await startDashboard(redisUrl(), ['--prefix', keyPrefix, '--read-only']);
  try {
    expect(dashboard.output()).toContain(`(keys ${keyPrefix}*)`);
    const { semaphores } = (await (await fetch(`${dashboard.url}api/semaphores`)).json()) as {
      semaphores: Array<{ name: string }>;
    };
    expect(semaphores.map((s) => s.name)).toEqual([name]);
  } finally {
    await dashboard.stop();
  }
  expect((await runMain(['delete', name, '--prefix', keyPrefix, '--yes'])).code).toBe(0);
  expect(await fx.redis.keys(`${keyPrefix}*`)).toEqual([]);
});

test('usage errors are exit 2 with a hint; --help is exit 0; an unreachable Redis is exit 1', async () => {
  for (const args of [
    [],
    ['frobnicate'],
    ['status'],
    ['status', 'a', 'b'],
    ['status', 'a', '--nope'],
    ['resize', 'a', '0'],
    ['status', 'a', '--count', '2'],
  ]) {
    const result = await runCli(args);
    expect({ args, code: result.code }).toEqual({ args, code: 2 });
  }
  expect((await runCli(['frobnicate'])).stderr).toContain("Try 'redis-token-semaphore --help'.");
  const help = await runCli(['--help']);
  expect(help.code).toBe(0);
  expect(help.stdout).toContain('Exit codes:');
  const port = await freePort();
  const down = await runCli(['status', 'x', '--url', `redis://:secret@127.0.0.1:${port}`]);
  expect(down.code).toBe(1);
  expect(down.stderr).toContain(`cannot connect to redis://:***@127.0.0.1:${port}`);
  expect(down.stderr).not.toContain('secret');
});
